use std::collections::BTreeMap;

use app_operator_api::MyApp;
use app_operator_api::myapp::{EnvVar, ResourceList};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    ConfigMapKeySelector, Container, ContainerPort, EnvVar as CoreEnvVar, EnvVarSource, PodSpec,
    PodTemplateSpec, ResourceRequirements, SecretKeySelector,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};

use super::labels::{child_metadata, selector_labels};
use crate::controllers::restricted::{pod_security_context, restrict};

/// The Deployment of a MyApp. While autoscaling is enabled `replicas` is left out, so the HPA
/// owns it (the seed set it to 0, which scaled the app to nothing).
pub fn deployment(app: &MyApp, owner: OwnerReference) -> Deployment {
    let spec = &app.spec;
    Deployment {
        metadata: child_metadata(app, owner),
        spec: Some(DeploymentSpec {
            replicas: spec
                .enabled_auto_scaling()
                .is_none()
                .then_some(spec.replicas),
            selector: LabelSelector {
                match_labels: Some(selector_labels(app)),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                // The ReplicaSet, not the operator, makes these Pods: without `managed-by` they stay
                // out of the operator's Pod cache (1000 MyApps put 1000 Pods, 2.5 MiB, in it).
                metadata: Some(ObjectMeta {
                    labels: Some(selector_labels(app)),
                    ..ObjectMeta::default()
                }),
                // `restricted`; the image must run as a numeric non-root user (its Pods say so
                // otherwise, and the MyApp's Ready condition quotes them). Its root filesystem
                // stays writable: the operator does not know where the app writes.
                spec: Some(restrict(
                    PodSpec {
                        containers: vec![Container {
                            name: "app".into(),
                            image: Some(spec.image.clone()),
                            ports: Some(vec![ContainerPort {
                                name: Some("http".into()),
                                container_port: spec.port,
                                protocol: Some("TCP".into()),
                                ..ContainerPort::default()
                            }]),
                            env: (!spec.env.is_empty())
                                .then(|| spec.env.iter().map(env_var).collect()),
                            resources: spec.resources.as_ref().map(|r| ResourceRequirements {
                                limits: r.limits.as_ref().map(quantities),
                                requests: r.requests.as_ref().map(quantities),
                                ..ResourceRequirements::default()
                            }),
                            ..Container::default()
                        }],
                        ..PodSpec::default()
                    },
                    pod_security_context(None),
                    false,
                )),
            },
            ..DeploymentSpec::default()
        }),
        status: None,
    }
}

fn env_var(env: &EnvVar) -> CoreEnvVar {
    CoreEnvVar {
        name: env.name.clone(),
        value: env.value.clone(),
        value_from: env.value_from.as_ref().map(|from| EnvVarSource {
            secret_key_ref: from.secret_key_ref.as_ref().map(|s| SecretKeySelector {
                name: s.name.clone(),
                key: s.key.clone(),
                optional: None,
            }),
            config_map_key_ref: from
                .config_map_key_ref
                .as_ref()
                .map(|c| ConfigMapKeySelector {
                    name: c.name.clone(),
                    key: c.key.clone(),
                    optional: None,
                }),
            ..EnvVarSource::default()
        }),
    }
}

/// Quantities are passed through as strings: the CRD schema validated their syntax, and the API
/// server, not this process, parses them (the seed's `MustParse` panicked on bad input).
fn quantities(list: &ResourceList) -> BTreeMap<String, Quantity> {
    [("cpu", &list.cpu), ("memory", &list.memory)]
        .into_iter()
        .filter_map(|(name, value)| Some((name.to_owned(), Quantity(value.clone()?.0))))
        .collect()
}

#[cfg(test)]
mod tests {
    use app_operator_api::myapp::AutoScalingSpec;

    use super::super::labels::tests::{full_app, minimal_app, owner};
    use super::*;

    fn container(deployment: &Deployment) -> Container {
        let mut containers = deployment
            .spec
            .clone()
            .and_then(|s| s.template.spec)
            .map(|p| p.containers)
            .unwrap_or_default();
        assert_eq!(containers.len(), 1, "one container");
        containers.remove(0)
    }

    #[test]
    fn minimal_deployment() {
        let app = minimal_app();
        insta::assert_yaml_snapshot!("minimal", deployment(&app, owner(&app)));
    }

    #[test]
    fn full_deployment() {
        let app = full_app();
        insta::assert_yaml_snapshot!("full", deployment(&app, owner(&app)));
    }

    #[test]
    fn the_pods_meet_the_restricted_standard_and_run_as_the_images_user() {
        let spec = deployment(&full_app(), owner(&full_app()))
            .spec
            .and_then(|s| s.template.spec)
            .unwrap_or_default();
        assert_eq!(
            crate::controllers::restricted::restricted_violations(&spec),
            Vec::<String>::new()
        );
        let pod = spec.security_context.unwrap_or_default();
        assert_eq!(pod.run_as_user, None);
    }

    #[test]
    fn replicas_are_left_to_the_hpa_only_while_autoscaling_is_enabled() {
        let mut app = full_app();
        let replicas = |app: &MyApp| deployment(app, owner(app)).spec.and_then(|s| s.replicas);
        assert_eq!(replicas(&app), None, "autoscaling enabled");

        app.spec.auto_scaling = Some(AutoScalingSpec {
            enabled: false,
            min_replicas: 2,
            max_replicas: 10,
            target_cpu_utilization_percentage: 70,
        });
        assert_eq!(
            replicas(&app),
            Some(3),
            "autoscaling configured but disabled"
        );

        app.spec.auto_scaling = None;
        assert_eq!(replicas(&app), Some(3), "no autoscaling");
        assert_eq!(replicas(&minimal_app()), Some(1), "the default replicas");
    }

    #[test]
    fn the_selector_matches_the_pod_template_whose_pods_stay_out_of_the_operators_cache() {
        let app = full_app();
        let spec = deployment(&app, owner(&app)).spec.expect("a spec");
        let template_labels = spec.template.metadata.and_then(|m| m.labels);
        assert_eq!(spec.selector.match_labels, template_labels);
        assert_eq!(spec.selector.match_expressions, None);
        let template_labels = template_labels.expect("template labels");
        assert!(!template_labels.contains_key("app.kubernetes.io/managed-by"));
    }

    #[test]
    fn the_container_exposes_the_apps_port_as_http() {
        let app = full_app();
        let ports = container(&deployment(&app, owner(&app)))
            .ports
            .unwrap_or_default();
        let shape: Vec<_> = ports
            .iter()
            .map(|p| (p.name.as_deref(), p.container_port, p.protocol.as_deref()))
            .collect();
        assert_eq!(shape, [(Some("http"), 9090, Some("TCP"))]);
    }

    #[test]
    fn a_minimal_app_sets_no_env_and_no_resources() {
        let app = minimal_app();
        let container = container(&deployment(&app, owner(&app)));
        // `None`, not an empty list: an empty list would be a field the operator owns.
        assert_eq!(container.env, None);
        assert_eq!(container.resources, None);
        assert_eq!(container.image.as_deref(), Some("nginx:1.27"));
    }

    #[test]
    fn env_values_and_references_are_passed_through() {
        let app = full_app();
        let env = container(&deployment(&app, owner(&app)))
            .env
            .unwrap_or_default();
        let shape: Vec<_> = env
            .iter()
            .map(|e| {
                let from = e.value_from.as_ref();
                (
                    e.name.as_str(),
                    e.value.as_deref(),
                    from.and_then(|f| f.secret_key_ref.as_ref())
                        .map(|s| (s.name.as_str(), s.key.as_str())),
                    from.and_then(|f| f.config_map_key_ref.as_ref())
                        .map(|c| (c.name.as_str(), c.key.as_str())),
                )
            })
            .collect();
        assert_eq!(
            shape,
            [
                ("LOG_LEVEL", Some("debug"), None, None),
                ("DB_PASSWORD", None, Some(("shop-db", "password")), None),
                ("FEATURES", None, None, Some(("shop-flags", "features"))),
            ]
        );
    }

    #[test]
    fn unset_quantities_are_left_out_not_emptied() {
        let app = full_app();
        let resources = container(&deployment(&app, owner(&app)))
            .resources
            .expect("resources");
        let names = |list: Option<BTreeMap<String, Quantity>>| {
            list.unwrap_or_default()
                .into_iter()
                .map(|(name, Quantity(value))| (name, value))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(resources.limits),
            [
                ("cpu".to_owned(), "500m".to_owned()),
                ("memory".to_owned(), "256Mi".to_owned())
            ]
        );
        assert_eq!(
            names(resources.requests),
            [("cpu".to_owned(), "100m".to_owned())]
        );
    }
}
