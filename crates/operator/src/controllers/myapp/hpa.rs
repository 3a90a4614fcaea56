use app_operator_api::MyApp;
use k8s_openapi::api::autoscaling::v2::{
    CrossVersionObjectReference, HorizontalPodAutoscaler, HorizontalPodAutoscalerSpec, MetricSpec,
    MetricTarget, ResourceMetricSource,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;

use super::labels::child_metadata;

/// The HorizontalPodAutoscaler of a MyApp, only while autoscaling is enabled.
pub fn hpa(app: &MyApp, owner: OwnerReference) -> Option<HorizontalPodAutoscaler> {
    let scaling = app.spec.enabled_auto_scaling()?;
    Some(HorizontalPodAutoscaler {
        metadata: child_metadata(app, owner),
        spec: Some(HorizontalPodAutoscalerSpec {
            scale_target_ref: CrossVersionObjectReference {
                api_version: Some("apps/v1".into()),
                kind: "Deployment".into(),
                name: app.name_any(),
            },
            min_replicas: Some(scaling.min_replicas),
            max_replicas: scaling.max_replicas,
            metrics: Some(vec![MetricSpec {
                type_: "Resource".into(),
                resource: Some(ResourceMetricSource {
                    name: "cpu".into(),
                    target: MetricTarget {
                        type_: "Utilization".into(),
                        average_utilization: Some(scaling.target_cpu_utilization_percentage),
                        ..MetricTarget::default()
                    },
                }),
                ..MetricSpec::default()
            }]),
            ..HorizontalPodAutoscalerSpec::default()
        }),
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::super::labels::tests::{full_app, minimal_app, owner};
    use super::*;

    #[test]
    fn no_hpa_without_autoscaling() {
        let app = minimal_app();
        assert_eq!(hpa(&app, owner(&app)), None);
    }

    #[test]
    fn no_hpa_while_autoscaling_is_disabled() {
        let mut app = full_app();
        if let Some(scaling) = app.spec.auto_scaling.as_mut() {
            scaling.enabled = false;
        }
        assert!(app.spec.auto_scaling.is_some());
        assert_eq!(hpa(&app, owner(&app)), None);
    }

    #[test]
    fn full_hpa() {
        let app = full_app();
        let hpa = hpa(&app, owner(&app));
        assert!(hpa.is_some(), "autoscaling is enabled");
        insta::assert_yaml_snapshot!("full", hpa);
    }

    #[test]
    fn the_hpa_scales_the_apps_deployment_within_its_bounds() {
        let app = full_app();
        let spec = hpa(&app, owner(&app))
            .and_then(|h| h.spec)
            .expect("an HPA spec");
        let deployment = super::super::deployment(&app, owner(&app));
        let target = &spec.scale_target_ref;
        assert_eq!(
            (
                target.api_version.as_deref(),
                target.kind.as_str(),
                Some(target.name.as_str())
            ),
            (
                Some("apps/v1"),
                "Deployment",
                deployment.metadata.name.as_deref()
            )
        );
        assert_eq!((spec.min_replicas, spec.max_replicas), (Some(2), 10));
        let metrics = spec.metrics.unwrap_or_default();
        let targets: Vec<_> = metrics
            .iter()
            .filter_map(|m| m.resource.as_ref())
            .map(|r| {
                (
                    r.name.as_str(),
                    r.target.type_.as_str(),
                    r.target.average_utilization,
                )
            })
            .collect();
        assert_eq!(targets, [("cpu", "Utilization", Some(70))]);
    }
}
