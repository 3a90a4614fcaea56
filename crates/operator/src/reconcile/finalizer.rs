//! A deletion finalizer whose cleanup may take time: it is added before anything else is made,
//! and on deletion the cleanup reports done, wait (come back later) or blocked (a person must
//! act; the message says how). It never holds a namespace that is being deleted: when the API
//! server refuses what the cleanup would make there (NamespaceLifecycle), the cleanup is skipped,
//! counted, and the finalizer removed.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use serde_json::{Value, json};

use super::runner::{Cached, Reconciled, Target};
use super::{Error, FIELD_MANAGER};

/// How far a deletion's cleanup has got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cleanup {
    /// Nothing is left to do: the finalizer goes, and with it the object.
    Done,
    /// Under way (a Job running): look again after this long.
    Wait(Duration),
    /// Cannot go on until a person acts: `message` says how to unblock it.
    Blocked {
        reason: &'static str,
        message: String,
    },
}

/// Where an object stands with respect to the finalizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Live without the finalizer: add it before making anything.
    AddFinalizer,
    /// Live with the finalizer: reconcile as usual.
    Live,
    /// Being deleted: run the cleanup.
    CleanUp,
    /// Being deleted, and the finalizer is already gone: nothing to do.
    Gone,
}

/// The stage of an object with `meta` for `finalizer`.
pub fn stage(meta: &ObjectMeta, finalizer: &str) -> Stage {
    let ours = meta.finalizers.iter().flatten().any(|f| f == finalizer);
    match (meta.deletion_timestamp.is_some(), ours) {
        (false, false) => Stage::AddFinalizer,
        (false, true) => Stage::Live,
        (true, false) => Stage::Gone,
        (true, true) => Stage::CleanUp,
    }
}

/// The merge patch that sets the finalizers to `meta`'s with `finalizer` added or removed. It
/// carries the resourceVersion it was computed from, so a concurrent change of the list makes it
/// fail (409, retried) instead of losing another controller's finalizer.
pub fn finalizers_patch(meta: &ObjectMeta, finalizer: &str, present: bool) -> Value {
    let mut finalizers: Vec<&str> = meta
        .finalizers
        .iter()
        .flatten()
        .map(String::as_str)
        .filter(|f| *f != finalizer)
        .collect();
    if present {
        finalizers.push(finalizer);
    }
    json!({ "metadata": {
        "finalizers": finalizers,
        "resourceVersion": meta.resource_version,
    }})
}

/// Runs `live` for a live object (after adding `finalizer`), or `cleanup` for one being deleted,
/// removing the finalizer once the cleanup is done. A blocked cleanup is an error
/// ([`Error::CleanupBlocked`], permanent: it waits for a change of the object).
pub async fn finalize<K, M, S, L, C>(
    target: &Target<'_, K, M>,
    finalizer: &str,
    live: impl FnOnce() -> L,
    cleanup: impl FnOnce() -> C,
) -> Reconciled<S>
where
    K: Cached,
    M: Default,
    L: Future<Output = Reconciled<S>>,
    C: Future<Output = (Result<Cleanup, Error>, S)>,
{
    let (object, shared) = (target.object, target.shared);
    let api: Api<K> = Api::namespaced(shared.client.clone(), &target.namespace);
    let settled = |result: Result<bool, Error>| {
        // The patch comes back through the watch and starts the next reconcile.
        Reconciled::unchanged(result.map(|_| Action::await_change()))
    };
    match stage(object.meta(), finalizer) {
        Stage::AddFinalizer => settled(set_finalizer(&api, object, finalizer, true).await),
        Stage::Live => live().await,
        Stage::Gone => settled(Ok(false)),
        Stage::CleanUp => match cleanup().await {
            (Err(error), _) if error.is_namespace_gone() => {
                // Waiting would hold the namespace forever: nothing can be made there any more.
                // Counted once: a second pass on a stale cache finds the object changed or gone.
                let removed = set_finalizer(&api, object, finalizer, false).await;
                if let Ok(true) = removed {
                    tracing::info!(finalizer, %error, "namespace is being deleted; skipped the cleanup");
                    shared
                        .metrics
                        .cleanup_skipped(shared.controller, "NamespaceTerminating");
                }
                settled(removed)
            }
            (Err(error), status) => Reconciled::status(status, Err(error), Action::await_change()),
            // The object goes with the finalizer: no status to write.
            (Ok(Cleanup::Done), _) => settled(set_finalizer(&api, object, finalizer, false).await),
            (Ok(Cleanup::Wait(after)), status) => {
                Reconciled::status(status, Ok(()), Action::requeue(after))
            }
            (Ok(Cleanup::Blocked { reason, message }), status) => Reconciled::status(
                status,
                Err(Error::CleanupBlocked { reason, message }),
                Action::await_change(),
            ),
        },
    }
}

/// Returns whether the object was changed (false: it was already gone).
async fn set_finalizer<K: Cached>(
    api: &Api<K>,
    object: &K,
    finalizer: &str,
    present: bool,
) -> Result<bool, Error> {
    let patch = finalizers_patch(object.meta(), finalizer, present);
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    match api
        .patch(&object.name_any(), &params, &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(true),
        // Removing from an object that is already gone: done.
        Err(kube::Error::Api(status)) if status.code == 404 && !present => Ok(false),
        Err(source) => Err(Error::Finalizer { source }),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    const OURS: &str = "db.example.com/snapshot";

    fn meta(finalizers: &[&str], deleting: bool) -> ObjectMeta {
        ObjectMeta {
            finalizers: Some(finalizers.iter().map(|f| (*f).to_owned()).collect()),
            deletion_timestamp: deleting.then_some(Time(Timestamp::UNIX_EPOCH)),
            resource_version: Some("42".into()),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn stages_by_deletion_and_finalizer() {
        let cases = [
            (meta(&[], false), Stage::AddFinalizer),
            (meta(&["other"], false), Stage::AddFinalizer),
            (meta(&[OURS], false), Stage::Live),
            (meta(&[OURS], true), Stage::CleanUp),
            (meta(&["other", OURS], true), Stage::CleanUp),
            (meta(&["other"], true), Stage::Gone),
        ];
        for (meta, expected) in cases {
            assert_eq!(
                stage(&meta, OURS),
                expected,
                "{:?} deleting={}",
                meta.finalizers,
                meta.deletion_timestamp.is_some()
            );
        }
    }

    #[test]
    fn patches_keep_other_finalizers_and_guard_the_version() {
        let added = finalizers_patch(&meta(&["other"], false), OURS, true);
        assert_eq!(
            added,
            json!({ "metadata": { "finalizers": ["other", OURS], "resourceVersion": "42" } })
        );
        let removed = finalizers_patch(&meta(&[OURS, "other"], true), OURS, false);
        assert_eq!(
            removed,
            json!({ "metadata": { "finalizers": ["other"], "resourceVersion": "42" } })
        );
        let again = finalizers_patch(&meta(&[OURS], false), OURS, true);
        assert_eq!(again["metadata"]["finalizers"], json!([OURS]), "added once");
    }
}
