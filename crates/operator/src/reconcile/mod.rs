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

use kube::api::PatchParams;

pub use error::Error;

/// The one field manager under which every child object and status is applied.
pub const FIELD_MANAGER: &str = "app-operator";

/// The parameters of a server-side apply under [`FIELD_MANAGER`]. Field validation is off: the
/// bodies are serialized from typed structs, and whatever the API server found (a field newer
/// than it) would only come back as a `Warning` header, which the client drops. Left at its
/// default (`Warn`), it costs the API server a second, strict YAML parse of every applied body
/// (the two parses took 0.9 ms of API server CPU per MyApp, `docs/benchmarks.md`).
pub fn apply_params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).validation_ignore()
}

/// Label put on every object the operator creates; its watches select on it, so the caches hold
/// only what the operator manages, not every Pod or Deployment in the cluster.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "app-operator";

/// The label selector of the operator's watches on child objects.
pub fn managed_selector() -> String {
    format!("{MANAGED_BY_LABEL}={MANAGED_BY}")
}
