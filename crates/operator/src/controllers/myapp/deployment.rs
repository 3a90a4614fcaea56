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
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "app".into(),
                        image: Some(spec.image.clone()),
                        ports: Some(vec![ContainerPort {
                            name: Some("http".into()),
                            container_port: spec.port,
                            protocol: Some("TCP".into()),
                            ..ContainerPort::default()
                        }]),
                        env: (!spec.env.is_empty()).then(|| spec.env.iter().map(env_var).collect()),
                        resources: spec.resources.as_ref().map(|r| ResourceRequirements {
                            limits: r.limits.as_ref().map(quantities),
                            requests: r.requests.as_ref().map(quantities),
                            ..ResourceRequirements::default()
                        }),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }),
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
        .filter_map(|(name, value)| Some((name.to_owned(), Quantity(value.clone()?))))
        .collect()
}
