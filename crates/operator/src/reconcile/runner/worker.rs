//! One reconcile and its error policy: the span, the metrics, the Warning on failure, permanent
//! errors waiting for a change and transient ones backing off.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use tracing::Instrument;

use super::{Guarded, Reconciler, Remembered, Shared, Target, key};
use crate::api::RECONCILE_REQUESTED_AT;
use crate::reconcile::Error;
use crate::reconcile::backoff::Backoff;
use crate::reconcile::memory::PerObject;
use crate::telemetry::readiness::Readiness;

/// What the runner keeps for one controller.
pub(super) struct Context<R: Reconciler> {
    pub(super) reconciler: R,
    pub(super) shared: Shared,
    pub(super) readiness: Readiness,
    /// How transient failures are retried.
    pub(super) retries: Backoff,
    pub(super) memory: PerObject<Remembered<R::Memory>>,
}

impl<R: Reconciler> Context<R> {
    /// Drops everything remembered about a deleted object.
    pub(super) fn forget(&self, object: &Guarded<R::Object>) {
        self.memory.forget(&key(object));
        let namespace = object.namespace().unwrap_or_default();
        let (controller, name) = (self.shared.controller, object.name_any());
        self.shared
            .metrics
            .set_invalid(controller, &namespace, &name, false);
        self.shared
            .metrics
            .set_degraded(controller, &namespace, &name, None);
        self.reconciler.forget_metrics(&namespace, &name);
    }
}

/// The uid, generation and reconcile request ([`RECONCILE_REQUESTED_AT`]) of an object whose last
/// reconcile failed permanently: it is not reconciled again until its spec (generation) changes,
/// a retry is asked for or it is re-created, so a refused child is not sent again and again.
#[derive(Default)]
pub(super) struct PermanentFailure(Option<FailedAt>);

#[derive(PartialEq)]
struct FailedAt {
    uid: Option<String>,
    generation: Option<i64>,
    requested_at: Option<String>,
}

impl FailedAt {
    fn of(meta: &ObjectMeta) -> FailedAt {
        FailedAt {
            uid: meta.uid.clone(),
            generation: meta.generation,
            requested_at: meta
                .annotations
                .as_ref()
                .and_then(|annotations| annotations.get(RECONCILE_REQUESTED_AT))
                .cloned(),
        }
    }
}

impl PermanentFailure {
    fn record(&mut self, meta: &ObjectMeta) {
        self.0 = Some(FailedAt::of(meta));
    }

    /// Whether the object is unchanged since it failed permanently; a change clears the record.
    fn unchanged(&mut self, meta: &ObjectMeta) -> bool {
        let unchanged = self.0.as_ref() == Some(&FailedAt::of(meta));
        if !unchanged {
            self.0 = None;
        }
        unchanged
    }
}

/// The span every log line of one reconcile carries: controller, object and a reconcile id
/// (controller-runtime's `reconcileID`), so one pass can be followed through the logs.
fn reconcile_span(controller: &'static str, object: &impl Resource) -> tracing::Span {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let sequence = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let seed = std::process::id();
    tracing::info_span!(
        "reconcile",
        controller,
        namespace = object.namespace().unwrap_or_default(),
        name = object.name_any(),
        reconcile_id = format!("{seed:08x}-{sequence:012x}"),
    )
}

pub(super) async fn reconcile<R: Reconciler>(
    object: Arc<Guarded<R::Object>>,
    context: Arc<Context<R>>,
) -> Result<Action, Error> {
    let shared = &context.shared;
    let span = reconcile_span(shared.controller, object.as_ref());
    async {
        // A cache still listing looks like missing children: acting on it creates duplicates.
        context.readiness.wait_synced(shared.controller).await;
        let object_key = key(object.as_ref());
        let _timer = shared
            .metrics
            .reconcile_started(shared.controller, &object_key);
        let result = match &object.0 {
            Err(invalid) => {
                shared.report_invalid(object.as_ref(), &invalid.error).await;
                Ok(Action::await_change())
            }
            Ok(valid) => {
                let namespace = valid.namespace().unwrap_or_default();
                shared
                    .metrics
                    .set_invalid(shared.controller, &namespace, &valid.name_any(), false);
                let memory = &context.memory;
                if memory.with(&object_key, |m| m.permanent_failure.unchanged(valid.meta())) {
                    Ok(Action::await_change())
                } else {
                    match Target::resolve(valid, shared, memory) {
                        Ok(target) => {
                            let reconciled = context.reconciler.reconcile(&target).await;
                            shared
                                .finish(valid, reconciled, |written| {
                                    memory.with(&object_key, |m| written(&mut m.written))
                                })
                                .await
                        }
                        Err(error) => Err(error),
                    }
                }
            }
        };
        shared.metrics.reconcile_finished(
            shared.controller,
            result.as_ref().err().map(Error::metric_label),
        );
        match &result {
            Ok(_) => context.memory.with(&object_key, |m| m.failures.reset()),
            Err(error) if error.is_namespace_gone() => {}
            Err(error) => {
                let note = error.to_string();
                shared
                    .publish(
                        object.as_ref(),
                        EventType::Warning,
                        error.reason(),
                        "Reconcile",
                        note,
                    )
                    .await;
            }
        }
        result
    }
    .instrument(span)
    .await
}

/// Permanent errors wait for a change, transient ones back off per object; nothing is retried
/// in a namespace that is being deleted.
pub(super) fn error_policy<R: Reconciler>(
    object: Arc<Guarded<R::Object>>,
    error: &Error,
    context: Arc<Context<R>>,
) -> Action {
    let controller = context.shared.controller;
    let object_key = key(object.as_ref());
    if error.is_namespace_gone() {
        tracing::debug!(controller, object = %object_key, %error, "namespace is being deleted or gone; not retrying");
        return Action::await_change();
    }
    if error.is_permanent() {
        tracing::warn!(controller, object = %object_key, %error, reason = error.reason(), "Reconciler error; waiting for the object to change");
        context
            .memory
            .with(&object_key, |m| m.permanent_failure.record(object.meta()));
        return Action::await_change();
    }
    let retries = context.retries;
    let delay = context
        .memory
        .with(&object_key, |m| retries.failed(&mut m.failures));
    context.shared.metrics.workqueue.retried(controller);
    tracing::warn!(controller, object = %object_key, %error, reason = error.reason(), retry_in = ?delay, "Reconciler error");
    Action::requeue(delay)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(uid: &str, generation: i64) -> ObjectMeta {
        ObjectMeta {
            uid: Some(uid.into()),
            generation: Some(generation),
            ..Default::default()
        }
    }

    #[test]
    fn a_permanent_failure_waits_for_a_new_generation_or_a_new_object() {
        let mut failure = PermanentFailure::default();
        assert!(!failure.unchanged(&meta("u1", 3)), "nothing failed");
        failure.record(&meta("u1", 3));
        assert!(failure.unchanged(&meta("u1", 3)));
        assert!(!failure.unchanged(&meta("u2", 3)), "re-created");
        assert!(!failure.unchanged(&meta("u1", 3)), "dropped once changed");
        failure.record(&meta("u1", 3));
        assert!(!failure.unchanged(&meta("u1", 4)), "spec changed");
    }

    #[test]
    fn a_permanent_failure_is_retried_when_a_reconcile_is_requested() {
        let requested = |at: &str| ObjectMeta {
            annotations: Some([(RECONCILE_REQUESTED_AT.to_owned(), at.to_owned())].into()),
            ..meta("u1", 3)
        };
        let mut failure = PermanentFailure::default();
        failure.record(&meta("u1", 3));
        assert!(
            !failure.unchanged(&requested("2026-11-28T03:00:00Z")),
            "asked"
        );
        failure.record(&requested("2026-11-28T03:00:00Z"));
        assert!(
            failure.unchanged(&requested("2026-11-28T03:00:00Z")),
            "handled"
        );
        assert!(
            !failure.unchanged(&requested("2026-11-28T03:05:00Z")),
            "asked again"
        );
    }
}
