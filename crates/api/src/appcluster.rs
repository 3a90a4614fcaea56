//! `AppCluster` (`demo.demo.io/v1`): `size` Pods, made and healed directly by the operator.

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::conditions::{Condition, conditions_schema};
use crate::validation::LABEL_VALUE_NAME_RULE;

/// AppClusterSpec defines the desired state of AppCluster.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "demo.demo.io",
    version = "v1",
    kind = "AppCluster",
    namespaced,
    status = "AppClusterStatus",
    shortname = "appc",
    category = "app-operator",
    doc = "AppCluster keeps `size` Pods of one image running, created and replaced by the operator itself (no Deployment or ReplicaSet), and reports how many are ready.",
    printcolumn(name = "Size", type_ = "integer", json_path = ".spec.size"),
    printcolumn(name = "Ready Pods", type_ = "integer", json_path = ".status.ready"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].message"
    ),
    printcolumn(
        name = "Image",
        type_ = "string",
        priority = 1,
        json_path = ".status.image"
    ),
    printcolumn(
        name = "Selector",
        type_ = "string",
        priority = 1,
        json_path = ".status.selector"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    scale(
        spec_replicas_path = ".spec.size",
        status_replicas_path = ".status.ready",
        label_selector_path = ".status.selector"
    ),
    validation = Rule::new(LABEL_VALUE_NAME_RULE).message(
        "metadata.name must be at most 63 characters: it is the value of the AppCluster's Pods' app label"
    )
)]
pub struct AppClusterSpec {
    /// Size is the number of Pods to run.
    #[serde(default)]
    #[schemars(range(min = 0, max = 10000))]
    pub size: i32,
}

/// AppClusterStatus defines the observed state of AppCluster.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AppClusterStatus {
    /// Ready is the number of the AppCluster's Pods that are Ready.
    #[serde(default)]
    pub ready: i32,
    /// Conditions: Ready (`size` Pods, all ready), Progressing (Pods being created, replaced or
    /// removed), Degraded (the last reconcile failed: its reason and message).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// ObservedGeneration is the most recent generation observed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Selector is the label selector of the AppCluster's Pods (for the scale subresource).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// Image is the container image the operator creates the Pods with (the operator's choice:
    /// the spec has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
}
