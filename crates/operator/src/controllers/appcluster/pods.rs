//! The tutorial's Pods, and which of them count, are ready, or go first on scale-down.

use std::collections::BTreeMap;

use app_operator_api::AppCluster;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::ResourceExt;

use crate::reconcile::{MANAGED_BY, MANAGED_BY_LABEL};

/// The label selector of an AppCluster's Pods (`app=<name>`, as in the tutorial).
pub fn selector(cluster: &AppCluster) -> String {
    format!("app={}", cluster.name_any())
}

/// A Pod as the tutorial makes it: `<name>-pod-<random>`, label `app: <name>`, one `nginx`
/// container. The `managed-by` label lets the operator watch only its own Pods.
pub fn pod(cluster: &AppCluster, owner: OwnerReference) -> Pod {
    let name = cluster.name_any();
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{name}-pod-")),
            namespace: cluster.namespace(),
            labels: Some(BTreeMap::from([
                ("app".to_owned(), name),
                (MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned()),
            ])),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "nginx".into(),
                image: Some("nginx:latest".into()),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        status: None,
    }
}

fn phase(pod: &Pod) -> Option<&str> {
    pod.status.as_ref()?.phase.as_deref()
}

/// Counts toward `size`: not being deleted, and not finished (failed or succeeded Pods are
/// replaced).
pub fn is_active(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none() && !matches!(phase(pod), Some("Failed" | "Succeeded"))
}

/// Finished and not yet being deleted: to be deleted so it can be replaced.
pub fn is_finished(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none() && matches!(phase(pod), Some("Failed" | "Succeeded"))
}

pub fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The `count` Pods to remove on scale-down: not-ready ones first, then the newest.
pub fn surplus(mut active: Vec<&Pod>, count: usize) -> Vec<&Pod> {
    active.sort_by(|a, b| {
        is_ready(a)
            .cmp(&is_ready(b))
            .then_with(|| {
                b.metadata
                    .creation_timestamp
                    .cmp(&a.metadata.creation_timestamp)
            })
            .then_with(|| b.metadata.name.cmp(&a.metadata.name))
    });
    active.truncate(count);
    active
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    fn pod_at(name: &str, created: i64, ready: bool) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                creation_timestamp: Some(Time(Timestamp::constant(created, 0))),
                ..ObjectMeta::default()
            },
            spec: None,
            status: Some(PodStatus {
                phase: Some("Running".into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            }),
        }
    }

    #[test]
    fn scale_down_removes_not_ready_pods_first_then_the_newest() {
        let pods = [
            pod_at("old-ready", 1, true),
            pod_at("new-ready", 3, true),
            pod_at("old-unready", 2, false),
        ];
        let chosen: Vec<_> = surplus(pods.iter().collect(), 2)
            .iter()
            .map(|p| p.name_any())
            .collect();
        assert_eq!(chosen, ["old-unready", "new-ready"]);
    }

    #[test]
    fn the_pod_is_the_tutorials() {
        let cluster = AppCluster::new("appcluster-sample", Default::default());
        let owner = OwnerReference {
            uid: "u".into(),
            ..OwnerReference::default()
        };
        let pod = pod(&cluster, owner);
        assert_eq!(
            pod.metadata.generate_name.as_deref(),
            Some("appcluster-sample-pod-")
        );
        assert_eq!(
            pod.labels().get("app").map(String::as_str),
            Some("appcluster-sample")
        );
        let containers = pod.spec.unwrap_or_default().containers;
        let shape: Vec<_> = containers
            .iter()
            .map(|c| (c.name.as_str(), c.image.as_deref()))
            .collect();
        assert_eq!(shape, [("nginx", Some("nginx:latest"))]);
    }
}
