//! The tutorial's Pods, and which of them count, are ready, or go first on scale-down.

use std::collections::BTreeMap;

use app_operator_api::AppCluster;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::ResourceExt;

use crate::controllers::restricted::{pod_security_context, restrict, scratch};
use crate::reconcile::{MANAGED_BY, MANAGED_BY_LABEL};

/// The label every AppCluster Pod carries (the AppCluster's name): the controller watches the Pods
/// with it, and no other controller's.
pub const CLUSTER_LABEL: &str = "demo.demo.io/appcluster";

/// The label selector of an AppCluster's Pods (`app=<name>`, as in the tutorial).
pub fn selector(cluster: &AppCluster) -> String {
    format!("app={}", cluster.name_any())
}

/// The Pods' nginx: the tutorial's `nginx:latest` runs as root, which the `restricted` Pod
/// Security Standard refuses; this one runs as UID 101 and serves on 8080.
pub const IMAGE: &str = "nginxinc/nginx-unprivileged:latest";

/// A Pod as the tutorial makes it: `<name>-pod-<random>`, label `app: <name>`, one `nginx`
/// container ([`IMAGE`], `restricted`, its root filesystem read-only and `/tmp` an emptyDir). The `managed-by` label lets the operator watch only its own Pods, and
/// [`CLUSTER_LABEL`] only the AppClusters'.
pub fn pod(cluster: &AppCluster, owner: OwnerReference) -> Pod {
    let name = cluster.name_any();
    let (tmp, tmp_mount) = scratch("tmp", "/tmp");
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{name}-pod-")),
            namespace: cluster.namespace(),
            labels: Some(BTreeMap::from([
                ("app".to_owned(), name.clone()),
                (CLUSTER_LABEL.to_owned(), name),
                (MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned()),
            ])),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: Some(restrict(
            PodSpec {
                containers: vec![Container {
                    name: "nginx".into(),
                    image: Some(IMAGE.into()),
                    volume_mounts: Some(vec![tmp_mount]),
                    ..Container::default()
                }],
                volumes: Some(vec![tmp]),
                ..PodSpec::default()
            },
            pod_security_context(None),
            true,
        )),
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

/// The kubelet reports the Pod Ready (its readiness probes pass).
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
    use crate::reconcile::apply::controller_reference;
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;
    use serde_json::json;

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
    fn the_pod_is_the_tutorials_nginx_under_the_restricted_standard() {
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
        let spec = pod.spec.unwrap_or_default();
        let shape: Vec<_> = spec
            .containers
            .iter()
            .map(|c| (c.name.as_str(), c.image.as_deref()))
            .collect();
        assert_eq!(
            shape,
            [("nginx", Some("nginxinc/nginx-unprivileged:latest"))]
        );
        assert_eq!(
            crate::controllers::restricted::restricted_violations(&spec),
            Vec::<String>::new()
        );
    }

    fn names(pods: Vec<&Pod>) -> Vec<String> {
        pods.iter().map(|p| p.name_any()).collect()
    }

    #[test]
    fn pod_snapshot() {
        let cluster: AppCluster = serde_json::from_value(json!({
            "apiVersion": "demo.demo.io/v1",
            "kind": "AppCluster",
            "metadata": {
                "name": "appcluster-sample",
                "namespace": "demo",
                "uid": "00000000-0000-4000-8000-000000000003",
                "generation": 1
            },
            "spec": { "size": 3 }
        }))
        .expect("an AppCluster");
        let owner = controller_reference(&cluster).expect("the fixture has a uid");
        let pod = pod(&cluster, owner);
        // Named by the API server, so that Pods created together never collide.
        assert_eq!(pod.metadata.name, None);
        insta::assert_yaml_snapshot!("pod", pod);
    }

    #[test]
    fn the_pod_is_selected_by_the_clusters_selector_and_the_managed_selector() {
        let cluster = AppCluster::new("appcluster-sample", Default::default());
        let pod = pod(&cluster, OwnerReference::default());
        let labels = pod.labels();
        for selector in [selector(&cluster), crate::reconcile::managed_selector()] {
            let (key, value) = selector.split_once('=').expect("key=value");
            assert_eq!(
                labels.get(key).map(String::as_str),
                Some(value),
                "{selector}"
            );
        }
    }

    #[test]
    fn only_a_ready_condition_that_is_true_makes_a_pod_ready() {
        let with_conditions = |conditions: serde_json::Value| -> Pod {
            serde_json::from_value(json!({
                "metadata": { "name": "p" },
                "status": { "phase": "Running", "conditions": conditions }
            }))
            .expect("a Pod")
        };
        let cases = [
            ("no conditions", with_conditions(json!([])), false),
            (
                "Ready True",
                with_conditions(json!([
                    { "type": "PodScheduled", "status": "True" },
                    { "type": "Ready", "status": "True" }
                ])),
                true,
            ),
            (
                "Ready False",
                with_conditions(json!([{ "type": "Ready", "status": "False" }])),
                false,
            ),
            (
                "Ready Unknown",
                with_conditions(json!([{ "type": "Ready", "status": "Unknown" }])),
                false,
            ),
            (
                "containers ready, Pod not",
                with_conditions(json!([
                    { "type": "ContainersReady", "status": "True" },
                    { "type": "Ready", "status": "False" }
                ])),
                false,
            ),
            ("no status", Pod::default(), false),
        ];
        for (case, pod, ready) in cases {
            assert_eq!(is_ready(&pod), ready, "{case}");
        }
    }

    #[test]
    fn the_removal_order_is_not_ready_first_then_newest_then_last_name() {
        let pods = [
            pod_at("ready-old", 10, true),
            pod_at("unready-old", 11, false),
            pod_at("ready-new", 30, true),
            pod_at("unready-new", 31, false),
            pod_at("ready-mid-a", 20, true),
            pod_at("ready-mid-b", 20, true),
        ];
        let all = surplus(pods.iter().collect(), pods.len());
        assert_eq!(
            names(all),
            [
                "unready-new",
                "unready-old",
                "ready-new",
                "ready-mid-b",
                "ready-mid-a",
                "ready-old"
            ]
        );
        // The order does not depend on the order the cache listed them in.
        let reversed = surplus(pods.iter().rev().collect(), 3);
        assert_eq!(names(reversed), ["unready-new", "unready-old", "ready-new"]);
    }

    #[test]
    fn surplus_removes_at_most_count_pods() {
        let pods = [pod_at("a", 1, true), pod_at("b", 2, false)];
        assert!(surplus(pods.iter().collect(), 0).is_empty());
        assert_eq!(names(surplus(pods.iter().collect(), 1)), ["b"]);
        assert_eq!(names(surplus(pods.iter().collect(), 5)), ["b", "a"]);
    }
}
