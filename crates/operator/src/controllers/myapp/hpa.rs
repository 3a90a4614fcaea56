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
