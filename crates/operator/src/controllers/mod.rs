//! One module per kind. Each has a pure part (builders, status) and a thin reconcile.

pub mod appcluster;
pub mod myapp;
pub mod sample;

use std::fmt::Debug;
use std::sync::Arc;

use futures::{Stream, StreamExt, TryStreamExt};
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::manager::metrics::Metrics;
use crate::manager::readiness::Readiness;
use crate::reconcile::written::{Fingerprint, WrittenStatuses};
use crate::reconcile::{Error, FIELD_MANAGER, apply::apply_status, backoff::Backoff};

/// What a controller needs from the process that runs it.
#[derive(Clone)]
pub struct Settings {
    pub client: Client,
    /// Only this namespace, or all namespaces when `None`.
    pub namespace: Option<String>,
    /// How many objects of one kind are reconciled at once.
    pub concurrency: u16,
    pub readiness: Readiness,
    pub metrics: Arc<crate::manager::metrics::Metrics>,
}

impl Settings {
    /// An API for `K` in the watched namespace (or all of them).
    pub fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        match &self.namespace {
            Some(namespace) => Api::namespaced(self.client.clone(), namespace),
            None => Api::all(self.client.clone()),
        }
    }

    /// Who publishes a controller's events (`reportingController`, `reportingInstance`).
    pub fn reporter(&self, controller: &str) -> Reporter {
        Reporter {
            controller: format!("{FIELD_MANAGER}-{controller}"),
            instance: std::env::var("POD_NAME").ok(),
        }
    }
}

/// What the controllers cache: namespaced kinds the watcher can decode and share across tasks.
pub trait Cached:
    Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
    + Clone
    + Debug
    + DeserializeOwned
    + Send
    + Sync
    + 'static
{
}

impl<K> Cached for K where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned
        + Send
        + Sync
        + 'static
{
}

/// A watch of `K` in the watched namespace(s), kept in a store that reconciles read instead of
/// the API server. Managed fields are dropped (never read here, and the bulk of every object);
/// readiness is marked at the end of each initial list.
fn cache<K: Cached>(
    settings: &Settings,
    controller: &'static str,
    config: watcher::Config,
) -> (
    Store<K>,
    impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
) {
    let synced = settings
        .readiness
        .cache(controller, K::kind(&()).into_owned());
    let (store, writer) = reflector::store();
    let stream = watcher(settings.api::<K>(), config)
        .default_backoff()
        .modify(|object: &mut K| object.managed_fields_mut().clear())
        .reflect(writer)
        .inspect_ok(move |event| {
            if matches!(event, watcher::Event::InitDone) {
                synced.mark();
            }
        });
    (store, stream)
}

/// The cache of a controller's own kind: every object in the watched namespace(s).
pub fn primary_cache<K: Cached>(
    settings: &Settings,
    controller: &'static str,
) -> (
    Store<K>,
    impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
) {
    let (store, events) = cache(settings, controller, watcher::Config::default());
    (store, events.applied_objects())
}

/// The cache of a child kind: only objects the operator manages (by label). Deletions are passed
/// on too, so a deleted child is recreated.
pub fn child_cache<K: Cached>(
    settings: &Settings,
    controller: &'static str,
) -> (
    Store<K>,
    impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
) {
    let config = watcher::Config::default().labels(&crate::reconcile::managed_selector());
    let (store, events) = cache(settings, controller, config);
    (store, events.touched_objects())
}

/// The cached object of kind `K` named `name` in `namespace`.
pub fn cached<K>(store: &Store<K>, name: &str, namespace: &str) -> Option<Arc<K>>
where
    K: Resource<DynamicType = ()> + Clone,
{
    store.get(&ObjectRef::new(name).within(namespace))
}

/// The span every log line of one reconcile carries: controller, object and a reconcile id
/// (controller-runtime's `reconcileID`), so one pass can be followed through the logs.
pub fn reconcile_span(controller: &'static str, object: &impl Resource) -> tracing::Span {
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

/// Logs controller-runtime's start-up lines for `controller`.
pub fn log_start(controller: &'static str, settings: &Settings) {
    tracing::info!(controller, "Starting Controller");
    tracing::info!(
        controller,
        worker_count = settings.concurrency,
        "Starting workers"
    );
}

/// `namespace/name`, the key for logs and backoff.
pub fn key(object: &impl Resource) -> String {
    format!(
        "{}/{}",
        object.namespace().unwrap_or_default(),
        object.name_any()
    )
}

/// What every controller's context holds besides its caches.
pub struct Common {
    pub controller: &'static str,
    pub client: Client,
    reporter: Reporter,
    /// Aggregates repeated Warnings (a failing reconcile retried) into one event with a series.
    /// It keeps every event it published for six minutes (about 3 KiB each), so one-off Normal
    /// events do not go through it: at 1000 MyApps it held 6 MiB, a tenth of the operator.
    warnings: Recorder,
    written: WrittenStatuses,
    pub backoff: Backoff,
    pub metrics: Arc<Metrics>,
}

impl Common {
    pub fn new(controller: &'static str, settings: &Settings) -> Common {
        settings
            .metrics
            .controller_started(controller, settings.concurrency);
        Common {
            controller,
            client: settings.client.clone(),
            reporter: settings.reporter(controller),
            warnings: Recorder::new(settings.client.clone(), settings.reporter(controller)),
            written: WrittenStatuses::default(),
            backoff: Backoff::default(),
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

    /// The end of every reconcile: writes `desired` status only if it differs from `current`
    /// and was not just written (`stamp` marks a real change, e.g. `lastUpdateTime`), counts the
    /// result, and on failure publishes a Warning event (the Degraded condition is already in
    /// `desired`). In a namespace being deleted neither is written: both would be refused.
    pub async fn conclude<K, S>(
        &self,
        object: &K,
        current: Option<&S>,
        mut desired: S,
        stamp: impl FnOnce(&mut S),
        outcome: Result<(), Error>,
        then: Action,
    ) -> Result<Action, Error>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + Debug
            + DeserializeOwned,
        S: PartialEq + serde::Serialize,
    {
        if let Err(error) = &outcome
            && error.is_namespace_terminating()
        {
            self.metrics
                .reconcile_finished(self.controller, Some(error));
            return outcome.map(|()| then);
        }
        let key = key(object);
        let version = object.meta().resource_version.as_deref();
        let fingerprint = Fingerprint::of(&desired);
        let written = fingerprint.is_some_and(|f| self.written.awaiting_cache(&key, version, f));
        let result = if current == Some(&desired) || written {
            outcome
        } else {
            stamp(&mut desired);
            let written = apply_status(&self.client, object, &desired).await;
            if let (Ok(()), Some(fingerprint)) = (&written, fingerprint) {
                self.written.wrote(key.clone(), version, fingerprint);
            }
            outcome.and(written)
        };
        self.metrics
            .reconcile_finished(self.controller, result.as_ref().err());
        match result {
            Ok(()) => {
                self.backoff.succeeded(&key);
                Ok(then)
            }
            Err(error) => {
                self.publish(
                    object,
                    EventType::Warning,
                    error.reason(),
                    "Reconcile",
                    error.to_string(),
                )
                .await;
                Err(error)
            }
        }
    }

    /// The error policy: log and retry with per-object exponential backoff; not at all when the
    /// object's namespace is being deleted.
    pub fn retry<K: Resource>(&self, object: &K, error: &Error) -> Action {
        if error.is_namespace_terminating() {
            // The namespace, and with it the object, is going away: nothing to retry.
            tracing::debug!(controller = self.controller, object = %key(object), error = %error, "namespace is terminating; not retrying");
            return Action::await_change();
        }
        let delay = self.backoff.failed(&key(object));
        tracing::warn!(controller = self.controller, object = %key(object), error = %error, reason = error.reason(), retry_in = ?delay, "Reconciler error");
        Action::requeue(delay)
    }
}

/// Drives a controller's result stream, logging each outcome at debug level.
pub async fn drain<T: Debug, E: std::fmt::Display>(results: impl Stream<Item = Result<T, E>>) {
    results
        .for_each(|result| async move {
            match result {
                Ok(object) => tracing::debug!(?object, "reconciled"),
                Err(error) => tracing::debug!(%error, "reconcile did not complete"),
            }
        })
        .await;
}
