//! Condition types and reasons shared by the resources (Kubernetes API conventions: `Ready`,
//! `Progressing`, `Degraded`; CamelCase reasons).

pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

pub const READY: &str = "Ready";
pub const PROGRESSING: &str = "Progressing";
pub const DEGRADED: &str = "Degraded";

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
