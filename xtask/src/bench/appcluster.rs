//! AppCluster 0 → size: the operator's Pods against the same Pods from a plain client.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Result;
use app_operator::api::AppCluster;
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde::Serialize;

use super::Options;
use super::cluster::{delete_namespace, ensure_namespace, wait_for};
use super::watch::{Recorded, Series, pod_ready};

#[derive(Serialize)]
pub struct AppClusterRound {
    pub size: i32,
    pub operator_ready: Series,
    pub floor_ready: Series,
    pub operator_seconds: Option<f64>,
    pub floor_seconds: Option<f64>,
    pub ratio_to_floor: Option<f64>,
    pub most_pods_at_once: usize,
}

pub async fn appcluster_round(
    admin: &Client,
    floor: &Client,
    options: &Options,
) -> Result<AppClusterRound> {
    let size = options.appcluster_size;
    let count = usize::try_from(size)?;
    let timeout = Duration::from_secs(300);
    let namespace = "bench-appcluster";
    ensure_namespace(admin, namespace).await?;
    let clusters: Api<AppCluster> = Api::namespaced(admin.clone(), namespace);
    let cluster: AppCluster = serde_json::from_value(serde_json::json!({
        "apiVersion": "demo.demo.io/v1", "kind": "AppCluster", "metadata": { "name": "big" }, "spec": { "size": 0 }
    }))?;
    clusters.create(&PostParams::default(), &cluster).await?;
    let start = Instant::now();
    let ready = Recorded::start(
        Api::<Pod>::namespaced(admin.clone(), namespace),
        start,
        pod_ready,
    );
    let most = Arc::new(Mutex::new(0_usize));
    let counter = {
        let (pods, most) = (
            Api::<Pod>::namespaced(admin.clone(), namespace),
            most.clone(),
        );
        tokio::spawn(async move {
            let mut names = std::collections::HashSet::new();
            let events = watcher(pods, watcher::Config::default()).default_backoff();
            futures::pin_mut!(events);
            while let Some(Ok(event)) = events.next().await {
                match event {
                    watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
                        names.insert(p.name_any());
                    }
                    watcher::Event::Delete(p) => {
                        names.remove(&p.name_any());
                    }
                    _ => {}
                }
                let mut most = most.lock().unwrap_or_else(|p| p.into_inner());
                *most = (*most).max(names.len());
            }
        })
    };
    let patch = serde_json::json!({ "spec": { "size": size } });
    clusters
        .patch("big", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    wait_for(timeout, || async {
        (clusters.get("big").await.ok()?.status?.ready >= size).then_some(())
    })
    .await;
    let operator_ready = Series::from_times(ready.times().into_values().collect());
    let most_pods_at_once = *most.lock().unwrap_or_else(|p| p.into_inner());
    drop(ready);
    counter.abort();
    // The AppCluster first (its Pods go with it), so the operator is not left replacing Pods
    // that the namespace's deletion removes.
    clusters.delete("big", &DeleteParams::foreground()).await?;
    wait_for(timeout, || async {
        clusters.get_opt("big").await.ok()?.is_none().then_some(())
    })
    .await;
    delete_namespace(admin, namespace).await?;

    let namespace = "bench-pods-floor";
    ensure_namespace(admin, namespace).await?;
    let start = Instant::now();
    let ready = Recorded::start(
        Api::<Pod>::namespaced(admin.clone(), namespace),
        start,
        pod_ready,
    );
    let pods: Api<Pod> = Api::namespaced(floor.clone(), namespace);
    let template = {
        let cluster: AppCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "demo.demo.io/v1", "kind": "AppCluster", "metadata": { "name": "big", "namespace": namespace }, "spec": { "size": size }
        }))?;
        let mut pod =
            app_operator::controllers::appcluster::pod(&cluster, OwnerReference::default());
        pod.metadata.owner_references = None;
        pod
    };
    stream::iter(0..count)
        .map(|_| {
            let (pods, template) = (pods.clone(), template.clone());
            async move {
                pods.create(&PostParams::default(), &template).await?;
                anyhow::Ok(())
            }
        })
        // The operator's own number of Pod writes in flight.
        .buffer_unordered(32)
        .try_collect::<Vec<()>>()
        .await?;
    wait_for(timeout, || async {
        (ready.times().len() >= count).then_some(())
    })
    .await;
    let floor_ready = Series::from_times(ready.times().into_values().collect());
    drop(ready);
    delete_namespace(admin, namespace).await?;

    let operator_seconds = operator_ready.total(count);
    let floor_seconds = floor_ready.total(count);
    Ok(AppClusterRound {
        size,
        ratio_to_floor: operator_seconds
            .zip(floor_seconds)
            .map(|(o, f)| o / f.max(0.001)),
        operator_seconds,
        floor_seconds,
        operator_ready,
        floor_ready,
        most_pods_at_once,
    })
}
