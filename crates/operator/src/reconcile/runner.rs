//! The one controller runner under every controller. A controller supplies its primary kind, the
//! child kinds it owns and its reconcile ([`Reconciler`]); the runner does the rest, the same way
//! for all of them:
//! - watches into caches, and no reconcile before *every* cache of the controller has synced;
//! - resolves the object once ([`Target`]: name, namespace, uid, owner reference, key), and
//!   after the reconcile writes the status it returned (only when it changed) while publishing
//!   the events it returned, then requeues as it said ([`Reconciled`]);
//! - objects that do not decode are reported (WARN log, Warning event, metric), never fatal;
//! - a span per reconcile (controller, namespace, name, reconcile id), the
//!   `controller_runtime_*` metrics on every exit path, one Warning event per failure;
//! - permanent errors wait for the object to change, transient ones back off per object;
//! - a deleted object's per-object state (backoff, remembered statuses, the controller's own) is
//!   dropped.

use std::collections::HashMap;
use std::fmt::Debug;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use app_operator_api::conditions::{DEGRADED, HasConditions};
use futures::stream::{self, BoxStream};
use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::Api;
use kube::core::DeserializeGuard;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tracing::Instrument;

use super::apply::{apply_status, controller_reference};
use super::backoff::Backoff;
use super::written::{Fingerprint, WrittenStatuses};
use super::{Error, FIELD_MANAGER, managed_selector};
use crate::telemetry::metrics::Metrics;
use crate::telemetry::readiness::Readiness;

/// What a controller needs from the process that runs it.
#[derive(Clone)]
pub struct Settings {
    pub client: Client,
    /// Only this namespace, or all namespaces when `None`.
    pub namespace: Option<String>,
    /// How many objects of one kind are reconciled at once.
    pub concurrency: u16,
    pub readiness: Readiness,
    pub metrics: Arc<Metrics>,
    /// Each watch call asks the API server to end it after this many seconds; one silent for 5 s
    /// longer is taken for a dead connection and replaced (kube-runtime's idle timeout).
    pub watch_timeout_secs: u32,
}

impl Settings {
    /// An API for `K` in the watched namespace (or all of them).
    fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        match &self.namespace {
            Some(namespace) => Api::namespaced(self.client.clone(), namespace),
            None => Api::all(self.client.clone()),
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

/// A controller's own logic: what to do with one valid object of its kind.
pub trait Reconciler: Send + Sync + 'static {
    /// The controller's primary kind.
    type Object: Cached + serde::Serialize + HasStatus;

    /// Brings the world in line with the target's object, and says what its status should be.
    /// A failure in [`Reconciled::outcome`] is the runner's to report and retry.
    fn reconcile(
        &self,
        target: &Target<'_, Self::Object>,
    ) -> impl Future<Output = Reconciled<<Self::Object as HasStatus>::Status>> + Send;

    /// Drops what the controller remembers about the object `key` (`namespace/name`), which is gone.
    fn forget(&self, _key: &str) {}
}

/// A primary kind whose status the runner writes.
pub trait HasStatus {
    type Status: PartialEq + serde::Serialize + HasConditions + Send + Sync;

    fn status(&self) -> Option<&Self::Status>;

    /// Sets what changes only when the status is written (e.g. `lastUpdateTime`).
    fn stamp(_status: &mut Self::Status) {}
}

/// The object a reconcile works on, resolved once by the runner.
pub struct Target<'a, K> {
    pub object: &'a K,
    pub name: String,
    pub namespace: String,
    pub uid: String,
    /// The controller reference its children carry.
    pub owner: OwnerReference,
    /// `namespace/name`, the key of per-object state.
    pub key: String,
    pub shared: &'a Shared,
}

impl<'a, K: Cached> Target<'a, K> {
    fn resolve(object: &'a K, shared: &'a Shared) -> Result<Target<'a, K>, Error> {
        let namespace = object
            .namespace()
            .ok_or(Error::MissingMetadata("namespace"))?;
        let uid = object.uid().ok_or(Error::MissingMetadata("uid"))?;
        let owner = controller_reference(object).ok_or(Error::MissingMetadata("uid"))?;
        Ok(Target {
            object,
            name: object.name_any(),
            key: key(object),
            namespace,
            uid,
            owner,
            shared,
        })
    }

    /// Being deleted.
    pub fn deleting(&self) -> bool {
        self.object.meta().deletion_timestamp.is_some()
    }
}

/// An event for the runner to publish on the reconciled object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Announcement {
    pub type_: EventType,
    pub reason: String,
    pub action: &'static str,
    pub note: String,
}

/// How a reconcile ended: the status to show (`None`: leave it, e.g. going away), its failure if
/// any, what to announce, and when to look again (on success).
pub struct Reconciled<S> {
    pub status: Option<S>,
    pub outcome: Result<(), Error>,
    pub announce: Vec<Announcement>,
    pub then: Action,
}

impl<S> Reconciled<S> {
    /// Shows `status`, reports `outcome`, then looks again as `then` says.
    pub fn status(status: S, outcome: Result<(), Error>, then: Action) -> Reconciled<S> {
        Reconciled {
            status: Some(status),
            outcome,
            announce: Vec::new(),
            then,
        }
    }

    /// Leaves the status as it is.
    pub fn unchanged(outcome: Result<Action, Error>) -> Reconciled<S> {
        let (outcome, then) = match outcome {
            Ok(then) => (Ok(()), then),
            Err(error) => (Err(error), Action::await_change()),
        };
        Reconciled {
            status: None,
            outcome,
            announce: Vec::new(),
            then,
        }
    }

    pub fn announcing(mut self, announce: Vec<Announcement>) -> Reconciled<S> {
        self.announce = announce;
        self
    }
}

/// `namespace/name`, the key for logs and per-object state.
pub fn key(object: &impl Resource) -> String {
    format!(
        "{}/{}",
        object.namespace().unwrap_or_default(),
        object.name_any()
    )
}

/// `namespace/name` of a reference, as [`key`] gives it for the object.
fn ref_key<K: Resource>(object: &ObjectRef<K>) -> String {
    format!(
        "{}/{}",
        object.namespace.as_deref().unwrap_or_default(),
        object.name
    )
}

/// The cached object of kind `K` named `name` in `namespace`.
pub fn cached<K>(store: &Store<K>, name: &str, namespace: &str) -> Option<Arc<K>>
where
    K: Resource<DynamicType = ()> + Clone,
{
    store.get(&ObjectRef::new(name).within(namespace))
}

type Guarded<K> = DeserializeGuard<K>;
type WatchEvents<K> = BoxStream<'static, Result<watcher::Event<K>, watcher::Error>>;

/// Builds a controller: its primary watch, then one watch per owned child kind, then runs it.
pub struct Runner<K: Cached> {
    name: &'static str,
    settings: Settings,
    /// The label selector of the children this controller watches (see [`Runner::children`]).
    children: String,
    store: Store<Guarded<K>>,
    events: WatchEvents<Guarded<K>>,
    triggers: Vec<BoxStream<'static, ObjectRef<Guarded<K>>>>,
}

impl<K: Cached + serde::Serialize + HasStatus> Runner<K> {
    /// A controller named `name` (metrics, logs, events) for every `K` in the watched namespace(s).
    pub fn new(name: &'static str, settings: &Settings) -> Runner<K> {
        let (store, events) = cache::<Guarded<K>>(settings, name, watcher::Config::default());
        Runner {
            name,
            settings: settings.clone(),
            children: managed_selector(),
            store,
            events: events.boxed(),
            triggers: Vec::new(),
        }
    }

    /// Narrows the children this controller watches to those with `label` (a label selector
    /// requirement, e.g. `etcd_cluster`), besides the operator's `managed-by` label. Every
    /// controller that shares a child kind with another names its own: each caches its own
    /// children, not a copy of every other controller's (1000 MyApps' Services were cached three
    /// times).
    pub fn children(mut self, label: &str) -> Self {
        self.children = format!("{},{label}", managed_selector());
        self
    }

    /// Watches the children of kind `C` the operator manages (by label) and reconciles their
    /// controlling `K` on each change, deletions included (a deleted child is rebuilt). Returns
    /// the cache the reconcile reads them from.
    pub fn owns<C: Cached>(&mut self) -> Store<C> {
        let config = watcher::Config::default().labels(&self.children);
        let (store, events) = cache::<C>(&self.settings, self.name, config);
        let owners = events
            .touched_objects()
            .filter_map(move |child| {
                // Errors were reported by the cache.
                let owners =
                    child.map_or_else(|_| Vec::new(), |child| controllers_of::<K>(child.meta()));
                std::future::ready(Some(stream::iter(owners)))
            })
            .flatten();
        self.triggers.push(owners.boxed());
        store
    }

    /// Runs the controller until `shutdown` resolves, then lets in-flight reconciles finish.
    pub async fn run<R: Reconciler<Object = K>>(
        self,
        reconciler: R,
        shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    ) {
        let Runner {
            name,
            settings,
            children: _,
            store,
            events,
            triggers,
        } = self;
        let metrics = settings.metrics.clone();
        metrics.controller_started(name, settings.concurrency);
        let context = Arc::new(Context {
            reconciler,
            shared: Shared::new(name, &settings),
            readiness: settings.readiness.clone(),
            backoff: Backoff::default(),
            waiting_for_change: WaitingForChange::default(),
        });
        let deletions = context.clone();
        let queue = metrics.clone();
        let events = events.inspect_ok(move |event| {
            if let watcher::Event::Delete(object) = event {
                deletions.forget(object);
            }
        });
        let primary = applied_once_stored(events, store.clone())
            .inspect_ok(move |object| queue.workqueue.added(name, key(object)));
        let queue = metrics.clone();
        let triggers = stream::select_all(triggers)
            .inspect(move |object| queue.workqueue.added(name, ref_key(object)));
        let controller = Controller::for_stream(primary, store)
            .reconcile_on(triggers)
            .with_config(controller::Config::default().concurrency(settings.concurrency))
            .graceful_shutdown_on(shutdown);
        tracing::info!(controller = name, "Starting Controller");
        tracing::info!(
            controller = name,
            worker_count = settings.concurrency,
            "Starting workers"
        );
        controller
            .run(reconcile::<R>, error_policy::<R>, context)
            .for_each(|result| async {
                match result {
                    Ok(object) => tracing::debug!(?object, "reconciled"),
                    // A child named an owner that is gone: it leaves the queue unreconciled.
                    Err(controller::Error::ObjectNotFound(object)) => {
                        metrics.workqueue.dropped(name, &ref_key(&object));
                    }
                    Err(error) => tracing::debug!(%error, "reconcile did not complete"),
                }
            })
            .await;
        tracing::info!(controller = name, "Stopped Controller");
    }
}

/// A watch of `K` kept in a store that reconciles read instead of the API server. Managed fields
/// are dropped (never read here, and the bulk of every object); the cache is marked synced at
/// the end of each initial list.
fn cache<K: Cached>(
    settings: &Settings,
    controller: &'static str,
    config: watcher::Config,
) -> (
    Store<K>,
    impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
) {
    let kind = K::kind(&()).into_owned();
    let synced = settings.readiness.cache(controller, kind.clone());
    let metrics = settings.metrics.clone();
    let (store, writer) = reflector::store();
    let config = config.timeout(settings.watch_timeout_secs);
    let watched = kind.clone();
    let stream = watcher(settings.api::<K>(), config)
        .filter(move |event| std::future::ready(!expired(controller, &watched, event)))
        .default_backoff()
        .modify(|object: &mut K| object.managed_fields_mut().clear())
        .reflect(writer)
        .inspect(move |event| match event {
            Ok(event) => {
                if matches!(event, watcher::Event::InitDone) {
                    synced.mark();
                }
                synced.watch_succeeded();
            }
            Err(error) => {
                tracing::warn!(controller, %kind, %error, "watch failed; retrying with backoff");
                metrics.watch_failed(controller, &kind);
                synced.watch_failed(Instant::now());
            }
        });
    (store, stream)
}

/// Whether `event` says the watch expired (410 Gone: the API server's watch cache no longer
/// reaches back to our resourceVersion, as after every API server restart). The watcher relists
/// by itself; passed on as an error, the backoff would hold that relist for as long as the
/// outage before had grown it (30 s), on top of the outage.
fn expired<K>(
    controller: &str,
    kind: &str,
    event: &Result<watcher::Event<K>, watcher::Error>,
) -> bool {
    let Err(watcher::Error::WatchError(status)) = event else {
        return false;
    };
    if status.code != 410 {
        return false;
    }
    tracing::info!(controller, kind, "watch expired; relisting");
    true
}

/// The objects a watch applied, each once the store holds it. A list (the first one, or a relist
/// after the watch expired) reaches the store only at its `InitDone`: the reflector swaps it in
/// then. A reconcile whose object is not in the store is dropped, so the objects a relist
/// brought in are released at `InitDone`, from the store; before, those created while a relist
/// ran were never reconciled (500 of 3000 MyApps made during a relist, in the benchmark).
fn applied_once_stored<K: Cached>(
    events: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    store: Store<K>,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static {
    events.flat_map(move |event| match event {
        Ok(watcher::Event::Apply(object)) => stream::iter(vec![Ok(object)]).left_stream(),
        Ok(watcher::Event::InitDone) => stream::iter(store.state())
            .map(|object| Ok(K::clone(&object)))
            .right_stream(),
        Ok(watcher::Event::Init | watcher::Event::InitApply(_) | watcher::Event::Delete(_)) => {
            stream::iter(Vec::new()).left_stream()
        }
        Err(error) => stream::iter(vec![Err(error)]).left_stream(),
    })
}

/// The objects of kind `K` that control the object with `meta` (at most one, by the API's rules).
fn controllers_of<K: Cached>(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Vec<ObjectRef<Guarded<K>>> {
    let namespace = meta.namespace.as_deref().unwrap_or_default();
    meta.owner_references
        .iter()
        .flatten()
        .filter(|owner| {
            owner.controller == Some(true)
                && owner.kind == K::kind(&())
                && owner.api_version == K::api_version(&())
        })
        .map(|owner| ObjectRef::new(&owner.name).within(namespace))
        .collect()
}

/// What the runner keeps for one controller.
struct Context<R: Reconciler> {
    reconciler: R,
    shared: Shared,
    readiness: Readiness,
    backoff: Backoff,
    waiting_for_change: WaitingForChange,
}

impl<R: Reconciler> Context<R> {
    /// Drops everything remembered about a deleted object.
    fn forget(&self, object: &Guarded<R::Object>) {
        let key = key(object);
        self.backoff.reset(&key);
        self.shared.written.forget(&key);
        self.waiting_for_change.forget(&key);
        let namespace = object.namespace().unwrap_or_default();
        let (controller, name) = (self.shared.controller, object.name_any());
        self.shared
            .metrics
            .set_invalid(controller, &namespace, &name, false);
        self.shared
            .metrics
            .set_degraded(controller, &namespace, &name, None);
        self.reconciler.forget(&key);
    }
}

/// Objects whose last reconcile failed permanently, by key, with the uid and generation that
/// failed: they are not reconciled again until their spec (generation) changes or they are
/// re-created, so a refused child is not sent again and again.
#[derive(Default)]
struct WaitingForChange(Mutex<HashMap<String, (String, Option<i64>)>>);

impl WaitingForChange {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (String, Option<i64>)>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn record(
        &self,
        key: String,
        meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    ) {
        let uid = meta.uid.clone().unwrap_or_default();
        self.lock().insert(key, (uid, meta.generation));
    }

    /// Whether the object is unchanged since it failed permanently; a changed one is dropped.
    fn unchanged(
        &self,
        key: &str,
        meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    ) -> bool {
        let mut waiting = self.lock();
        let Some((uid, generation)) = waiting.get(key) else {
            return false;
        };
        if meta.uid.as_deref() == Some(uid.as_str()) && meta.generation == *generation {
            return true;
        }
        waiting.remove(key);
        false
    }

    fn forget(&self, key: &str) {
        self.lock().remove(key);
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

async fn reconcile<R: Reconciler>(
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
                if context
                    .waiting_for_change
                    .unchanged(&object_key, valid.meta())
                {
                    Ok(Action::await_change())
                } else {
                    match Target::resolve(valid, shared) {
                        Ok(target) => {
                            let reconciled = context.reconciler.reconcile(&target).await;
                            shared.finish(valid, reconciled).await
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
            Ok(_) => context.backoff.reset(&object_key),
            Err(error) if error.is_namespace_terminating() => {}
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
fn error_policy<R: Reconciler>(
    object: Arc<Guarded<R::Object>>,
    error: &Error,
    context: Arc<Context<R>>,
) -> Action {
    let controller = context.shared.controller;
    let object_key = key(object.as_ref());
    if error.is_namespace_terminating() {
        tracing::debug!(controller, object = %object_key, %error, "namespace is terminating; not retrying");
        return Action::await_change();
    }
    if error.is_permanent() {
        tracing::warn!(controller, object = %object_key, %error, reason = error.reason(), "Reconciler error; waiting for the object to change");
        context.waiting_for_change.record(object_key, object.meta());
        return Action::await_change();
    }
    let delay = context.backoff.failed(&object_key);
    context.shared.metrics.workqueue.retried(controller);
    tracing::warn!(controller, object = %object_key, %error, reason = error.reason(), retry_in = ?delay, "Reconciler error");
    Action::requeue(delay)
}

/// What every reconcile may use: the client, events, status writes, metrics.
pub struct Shared {
    pub controller: &'static str,
    pub client: Client,
    reporter: Reporter,
    /// Aggregates repeated Warnings (a failing reconcile retried) into one event with a series.
    /// It keeps every event it published for six minutes (about 3 KiB each), so one-off Normal
    /// events do not go through it: at 1000 MyApps it held 6 MiB, a sixth of the heap.
    warnings: Recorder,
    written: WrittenStatuses,
    pub metrics: Arc<Metrics>,
}

impl Shared {
    fn new(controller: &'static str, settings: &Settings) -> Shared {
        let reporter = Reporter {
            controller: format!("{FIELD_MANAGER}-{controller}"),
            instance: std::env::var("POD_NAME").ok(),
        };
        Shared {
            controller,
            client: settings.client.clone(),
            warnings: Recorder::new(settings.client.clone(), reporter.clone()),
            reporter,
            written: WrittenStatuses::default(),
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
    async fn report_invalid<K: Resource<DynamicType = ()>>(&self, object: &K, error: &str) {
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
    /// gives its requeue (or its failure, or the status write's).
    async fn finish<K: Cached + HasStatus>(
        &self,
        object: &K,
        reconciled: Reconciled<K::Status>,
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
                Some(status) => self.write_status(object, status, outcome).await,
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
    ) -> Result<(), Error> {
        let current = object.status();
        if outcome.as_ref().is_err_and(Error::is_namespace_terminating) {
            return outcome;
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
        let key = key(object);
        let version = object.meta().resource_version.as_deref();
        let fingerprint = Fingerprint::of(&desired);
        let written = fingerprint.is_some_and(|f| self.written.awaiting_cache(&key, version, f));
        if current == Some(&desired) || written {
            return outcome;
        }
        K::stamp(&mut desired);
        let written = apply_status(&self.client, object, &desired).await;
        if let (Ok(()), Some(fingerprint)) = (&written, fingerprint) {
            self.written.wrote(key, version, fingerprint);
        }
        outcome.and(written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(
        uid: &str,
        generation: i64,
    ) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            uid: Some(uid.into()),
            generation: Some(generation),
            ..Default::default()
        }
    }

    #[test]
    fn a_permanent_failure_waits_for_a_new_generation_or_a_new_object() {
        let waiting = WaitingForChange::default();
        waiting.record("ns/web".into(), &meta("u1", 3));
        assert!(waiting.unchanged("ns/web", &meta("u1", 3)));
        assert!(!waiting.unchanged("ns/other", &meta("u1", 3)));
        assert!(!waiting.unchanged("ns/web", &meta("u2", 3)), "re-created");
        assert!(
            !waiting.unchanged("ns/web", &meta("u1", 3)),
            "dropped once changed"
        );
        waiting.record("ns/web".into(), &meta("u1", 3));
        assert!(!waiting.unchanged("ns/web", &meta("u1", 4)), "spec changed");
    }

    fn config_map(name: &str) -> k8s_openapi::api::core::v1::ConfigMap {
        k8s_openapi::api::core::v1::ConfigMap {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// An expired watch relists without a backoff; any other failure is backed off.
    #[test]
    fn only_an_expired_watch_skips_the_backoff() {
        let failure = |code: u16| -> Result<
            watcher::Event<k8s_openapi::api::core::v1::ConfigMap>,
            watcher::Error,
        > {
            Err(watcher::Error::WatchError(
                kube::core::Status::failure("", "").with_code(code).boxed(),
            ))
        };
        assert!(expired("test", "ConfigMap", &failure(410)));
        assert!(!expired("test", "ConfigMap", &failure(500)));
        let done: Result<watcher::Event<k8s_openapi::api::core::v1::ConfigMap>, _> =
            Ok(watcher::Event::InitDone);
        assert!(!expired("test", "ConfigMap", &done));
    }

    /// A relist after the first: what it lists is released only once the store holds it, and
    /// all of it (a reconcile of an object not in the store would be dropped).
    #[tokio::test]
    async fn objects_of_a_relist_are_released_once_the_store_holds_them() {
        use watcher::Event;
        let (store, writer) = reflector::store();
        let events = vec![
            Event::Init,
            Event::InitApply(config_map("a")),
            Event::InitDone,
            Event::Apply(config_map("b")),
            // The watch expired; the relist finds c, created meanwhile.
            Event::Init,
            Event::InitApply(config_map("a")),
            Event::InitApply(config_map("b")),
            Event::InitApply(config_map("c")),
            Event::InitDone,
        ];
        let reflected = stream::iter(events.into_iter().map(Ok)).reflect(writer);
        let checked = store.clone();
        let released: Vec<(String, bool)> = applied_once_stored(reflected, store)
            .map(|object| {
                let object = object.unwrap_or_default();
                let stored = checked.get(&ObjectRef::from_obj(&object)).is_some();
                (object.name_any(), stored)
            })
            .collect()
            .await;
        let mut relisted = released.get(2..).unwrap_or_default().to_vec();
        relisted.sort();
        assert_eq!(
            released.get(..2).unwrap_or_default(),
            [("a".to_owned(), true), ("b".to_owned(), true)]
        );
        assert_eq!(
            relisted,
            [
                ("a".to_owned(), true),
                ("b".to_owned(), true),
                ("c".to_owned(), true)
            ]
        );
    }

    #[test]
    fn children_map_to_their_controlling_owner_of_the_primary_kind_only() {
        let child: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": { "name": "web-1", "namespace": "ns", "ownerReferences": [
                { "apiVersion": "example.com/v1", "kind": "MyApp", "name": "web", "uid": "u1", "controller": true },
                { "apiVersion": "example.com/v1", "kind": "MyApp", "name": "other", "uid": "u2" },
                { "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-rs", "uid": "u3", "controller": true }
            ]}
        }))
        .unwrap_or_default();
        let owners = controllers_of::<app_operator_api::MyApp>(&child.metadata);
        let names: Vec<(String, Option<String>)> =
            owners.into_iter().map(|r| (r.name, r.namespace)).collect();
        assert_eq!(names, [("web".to_owned(), Some("ns".to_owned()))]);
    }
}
