//! Condition types and reasons shared by the resources (Kubernetes API conventions: `Ready`,
//! `Progressing`, `Degraded`; CamelCase reasons).

pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

pub const READY: &str = "Ready";
pub const PROGRESSING: &str = "Progressing";
pub const DEGRADED: &str = "Degraded";
/// kstatus's abnormal-true condition for "the controller cannot make progress" (sigs.k8s.io/
/// cli-utils, which Flux and Argo CD's kstatus checks read): present, `True`, while an object
/// waits for a change after a permanent failure; absent otherwise.
pub const STALLED: &str = "Stalled";

/// A status that carries conditions.
pub trait HasConditions {
    fn conditions(&self) -> &[Condition];
    /// The conditions to change; `None` for a status without them.
    fn conditions_mut(&mut self) -> Option<&mut Vec<Condition>>;
}

/// Implements [`HasConditions`] for statuses with a `conditions` field.
macro_rules! has_conditions {
    ($($status:ty),+) => {
        $(impl $crate::conditions::HasConditions for $status {
            fn conditions(&self) -> &[$crate::conditions::Condition] {
                &self.conditions
            }
            fn conditions_mut(&mut self) -> Option<&mut Vec<$crate::conditions::Condition>> {
                Some(&mut self.conditions)
            }
        })+
    };
}
has_conditions!(
    crate::AppClusterStatus,
    crate::EtcdBackupStatus,
    crate::EtcdClusterStatus,
    crate::MyAppStatus,
    crate::SampleDBStatus
);

/// The schema of a `conditions` list: a list-map keyed by `type`, so server-side apply merges
/// conditions one by one.
pub fn conditions_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = generator.subschema_for::<Vec<Condition>>();
    schema.insert("x-kubernetes-list-type".into(), "map".into());
    schema.insert(
        "x-kubernetes-list-map-keys".into(),
        serde_json::json!(["type"]),
    );
    schema
}
