//! What every controller shares: server-side apply, ownership checks, conditions, errors,
//! per-object backoff and event publishing.

pub mod apply;
pub mod backoff;
pub mod conditions;
pub mod error;
pub mod written;

pub use error::Error;

/// The one field manager under which every child object and status is applied.
pub const FIELD_MANAGER: &str = "app-operator";

/// Label put on every object the operator creates; its watches select on it, so the caches hold
/// only what the operator manages, not every Pod or Deployment in the cluster.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "app-operator";

/// The label selector of the operator's watches on child objects.
pub fn managed_selector() -> String {
    format!("{MANAGED_BY_LABEL}={MANAGED_BY}")
}
