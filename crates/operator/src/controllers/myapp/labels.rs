use std::collections::BTreeMap;

use app_operator_api::MyApp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::ResourceExt;

use crate::reconcile::{MANAGED_BY, MANAGED_BY_LABEL};

/// The labels that select a MyApp's Pods (Deployment selector, Service selector, scale selector).
pub fn selector_labels(app: &MyApp) -> BTreeMap<String, String> {
    let name = app.name_any();
    BTreeMap::from([
        ("app.kubernetes.io/name".to_owned(), name.clone()),
        ("app.kubernetes.io/instance".to_owned(), name),
    ])
}

/// The labels of every object the operator makes for a MyApp (not its Pods, which the
/// ReplicaSet makes): the selector labels plus `managed-by`.
pub fn labels(app: &MyApp) -> BTreeMap<String, String> {
    let mut labels = selector_labels(app);
    labels.insert(MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned());
    labels
}

/// The selector as a string, for `status.selector` (the scale subresource).
pub fn selector_string(app: &MyApp) -> String {
    selector_labels(app)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The metadata of every child of a MyApp: its name and namespace, the labels, the owner.
pub fn child_metadata(app: &MyApp, owner: OwnerReference) -> ObjectMeta {
    ObjectMeta {
        name: Some(app.name_any()),
        namespace: app.namespace(),
        labels: Some(labels(app)),
        owner_references: Some(vec![owner]),
        ..ObjectMeta::default()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    //! Also the MyApp fixtures of the sibling modules' tests (fixed names and uids, so the
    //! snapshots are deterministic).

    use serde_json::json;

    use super::*;
    use crate::reconcile::apply::controller_reference;

    /// A MyApp with only the required field set: every default applies.
    pub(crate) fn minimal_app() -> MyApp {
        serde_json::from_value(json!({
            "apiVersion": "example.com/v1",
            "kind": "MyApp",
            "metadata": {
                "name": "web",
                "namespace": "demo",
                "uid": "00000000-0000-4000-8000-000000000001",
                "generation": 1
            },
            "spec": { "image": "nginx:1.27" }
        }))
        .expect("a minimal MyApp")
    }

    /// A MyApp with every field set, autoscaling enabled.
    pub(crate) fn full_app() -> MyApp {
        serde_json::from_value(json!({
            "apiVersion": "example.com/v1",
            "kind": "MyApp",
            "metadata": {
                "name": "shop",
                "namespace": "store",
                "uid": "00000000-0000-4000-8000-000000000002",
                "generation": 4
            },
            "spec": {
                "replicas": 3,
                "image": "ghcr.io/example/shop:2.1.0",
                "port": 9090,
                "resources": {
                    "limits": { "cpu": "500m", "memory": "256Mi" },
                    "requests": { "cpu": "100m" }
                },
                "env": [
                    { "name": "LOG_LEVEL", "value": "debug" },
                    { "name": "DB_PASSWORD",
                      "valueFrom": { "secretKeyRef": { "name": "shop-db", "key": "password" } } },
                    { "name": "FEATURES",
                      "valueFrom": { "configMapKeyRef": { "name": "shop-flags", "key": "features" } } }
                ],
                "serviceType": "NodePort",
                "autoScaling": {
                    "enabled": true,
                    "minReplicas": 2,
                    "maxReplicas": 10,
                    "targetCPUUtilizationPercentage": 70
                }
            }
        }))
        .expect("a full MyApp")
    }

    /// The controller reference the reconciler gives the children of `app`.
    pub(crate) fn owner(app: &MyApp) -> OwnerReference {
        controller_reference(app).expect("the fixture has a uid")
    }

    #[test]
    fn pods_are_selected_by_name_and_instance_without_managed_by() {
        let selector = selector_labels(&minimal_app());
        assert_eq!(
            selector,
            BTreeMap::from([
                ("app.kubernetes.io/instance".to_owned(), "web".to_owned()),
                ("app.kubernetes.io/name".to_owned(), "web".to_owned()),
            ])
        );
        assert!(!selector.contains_key(MANAGED_BY_LABEL));
    }

    #[test]
    fn children_carry_the_selector_labels_and_managed_by() {
        let app = minimal_app();
        let mut expected = selector_labels(&app);
        expected.insert(
            "app.kubernetes.io/managed-by".to_owned(),
            "app-operator".to_owned(),
        );
        assert_eq!(labels(&app), expected);
    }

    #[test]
    fn the_selector_string_is_the_selector_labels_comma_separated() {
        assert_eq!(
            selector_string(&full_app()),
            "app.kubernetes.io/instance=shop,app.kubernetes.io/name=shop"
        );
    }

    #[test]
    fn child_metadata_names_the_child_after_the_app_in_its_namespace_owned_by_it() {
        let app = full_app();
        let meta = child_metadata(&app, owner(&app));
        assert_eq!(meta.name.as_deref(), Some("shop"));
        assert_eq!(meta.namespace.as_deref(), Some("store"));
        assert_eq!(meta.labels, Some(labels(&app)));
        let owners = meta.owner_references.unwrap_or_default();
        assert_eq!(owners.len(), 1);
        let reference = &owners[0];
        assert_eq!(
            (
                reference.api_version.as_str(),
                reference.kind.as_str(),
                reference.name.as_str(),
                reference.uid.as_str(),
                reference.controller,
                reference.block_owner_deletion,
            ),
            (
                "example.com/v1",
                "MyApp",
                "shop",
                "00000000-0000-4000-8000-000000000002",
                Some(true),
                Some(true),
            )
        );
        // Nothing the server sets (or that would make every apply a change) is in it.
        assert_eq!(meta.generate_name, None);
        assert_eq!(meta.resource_version, None);
        assert_eq!(meta.annotations, None);
    }
}
