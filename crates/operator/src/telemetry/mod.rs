//! What the process tells the outside about itself: Prometheus metrics and cache readiness.
//! Shared by the manager (which serves them) and the controller runner (which feeds them); it
//! imports neither.

pub mod metrics;
mod process;
pub mod readiness;
pub mod workqueue;
