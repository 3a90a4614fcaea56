//! What every reconcile may use: the client, events, status writes, metrics.

use std::sync::Arc;

use app_operator_api::conditions::{DEGRADED, HasConditions, STALLED};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource, ResourceExt};

use super::{Cached, HasStatus, Reconciled, Settings, key};
use crate::reconcile::apply::apply_status;
use crate::reconcile::written::{Fingerprint, WrittenStatus};
use crate::reconcile::{Error, FIELD_MANAGER, conditions};
use crate::telemetry::metrics::Metrics;

/// What every reconcile may use: the client, events, status writes, metrics.
pub struct Shared {
    pub controller: &'static str,
    pub client: Client,
    reporter: Reporter,
    /// Aggregates repeated Warnings (a failing reconcile retried) into one event with a series.
    /// It keeps every event it published for six minutes (about 3 KiB each), so one-off Normal
    /// events do not go through it: at 1000 MyApps it held 6 MiB, a sixth of the heap.
    warnings: Recorder,
    pub metrics: Arc<Metrics>,
}

impl Shared {
    pub(super) fn new(controller: &'static str, settings: &Settings) -> Shared {
        let reporter = Reporter {
            controller: format!("{FIELD_MANAGER}-{controller}"),
            instance: std::env::var("POD_NAME").ok(),
        };
        Shared {
            controller,
            client: settings.client.clone(),
            warnings: Recorder::new(settings.client.clone(), reporter.clone()),
            reporter,
            metrics: settings.metrics.clone(),
        }
    }

    /// Publishes an event on `object`; a failure to publish is logged, never fatal. Warnings go
    /// through the aggregating recorder; a Normal event, which records a change made once, is
    /// published by a recorder that is dropped right after.
    pub async fn publish<K: Resource<DynamicType = ()>>(
        &self,
        object: &K,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: action.into(),
            secondary: None,
        };
        let one_off;
        let recorder = match type_ {
            EventType::Warning => &self.warnings,
            EventType::Normal => {
                one_off = Recorder::new(self.client.clone(), self.reporter.clone());
                &one_off
            }
        };
        if let Err(error) = recorder.publish(&event, &object.object_ref(&())).await {
            tracing::warn!(%error, object = %key(object), reason, "could not publish event");
        }
    }

    /// An object that does not decode into the controller's type: named in a WARN line, a
    /// metric and a Warning event on it; the controller goes on with every other object.
    pub(super) async fn report_invalid<K: Resource<DynamicType = ()>>(
        &self,
        object: &K,
        error: &str,
    ) {
        let namespace = object.namespace().unwrap_or_default();
        let name = object.name_any();
        tracing::warn!(controller = self.controller, object = %key(object), %error, "object does not decode; leaving it alone until it is fixed");
        self.metrics
            .set_invalid(self.controller, &namespace, &name, true);
        let note = format!(
            "the stored object does not match the {} schema: {error}",
            K::kind(&())
        );
        self.publish(object, EventType::Warning, "InvalidObject", "Decode", note)
            .await;
    }

    /// Ends a reconcile: writes the status it returned while publishing what it announced, and
    /// gives its requeue (or its failure, or the status write's). `written` runs a function on
    /// the object's [`WrittenStatus`].
    pub(super) async fn finish<K: Cached + HasStatus>(
        &self,
        object: &K,
        reconciled: Reconciled<K::Status>,
        written: impl Fn(&dyn Fn(&mut WrittenStatus) -> bool) -> bool,
    ) -> Result<Action, Error> {
        let Reconciled {
            status,
            outcome,
            announce,
            then,
        } = reconciled;
        // Independent: sent together, a reconcile holds its worker for one round trip less.
        let announced = async {
            for event in announce {
                self.publish(object, event.type_, &event.reason, event.action, event.note)
                    .await;
            }
        };
        let written = async {
            match status {
                Some(status) => self.write_status(object, status, outcome, written).await,
                None => outcome,
            }
        };
        let ((), result) = futures::join!(announced, written);
        result.map(|()| then)
    }

    /// Writes `desired` status unless the object already has it or it was just written and the
    /// cache does not show it yet ([`HasStatus::stamp`] marks a real change, e.g.
    /// `lastUpdateTime`). Returns the reconcile's `outcome`, or the status write's error. In a
    /// namespace being deleted nothing is written: it would be refused.
    async fn write_status<K: Cached + HasStatus>(
        &self,
        object: &K,
        mut desired: K::Status,
        outcome: Result<(), Error>,
        written: impl Fn(&dyn Fn(&mut WrittenStatus) -> bool) -> bool,
    ) -> Result<(), Error> {
        let current = object.status();
        if outcome.as_ref().is_err_and(Error::is_namespace_gone) {
            return outcome;
        }
        if let Some(conditions) = desired.conditions_mut() {
            let previous = current.map(HasConditions::conditions).unwrap_or_default();
            conditions.retain(|condition| condition.type_ != STALLED);
            conditions.extend(conditions::stalled(
                previous,
                outcome.as_ref().err(),
                object.meta().generation,
                &Time(Timestamp::now()),
            ));
        }
        self.metrics.set_degraded(
            self.controller,
            &object.namespace().unwrap_or_default(),
            &object.name_any(),
            desired
                .conditions()
                .iter()
                .find(|c| c.type_ == DEGRADED && c.status == "True")
                .map(|c| c.reason.as_str()),
        );
        let version = object.meta().resource_version.as_deref();
        let fingerprint = Fingerprint::of(&desired);
        let awaiting_cache =
            fingerprint.is_some_and(|f| written(&|status| status.awaiting_cache(version, f)));
        if current == Some(&desired) || awaiting_cache {
            return outcome;
        }
        K::stamp(&mut desired);
        let applied = apply_status(&self.client, object, &desired).await;
        if let (Ok(()), Some(fingerprint)) = (&applied, fingerprint) {
            written(&|status| {
                status.wrote(version, fingerprint);
                true
            });
        }
        outcome.and(applied)
    }
}
