//! Watches into caches: the stores reconciles read, when a watch may skip the backoff, which
//! objects a relist releases, and which owner a child event wakes.

use std::time::Instant;

use futures::stream::{self};
use futures::{Stream, StreamExt};
use kube::ResourceExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};

use super::{Cached, Guarded, Settings};
use crate::mutation::{self, Mutation};

/// A watch of `K` kept in a store that reconciles read instead of the API server. Managed fields
/// are dropped (never read here, and the bulk of every object); the cache is marked synced at
/// the end of each initial list.
pub(super) fn cache<K: Cached>(
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
                if mutation::active(Mutation::WatchErrorsFatal) {
                    std::process::exit(1);
                }
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
pub(super) fn expired<K>(
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
pub(super) fn applied_once_stored<K: Cached>(
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

/// The objects of kind `K` a change of the child with `meta` wakes: its controller of kind `K`
/// (at most one, by the API's rules), else the one its `label` names. A Job's or a StatefulSet's
/// Pods are controlled by that child, not by the `K` that made it, yet the `K` reads them: a Job
/// is done at its Pod's end, a second before the Job controller's batched sync says so.
pub(super) fn woken_by<K: Cached>(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    label: Option<&str>,
) -> Vec<ObjectRef<Guarded<K>>> {
    let namespace = meta.namespace.as_deref().unwrap_or_default();
    let controllers: Vec<_> = meta
        .owner_references
        .iter()
        .flatten()
        .filter(|owner| {
            owner.controller == Some(true)
                && owner.kind == K::kind(&())
                && owner.api_version == K::api_version(&())
        })
        .map(|owner| ObjectRef::new(&owner.name).within(namespace))
        .collect();
    if !controllers.is_empty() {
        return controllers;
    }
    label
        .and_then(|label| meta.labels.as_ref()?.get(label))
        .map(|name| ObjectRef::new(name).within(namespace))
        .into_iter()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let owners = woken_by::<app_operator_api::MyApp>(&child.metadata, Some(LABEL));
        assert_eq!(names(owners), [("web".to_owned(), Some("ns".to_owned()))]);
    }

    const LABEL: &str = "db.example.com/sampledb";

    fn names<K: Cached>(owners: Vec<ObjectRef<Guarded<K>>>) -> Vec<(String, Option<String>)> {
        owners.into_iter().map(|r| (r.name, r.namespace)).collect()
    }

    /// A Job's Pod wakes the SampleDB its label names (the Job controls it); without the label,
    /// or with no label asked for, nothing.
    #[test]
    fn a_childs_own_pods_wake_the_primary_their_label_names() {
        let pod = |labels: serde_json::Value| -> k8s_openapi::api::core::v1::Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": { "name": "db-init-x7k2p", "namespace": "ns", "labels": labels,
                    "ownerReferences": [
                        { "apiVersion": "batch/v1", "kind": "Job", "name": "db-init", "uid": "u1", "controller": true }
                    ]}
            }))
            .unwrap_or_default()
        };
        let labelled = pod(serde_json::json!({ LABEL: "db" }));
        let woken = |pod: &k8s_openapi::api::core::v1::Pod, label| {
            names(woken_by::<app_operator_api::SampleDB>(&pod.metadata, label))
        };
        assert_eq!(
            woken(&labelled, Some(LABEL)),
            [("db".to_owned(), Some("ns".to_owned()))]
        );
        assert_eq!(woken(&labelled, None), []);
        assert_eq!(woken(&pod(serde_json::json!({})), Some(LABEL)), []);
    }
}
