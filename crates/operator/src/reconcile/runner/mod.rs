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
//! - what is remembered per object (its backoff, its last status write, a permanent failure, the
//!   controller's own [`Reconciler::Memory`]) is one entry, dropped when the object is deleted.

mod caches;
mod reconciled;
mod shared;
mod worker;

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;

use futures::stream::{self, BoxStream};
use futures::{StreamExt, TryStreamExt};
use kube::api::Api;
use kube::core::DeserializeGuard;
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use super::backoff::{Backoff, Failures};
use super::managed_selector;
use super::memory::PerObject;
use super::written::WrittenStatus;
use crate::telemetry::metrics::Metrics;
use crate::telemetry::readiness::Readiness;

use self::caches::{applied_once_stored, cache, woken_by};
pub use self::reconciled::{Announcement, HasStatus, Reconciled, Target};
pub use self::shared::Shared;
use self::worker::{Context, PermanentFailure, error_policy, reconcile};

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
    /// What the controller remembers about each object between reconciles ([`Target::remember`]).
    type Memory: Default + Send + 'static;

    /// Brings the world in line with the target's object, and says what its status should be.
    /// A failure in [`Reconciled::outcome`] is the runner's to report and retry.
    fn reconcile(
        &self,
        target: &Target<'_, Self::Object, Self::Memory>,
    ) -> impl Future<Output = Reconciled<<Self::Object as HasStatus>::Status>> + Send;

    /// Drops the metrics of the object `namespace`/`name`, which is gone.
    fn forget_metrics(&self, _namespace: &str, _name: &str) {}
}

/// What the runner remembers about one object, with what its controller remembers (`own`).
#[derive(Default)]
pub(super) struct Remembered<M> {
    /// Transient failures since the last success, for the retry's backoff.
    failures: Failures,
    /// The last status written, until the cache shows it.
    written: WrittenStatus,
    permanent_failure: PermanentFailure,
    own: M,
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

pub(super) type Guarded<K> = DeserializeGuard<K>;
type WatchEvents<K> = BoxStream<'static, Result<watcher::Event<K>, watcher::Error>>;

/// Builds a controller: its primary watch, then one watch per owned child kind, then runs it.
pub struct Runner<K: Cached> {
    name: &'static str,
    settings: Settings,
    /// The label that narrows the children this controller watches and names their `K` (see
    /// [`Runner::children`]).
    children_label: Option<String>,
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
            children_label: None,
            store,
            events: events.boxed(),
            triggers: Vec::new(),
        }
    }

    /// Narrows the children this controller watches to those with `label` (a label selector
    /// requirement, e.g. `etcd_cluster`), besides the operator's `managed-by` label. Every
    /// controller that shares a child kind with another names its own: each caches its own
    /// children, not a copy of every other controller's (1000 MyApps' Services were cached three
    /// times). Its value names the child's `K`, which wakes it when no `K` controls the child
    /// (a Job's Pods).
    pub fn children(mut self, label: &str) -> Self {
        self.children_label = Some(label.to_owned());
        self
    }

    /// Watches the children of kind `C` the operator manages (by label) and reconciles their
    /// controlling `K` (else the one their label names) on each change, deletions included (a
    /// deleted child is rebuilt). Returns the cache the reconcile reads them from.
    pub fn owns<C: Cached>(&mut self) -> Store<C> {
        let selector = match &self.children_label {
            Some(label) => format!("{},{label}", managed_selector()),
            None => managed_selector(),
        };
        let config = watcher::Config::default().labels(&selector);
        let (store, events) = cache::<C>(&self.settings, self.name, config);
        let label = self.children_label.clone();
        let owners = events
            .touched_objects()
            .filter_map(move |child| {
                // Errors were reported by the cache.
                let owners = child.map_or_else(
                    |_| Vec::new(),
                    |child| woken_by::<K>(child.meta(), label.as_deref()),
                );
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
            children_label: _,
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
            retries: Backoff::default(),
            memory: PerObject::default(),
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
