//! What every controller shares: the controller runner, the child set (server-side apply with an
//! ownership guard, and pruning), the finalizer helper, conditions, errors, the backoff policy and
//! the per-object memory.

pub mod apply;
pub mod backoff;
pub mod children;
pub mod compact;
pub mod conditions;
pub mod error;
pub mod finalizer;
pub mod jobs;
pub mod memory;
pub mod runner;
pub mod schedule;
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
