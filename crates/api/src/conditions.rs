//! Condition types and reasons shared by the resources (Kubernetes API conventions: `Ready`,
//! `Progressing`, `Degraded`; CamelCase reasons).

pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

pub const READY: &str = "Ready";
pub const PROGRESSING: &str = "Progressing";
pub const DEGRADED: &str = "Degraded";

/// A status that carries conditions.
pub trait HasConditions {
    fn conditions(&self) -> &[Condition];
}

/// Implements [`HasConditions`] for statuses with a `conditions` field.
macro_rules! has_conditions {
    ($($status:ty),+) => {
        $(impl $crate::conditions::HasConditions for $status {
            fn conditions(&self) -> &[$crate::conditions::Condition] {
                &self.conditions
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
