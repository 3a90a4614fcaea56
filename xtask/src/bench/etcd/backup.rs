//! The backup and restore steps of the EtcdCluster round. [`DATA_MIB`] of values are written to
//! the cluster (not timed); the operator's EtcdBackup snapshots it to a claim, and by hand the
//! backup Job's own Pod does the same on a claim like the operator's (`etcdctl snapshot save`,
//! then `etcdutl snapshot status`). The cluster is then deleted (not timed) and one restored from
//! the snapshot, by the operator from `spec.restore.backupName`, by hand from the operator's own
//! restored member Pods (the first runs `etcdutl snapshot restore`, the others join it). What
//! each restored cluster holds is read back, value by value.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use app_operator::api::EtcdBackup;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use testkit::etcd_store::EtcdStore;
use testkit::history::Store;

use super::{
    CLUSTER, FLOOR_NAMESPACE, OPERATOR_NAMESPACE, STEP_TIMEOUT, copied, endpoints, selector,
};
use crate::bench::cluster::{until_none, wait_for};
use crate::bench::copy;

/// How much the cluster holds when it is backed up.
pub const DATA_MIB: usize = 100;
/// The operator's EtcdBackup.
pub const BACKUP: &str = "bench-backup";
const VALUE_KIB: usize = 256;

/// Key `index` of the data.
fn key(index: usize) -> String {
    format!("bench-data/{index:05}")
}

/// Its value: the key, repeated to [`VALUE_KIB`] KiB.
fn value(index: usize) -> String {
    key(index).repeat(VALUE_KIB * 1024 / key(index).len())
}

fn keys() -> usize {
    DATA_MIB * 1024 / VALUE_KIB
}

/// etcd through the first member Pod with an address.
async fn store(pods: &Api<Pod>) -> Result<EtcdStore> {
    let endpoint = endpoints(&pods.list(&selector()).await?.items)
        .into_iter()
        .next()
        .context("a member Pod with an address")?;
    Ok(EtcdStore::new(endpoint))
}

/// Writes the data, one value at a time.
async fn fill(pods: &Api<Pod>) -> Result<()> {
    let store = store(pods).await?;
    for index in 0..keys() {
        store
            .write(&key(index), &value(index))
            .await
            .map_err(|e| anyhow!("writing {}: {e}", key(index)))?;
    }
    Ok(())
}

/// Every value written is read back unchanged from the (restored) members of `pods`.
pub async fn holds_the_data(pods: &Api<Pod>) -> Result<()> {
    let store = store(pods).await?;
    for index in 0..keys() {
        let read = store
            .read_all(&key(index))
            .await
            .map_err(|e| anyhow!("reading {}: {e}", key(index)))?;
        if read.get(&key(index)) != Some(&value(index)) || read.len() != 1 {
            bail!("{} is missing or changed after the restore", key(index));
        }
    }
    Ok(())
}

/// Deletes the cluster's members (`delete` asks), and waits until their Pods are gone.
pub async fn delete_members<F, Fut>(pods: &Api<Pod>, delete: F) -> Result<()>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    delete().await?;
    until_none(pods, &selector(), STEP_TIMEOUT)
        .await
        .context("the members' Pods were not deleted")
}

/// The data written, then EtcdBackup [`BACKUP`] of the cluster until it says it succeeded: its
/// time, the claim it wrote to and its Job's Pod (as a Pod of its own).
pub async fn by_operator(admin: &Client, pods: &Api<Pod>) -> Result<(Duration, Value, Value)> {
    fill(pods).await?;
    let backups: Api<EtcdBackup> = Api::namespaced(admin.clone(), OPERATOR_NAMESPACE);
    let backup: EtcdBackup = serde_json::from_value(json!({
        "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdBackup",
        "metadata": { "name": BACKUP }, "spec": { "etcdCluster": { "name": CLUSTER } }
    }))?;
    let started = Instant::now();
    backups.create(&PostParams::default(), &backup).await?;
    let claim = wait_for(STEP_TIMEOUT, || async {
        let status = backups.get(BACKUP).await.ok()?.status?;
        status.succeeded.then_some(status.claim_name).flatten()
    })
    .await
    .context("the EtcdBackup did not succeed")?;
    let taken = started.elapsed();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(admin.clone(), OPERATOR_NAMESPACE);
    let claim = serde_json::to_value(claims.get(&claim).await?)?;
    let jobs: Api<Job> = Api::namespaced(admin.clone(), OPERATOR_NAMESPACE);
    let job = jobs
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .next()
        .context("the EtcdBackup's Job")?;
    let job_pod = copy::job_pod(&job);
    Ok((taken, claim, job_pod))
}

/// The data written, then by hand: the operator's claim and its backup Job's Pod, in the floor's
/// namespace, until the Pod has succeeded.
pub async fn by_hand(admin: &Client, claim: &Value, job_pod: &Value) -> Result<Duration> {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), FLOOR_NAMESPACE);
    fill(&pods).await?;
    let (claim, job_pod) = (copied(claim)?, copied(job_pod)?);
    let name = job_pod["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let started = Instant::now();
    copy::create(admin, FLOOR_NAMESPACE, claim).await?;
    copy::create(admin, FLOOR_NAMESPACE, job_pod).await?;
    copy::until_succeeded(&pods, &name, STEP_TIMEOUT).await?;
    Ok(started.elapsed())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_data_is_as_large_as_said_and_each_value_names_its_key() {
        let total: usize = (0..keys()).map(|index| value(index).len()).sum();
        assert!(
            total <= DATA_MIB << 20 && total > (DATA_MIB << 20) * 99 / 100,
            "{total}"
        );
        assert!(value(7).starts_with("bench-data/00007bench-data/00007"));
    }
}
