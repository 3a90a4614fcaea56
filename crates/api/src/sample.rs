//! `Sample` (`example.com/v1alpha1`): the tutorial's first CRD, with its one field at the top
//! level of the object (not under `spec`).

use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// The fields of a Sample; they sit at the root of the object, beside `metadata`.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "example.com",
    version = "v1alpha1",
    kind = "Sample",
    namespaced,
    no_spec,
    status = "SampleStatus",
    shortname = "smpl",
    category = "app-operator",
    doc = "Sample is the tutorial's first resource: one free-form field, `testString`, at the top level of the object. The operator logs each version it sees and records it as an event on the object, once.",
    printcolumn(name = "Test String", type_ = "string", json_path = ".testString"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct SampleFields {
    /// A free-form string, shown in `kubectl get samples`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_string: Option<String>,
}

/// What the operator has seen of a Sample.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SampleStatus {
    /// The generation last logged and recorded as an event: a restarted operator does not record
    /// the same version again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// A Sample has no conditions; its status still goes through the operator's one status writer.
impl crate::conditions::HasConditions for SampleStatus {
    fn conditions(&self) -> &[crate::conditions::Condition] {
        &[]
    }
    fn conditions_mut(&mut self) -> Option<&mut Vec<crate::conditions::Condition>> {
        None
    }
}
