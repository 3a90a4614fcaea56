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
