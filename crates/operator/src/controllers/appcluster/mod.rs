//! The AppCluster controller: `size` Pods made directly, replaced when deleted or failed, removed
//! on scale-down, never more than `size` (expectations), garbage-collected with the AppCluster.

mod expectations;
mod pods;
mod status;

pub use pods::{is_ready, pod, surplus};
pub use status::status;

use std::collections::HashMap;
use std::sync::Arc;

use std::time::Duration;
use tracing::Instrument;

use app_operator_api::AppCluster;
use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::Store;
use kube::{Resource, ResourceExt};

use self::expectations::{Expectations, Seen};
use self::pods::{is_active, is_finished};
use super::{Common, Settings, child_cache, drain, key, log_start, primary_cache, reconcile_span};
use crate::reconcile::Error;
use crate::reconcile::apply::{controller_reference, is_controlled_by};

pub const NAME: &str = "appcluster";

/// How many Pod creates or deletes one reconcile has in flight at once.
const POD_WRITES_IN_FLIGHT: usize = 32;

struct Context {
    common: Common,
    pods: Store<Pod>,
    expectations: Expectations,
}

pub async fn run(settings: Settings, shutdown: impl Future<Output = ()> + Send + Sync + 'static) {
    let (clusters, cluster_events) = primary_cache::<AppCluster>(&settings, NAME);
    let (pods, pod_events) = child_cache(&settings, NAME);
    let controller = Controller::for_stream(cluster_events, clusters)
        .owns_stream(pod_events)
        .with_config(controller::Config::default().concurrency(settings.concurrency))
        .graceful_shutdown_on(shutdown);
    let context = Arc::new(Context {
        common: Common::new(NAME, &settings),
        pods,
        expectations: Expectations::default(),
    });
    log_start(NAME, &settings);
    drain(controller.run(reconcile, error_policy, context)).await;
    tracing::info!(controller = NAME, "Stopped Controller");
}

async fn reconcile(cluster: Arc<AppCluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    let span = reconcile_span(NAME, cluster.as_ref());
    reconcile_object(cluster, ctx).instrument(span).await
}

async fn reconcile_object(cluster: Arc<AppCluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    let _timer = ctx.common.metrics.reconcile_started(NAME);
    let object_key = key(cluster.as_ref());
    let namespace = cluster
        .namespace()
        .ok_or(Error::MissingMetadata("namespace"))?;
    let uid = cluster.uid().ok_or(Error::MissingMetadata("uid"))?;
    if cluster.meta().deletion_timestamp.is_some() {
        ctx.expectations.forget(&object_key);
        return Ok(Action::await_change());
    }
    let owned: Vec<Arc<Pod>> = ctx
        .pods
        .state()
        .into_iter()
        .filter(|pod| {
            pod.namespace().as_deref() == Some(namespace.as_str())
                && is_controlled_by(pod.as_ref(), &uid)
        })
        .collect();
    let by_name: HashMap<String, &Pod> = owned
        .iter()
        .map(|pod| (pod.name_any(), pod.as_ref()))
        .collect();
    let synced = ctx
        .expectations
        .satisfied(&object_key, |name| match by_name.get(name) {
            Some(pod) if pod.metadata.deletion_timestamp.is_none() => Seen::Present,
            _ => Seen::Gone,
        });
    let active: Vec<&Pod> = owned
        .iter()
        .map(Arc::as_ref)
        .filter(|pod| is_active(pod))
        .collect();
    let ready = active.iter().filter(|pod| is_ready(pod)).count();

    // Act only on a cache that reflects our own last writes; otherwise wait for their events.
    let outcome = if synced {
        scale(&cluster, &namespace, &owned, &active, &ctx).await
    } else {
        Ok(())
    };

    let now = Time(Timestamp::now());
    let desired = status(&cluster, active.len(), ready, outcome.as_ref().err(), &now);
    // Pending expectations resolve through Pod events; the requeue is only a safety net.
    let then = if synced {
        Action::await_change()
    } else {
        Action::requeue(Duration::from_secs(10))
    };
    ctx.common
        .conclude(
            cluster.as_ref(),
            cluster.status.as_ref(),
            desired,
            |_| {},
            outcome,
            then,
        )
        .await
}

fn error_policy(cluster: Arc<AppCluster>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.common.retry(cluster.as_ref(), error)
}

/// Deletes finished Pods, then creates or deletes Pods until `size` are active, recording each
/// write as an expectation before the next reconcile may act.
async fn scale(
    cluster: &AppCluster,
    namespace: &str,
    owned: &[Arc<Pod>],
    active: &[&Pod],
    ctx: &Context,
) -> Result<(), Error> {
    let object_key = key(cluster);
    let api: Api<Pod> = Api::namespaced(ctx.common.client.clone(), namespace);
    let size = usize::try_from(cluster.spec.size).unwrap_or(0);
    let finished: Vec<&Pod> = owned
        .iter()
        .map(Arc::as_ref)
        .filter(|pod| is_finished(pod))
        .collect();
    let to_delete: Vec<&Pod> = if active.len() > size {
        finished
            .into_iter()
            .chain(surplus(active.to_vec(), active.len() - size))
            .collect()
    } else {
        finished
    };
    let missing = size.saturating_sub(active.len());

    let deleted = delete_pods(&api, to_delete.iter().map(|pod| pod.name_any()).collect()).await;
    ctx.expectations.add(
        &object_key,
        [],
        deleted.iter().filter_map(|r| r.as_ref().ok().cloned()),
    );
    let owner = controller_reference(cluster).ok_or(Error::MissingMetadata("uid"))?;
    let template = pod(cluster, owner);
    let created: Vec<Result<String, Error>> = stream::iter(0..missing)
        .map(|_| {
            let api = api.clone();
            let template = template.clone();
            async move {
                let pod = api
                    .create(&PostParams::default(), &template)
                    .await
                    .map_err(|source| Error::CreatePod { source })?;
                Ok(pod.name_any())
            }
        })
        .buffer_unordered(POD_WRITES_IN_FLIGHT)
        .collect()
        .await;
    ctx.expectations.add(
        &object_key,
        created.iter().filter_map(|r| r.as_ref().ok().cloned()),
        [],
    );

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
    for (count, reason, verb) in counts.into_iter().filter(|(count, _, _)| *count > 0) {
        let note = format!("{verb} {count} pod(s) for size {size}");
        ctx.common
            .publish(cluster, EventType::Normal, reason, "Scale", note)
            .await;
    }
    created
        .into_iter()
        .chain(deleted)
        .try_for_each(|r| r.map(|_| ()))
}

/// Deletes `pods`; a Pod already gone counts as deleted.
async fn delete_pods(api: &Api<Pod>, names: Vec<String>) -> Vec<Result<String, Error>> {
    stream::iter(names)
        .map(|name| async move {
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => Ok(name),
                Err(kube::Error::Api(status)) if status.code == 404 => Ok(name),
                Err(source) => Err(Error::Delete {
                    kind: "Pod".into(),
                    name,
                    source,
                }),
            }
        })
        .buffer_unordered(POD_WRITES_IN_FLIGHT)
        .collect()
        .await
}
