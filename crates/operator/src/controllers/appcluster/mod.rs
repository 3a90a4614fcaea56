//! The AppCluster controller: `size` Pods made directly, replaced when deleted or failed, removed
//! on scale-down, never more than `size` (expectations), garbage-collected with the AppCluster.
//! Creates go out in slow-start batches (1, 2, 4, …, at most [`BURST`] a pass), and Pods that keep
//! failing are replaced with growing delays, as the ReplicaSet and DaemonSet controllers do.

mod expectations;
pub(crate) mod pods;
mod status;

pub use pods::{CLUSTER_LABEL, pod};

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use app_operator_api::{AppCluster, AppClusterStatus};
use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::Store;

use self::expectations::{Expectations, Seen};
use self::pods::{is_active, is_finished, is_ready, surplus};
use self::status::status;
use super::Wiring;
use crate::mutation::{self, Mutation};
use crate::reconcile::Error;
use crate::reconcile::apply::controlled;
use crate::reconcile::backoff::{Backoff, Failures};
use crate::reconcile::children::delete_child;
use crate::reconcile::managed_selector;
use crate::reconcile::runner::{
    Announcement, Reconciled, Reconciler, Runner, Settings, Target, key,
};
use serde_json::json;

pub const NAME: &str = "appcluster";

/// The most Pods one pass creates (the ReplicaSet controller's `burstReplicas`): a size of
/// 10 000 is reached over several passes, each waiting for the cache to show the last one.
pub const BURST: usize = 500;

/// How many Pod deletes one reconcile has in flight at once.
const DELETES_IN_FLIGHT: usize = 32;

pub async fn run(wiring: Wiring, shutdown: impl Future<Output = ()> + Send + Sync + 'static) {
    let settings = wiring.settings;
    label_pods_of_older_versions(&settings).await;
    let mut runner = Runner::<AppCluster>::new(NAME, &settings).children(CLUSTER_LABEL);
    let reconciler = AppClusterReconciler {
        pods: runner.owns(),
    };
    runner.run(reconciler, shutdown).await;
}

/// Gives the Pods an earlier version of the operator made (labelled only `app: <name>`) the label the
/// controller now watches, so they keep counting toward `size` instead of being replaced and then
/// deleted as surplus. A failure is logged: those Pods are then replaced, never lost track of
/// (they stay owned by their AppCluster).
async fn label_pods_of_older_versions(settings: &Settings) {
    let pods: Api<Pod> = settings.api();
    let unlabelled = format!("app,{},!{CLUSTER_LABEL}", managed_selector());
    let listed = match pods.list(&ListParams::default().labels(&unlabelled)).await {
        Ok(listed) => listed.items,
        Err(error) => {
            tracing::warn!(%error, "could not list AppCluster Pods of an older version to label them");
            return;
        }
    };
    for pod in listed {
        let owner = pod.owner_references().iter().find(|owner| {
            owner.controller == Some(true)
                && owner.kind == "AppCluster"
                && owner.api_version.starts_with("demo.demo.io/")
        });
        let (Some(owner), Some(namespace)) = (owner, pod.namespace()) else {
            continue;
        };
        let label = json!({ "metadata": { "labels": { CLUSTER_LABEL: owner.name } } });
        let api: Api<Pod> = Api::namespaced(settings.client.clone(), &namespace);
        match api
            .patch(
                &pod.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&label),
            )
            .await
        {
            Ok(_) => {
                tracing::info!(pod = %key(&pod), cluster = owner.name, "labelled a Pod of an older version")
            }
            Err(error) => {
                tracing::warn!(pod = %key(&pod), %error, "could not label a Pod of an older version; it will be replaced")
            }
        }
    }
}

/// Replacing Pods that failed waits longer after each round.
const FAILED_POD_BACKOFF: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(300));

struct AppClusterReconciler {
    pods: Store<Pod>,
}

/// What is remembered about each AppCluster.
#[derive(Default)]
struct Memory {
    expectations: Expectations,
    failed_pods: Failures,
}

impl Reconciler for AppClusterReconciler {
    type Object = AppCluster;
    type Memory = Memory;

    async fn reconcile(
        &self,
        target: &Target<'_, AppCluster, Memory>,
    ) -> Reconciled<AppClusterStatus> {
        let cluster = target.object;
        if target.deleting() {
            // Going away; the garbage collector removes its Pods.
            return Reconciled::unchanged(Ok(Action::await_change()));
        }
        let owned = controlled(&self.pods, &target.namespace, &target.uid);
        let by_name: HashMap<String, &Pod> = owned
            .iter()
            .map(|pod| (pod.name_any(), pod.as_ref()))
            .collect();
        let synced = target.remember(|memory| {
            memory
                .expectations
                .satisfied(|name| match by_name.get(name) {
                    Some(pod) if pod.metadata.deletion_timestamp.is_none() => Seen::Present,
                    _ => Seen::Gone,
                })
        });
        let active: Vec<&Pod> = owned
            .iter()
            .map(Arc::as_ref)
            .filter(|pod| is_active(pod))
            .filter(|pod| !mutation::active(Mutation::CountOnlyReadyPods) || is_ready(pod))
            .collect();
        let ready = active.iter().filter(|pod| is_ready(pod)).count();

        // Act only on a cache that reflects our own last writes; otherwise wait for their events
        // (the requeue is only a safety net).
        let (outcome, then, announce) = if synced {
            self.scale(target, &owned, &active).await
        } else {
            (Ok(()), Action::requeue(Duration::from_secs(10)), Vec::new())
        };

        let now = Time(Timestamp::now());
        let desired = status(cluster, active.len(), ready, outcome.as_ref().err(), &now);
        Reconciled::status(desired, outcome, then).announcing(announce)
    }
}

impl AppClusterReconciler {
    /// Deletes finished Pods (unless they keep failing and wait their turn), then creates or
    /// deletes Pods until `size` are active, recording each write as an expectation before the
    /// next reconcile may act.
    async fn scale(
        &self,
        target: &Target<'_, AppCluster, Memory>,
        owned: &[Arc<Pod>],
        active: &[&Pod],
    ) -> (Result<(), Error>, Action, Vec<Announcement>) {
        let cluster = target.object;
        let api: Api<Pod> = Api::namespaced(target.shared.client.clone(), &target.namespace);
        let size = usize::try_from(cluster.spec.size).unwrap_or(0);
        let finished: Vec<&Pod> = owned
            .iter()
            .map(Arc::as_ref)
            .filter(|pod| is_finished(pod))
            .collect();
        let mut then = Action::await_change();
        let (replaced, waiting) = match target.remember(|memory| memory.failed_pods.remaining()) {
            Some(delay) if !finished.is_empty() => {
                then = Action::requeue(delay);
                (Vec::new(), finished.len())
            }
            _ => (finished, 0),
        };
        let replacing = !replaced.is_empty();
        let to_delete: Vec<String> = if active.len() > size {
            replaced
                .into_iter()
                .chain(surplus(active.to_vec(), active.len() - size))
                .map(ResourceExt::name_any)
                .collect()
        } else {
            replaced.into_iter().map(ResourceExt::name_any).collect()
        };
        let missing = size.saturating_sub(active.len() + waiting);

        let deleted = delete_pods(&api, to_delete).await;
        target.remember(|memory| {
            let deleted = deleted.iter().filter_map(|r| r.as_ref().ok().cloned());
            memory.expectations.add([], deleted);
        });
        let template = pod(cluster, target.owner.clone());
        let created = create_pods(&api, &template, missing.min(BURST)).await;
        target.remember(|memory| {
            let created = created.iter().filter_map(|r| r.as_ref().ok().cloned());
            memory.expectations.add(created, []);
        });
        // The delay runs from when the replacements exist, so two replacements are never closer
        // than it, however slow the calls were. Replacements are not reset by a Ready Pod: a
        // crashing container is Ready for a while before each failure. The backoff starts over
        // after ten quiet minutes instead.
        if replacing {
            target.remember(|memory| FAILED_POD_BACKOFF.failed(&mut memory.failed_pods));
        }

        let counts = [
            (
                created.iter().filter(|r| r.is_ok()).count(),
                "PodsCreated",
                "Created",
            ),
            (
                deleted.iter().filter(|r| r.is_ok()).count(),
                "PodsDeleted",
                "Deleted",
            ),
        ];
        let announce = counts
            .into_iter()
            .filter(|(count, _, _)| *count > 0)
            .map(|(count, reason, verb)| Announcement {
                type_: EventType::Normal,
                reason: reason.into(),
                action: "Scale",
                note: format!("{verb} {count} pod(s) for size {size}"),
            })
            .collect();
        let outcome = created
            .into_iter()
            .chain(deleted)
            .try_for_each(|r| r.map(|_| ()));
        (outcome, then, announce)
    }
}

/// Batch sizes for creating `count` Pods: 1, 2, 4, … (the ReplicaSet controller's slow start),
/// the last one what is left. A failing batch stops the rest, so a quota or a refusing webhook
/// costs a few requests, not `count`.
pub fn slow_start_batches(count: usize) -> Vec<usize> {
    let mut batches = Vec::new();
    let (mut left, mut next) = (count, 1usize);
    while left > 0 {
        let batch = next.min(left);
        batches.push(batch);
        left -= batch;
        next = next.saturating_mul(2);
    }
    batches
}

/// Creates `count` Pods from `template` in slow-start batches; stops after a batch with a failure.
async fn create_pods(api: &Api<Pod>, template: &Pod, count: usize) -> Vec<Result<String, Error>> {
    let mut results = Vec::with_capacity(count);
    for batch in slow_start_batches(count) {
        let created: Vec<Result<String, Error>> = stream::iter(0..batch)
            .map(|_| async {
                api.create(&PostParams::default(), template)
                    .await
                    .map(|pod| pod.name_any())
                    .map_err(|source| Error::CreatePod { source })
            })
            .buffer_unordered(batch)
            .collect()
            .await;
        let failed = created.iter().any(Result::is_err);
        results.extend(created);
        if failed {
            break;
        }
    }
    results
}

/// Deletes `pods`; a Pod already gone counts as deleted.
async fn delete_pods(api: &Api<Pod>, names: Vec<String>) -> Vec<Result<String, Error>> {
    stream::iter(names)
        .map(|name| async move { delete_child(api, &name, None).await.map(|()| name) })
        .buffer_unordered(DELETES_IN_FLIGHT)
        .collect()
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_start_doubles_and_ends_with_the_rest() {
        assert_eq!(slow_start_batches(0), Vec::<usize>::new());
        assert_eq!(slow_start_batches(1), [1]);
        assert_eq!(slow_start_batches(10), [1, 2, 4, 3]);
        let burst = slow_start_batches(BURST);
        assert_eq!(burst, [1, 2, 4, 8, 16, 32, 64, 128, 245]);
        assert_eq!(burst.iter().sum::<usize>(), BURST);
    }
}
