//! CloudNativePG beside SampleDB (issue 40, part 4): the PostgreSQL operator users pick, built
//! here from the module `hack/cloudnative-pg` pins, installed from that release's own manifest,
//! and run on the real node through the same three steps as the SampleDB round's first three:
//! - a single-instance Cluster created until it is Ready and accepts connections;
//! - the same 1 GiB written (not timed; nor is archiving the WAL it made), then an on-demand
//!   `Backup` (barman-cloud, to the node's object store) until it completed;
//! - a new Cluster bootstrapped from that backup until it is Ready and accepts connections,
//!   holding every row (read back by the same digest).
//!
//! Its PostgreSQL image is the SampleDB round's (Debian's `postgresql-15`) with barman-cloud
//! beside it, as CloudNativePG's own images carry it, and runs as that image's uid 999.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use local_cluster::ObjectStore;
use local_cluster::images::CLOUDNATIVE_PG_POSTGRES;
use local_cluster::tools::{go, module_dir};
use serde_json::{Value, json};
use testkit::sql_store::PostgresStore;

use super::cluster::{delete_namespace, ensure_namespace, wait_for};
use super::process::Scrape;
use super::sampledb::data;

/// The Go module that pins it, under `hack/`.
const MODULE: &str = "hack/cloudnative-pg";
const MODULE_PATH: &str = "github.com/cloudnative-pg/cloudnative-pg";
/// Its operator's namespace and Deployment, as its release manifest names them.
const SYSTEM_NAMESPACE: &str = "cnpg-system";
const DEPLOYMENT: &str = "cnpg-controller-manager";
/// Its operator's metrics port (controller-runtime's process metrics among them).
const METRICS_PORT: u16 = 8080;
const NAMESPACE: &str = "bench-cloudnative-pg";
const NAME: &str = "bench-pg";
const RESTORED: &str = "bench-pg-restored";
const CREDENTIALS: &str = "bench-pg-object-store";
/// The database its `initdb` makes for the application.
const DATABASE: &str = "app";
/// The same major as the SampleDB round's create, backup and restore.
const MAJOR: &str = "15";
const STEP_TIMEOUT: Duration = Duration::from_secs(900);

/// CloudNativePG built and its image on the node: what [`install`] applies.
pub struct Built {
    manifest: PathBuf,
    kubectl: PathBuf,
    /// Where its backups go: the node's object store.
    store: ObjectStore,
}

/// Builds its manager (static, as upstream's release does), writes it into an image named as its
/// manifest names it, and pushes that onto the running real node.
pub fn build(
    tools: &local_cluster::Tools,
    node: &local_cluster::node::NodeLayout,
    output: &Path,
) -> Result<Built> {
    let module = crate::repo().join(MODULE);
    let version = go(&module, &["list", "-m", "-f", "{{.Version}}", MODULE_PATH])?;
    let version = version.trim().trim_start_matches('v');
    let binary = output.join("cloudnative-pg/manager");
    let started = Instant::now();
    go(
        &module,
        &[
            "build",
            "-trimpath",
            "-ldflags",
            &format!("-s -w -X {MODULE_PATH}/pkg/versions.buildVersion={version}"),
            "-o",
            &binary.to_string_lossy(),
            &format!("{MODULE_PATH}/cmd/manager"),
        ],
    )?;
    eprintln!(
        "bench: built CloudNativePG {version}'s manager in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    let archive = output.join("cloudnative-pg/image.tar");
    write_image(&binary, &archive, &operator_image(version))?;
    crate::deliver::load(&archive)?;
    Ok(Built {
        // The module's own copy of the release manifest (the build put the module in the cache).
        manifest: module_dir(&module, MODULE_PATH)?.join(format!("releases/cnpg-{version}.yaml")),
        kubectl: tools.bin("kubectl"),
        store: node.object_store()?,
    })
}

/// `ghcr.io/cloudnative-pg/cloudnative-pg:<version>`, the name its manifest gives the operator
/// (and, through `OPERATOR_IMAGE_NAME`, every instance Pod's init container).
fn operator_image(version: &str) -> String {
    format!("ghcr.io/cloudnative-pg/cloudnative-pg:{version}")
}

/// Upstream's image, less the distroless base (a static binary needs nothing else): the binary
/// as `/operator/manager_amd64` (its operator reads the architectures it can hand instance Pods
/// from these names) and `/manager` linked to it, run as upstream's nonroot user.
fn write_image(binary: &Path, archive: &Path, name: &str) -> Result<()> {
    let layer_path = archive.with_extension("layer");
    let mut layer = local_cluster::oci::Layer::create(&layer_path)?;
    layer.file_in_new_dirs("operator/manager_amd64", binary, 0o755)?;
    layer.symlink("manager", "operator/manager_amd64")?;
    layer.finish()?;
    let config = local_cluster::oci::ImageConfig {
        entrypoint: vec!["/manager".to_owned()],
        user: Some("65532:65532".to_owned()),
        ..Default::default()
    };
    local_cluster::oci::write_archive(
        std::slice::from_ref(&layer_path),
        &config,
        &[name.to_owned()],
        archive,
    )?;
    std::fs::remove_file(&layer_path)?;
    Ok(())
}

/// CloudNativePG's operator, installed and serving its webhooks.
pub struct Installed {
    metrics: String,
    peak_rss_mib: Arc<Mutex<f64>>,
    sampler: tokio::task::JoinHandle<()>,
}

/// Applies its release manifest (server-side, as its documentation says) and waits until its
/// operator is Available (its readiness probe is its webhook server's).
pub async fn install(admin: &Client, kubeconfig: &Path, built: &Built) -> Result<Installed> {
    let applied = Command::new(&built.kubectl)
        .args(["apply", "--server-side", "-f"])
        .arg(&built.manifest)
        .env("KUBECONFIG", kubeconfig)
        .output()?;
    if !applied.status.success() {
        bail!(
            "applying {}: {}",
            built.manifest.display(),
            String::from_utf8_lossy(&applied.stderr).trim()
        );
    }
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), SYSTEM_NAMESPACE);
    wait_for(STEP_TIMEOUT, || async {
        let status = deployments.get(DEPLOYMENT).await.ok()?.status?;
        (status.available_replicas == Some(1)).then_some(())
    })
    .await
    .context("CloudNativePG's operator did not become Available")?;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), SYSTEM_NAMESPACE);
    let operator = ListParams::default().labels("app.kubernetes.io/name=cloudnative-pg");
    let address = pods
        .list(&operator)
        .await?
        .items
        .into_iter()
        .find(testkit::running_and_ready)
        .and_then(|pod| pod.status?.pod_ip)
        .context("CloudNativePG's operator Pod has no address")?;
    let metrics = format!("{address}:{METRICS_PORT}");
    let peak_rss_mib = Arc::new(Mutex::new(0.0));
    let sampler = super::process::sample_peak(peak_rss_mib.clone(), metrics.clone());
    Ok(Installed {
        metrics,
        peak_rss_mib,
        sampler,
    })
}

/// What its operator used, from its own metrics.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Usage {
    pub peak_rss_mib: f64,
    pub rss_mib: f64,
    pub cpu_seconds: f64,
}

impl Installed {
    /// An error if its metrics endpoint does not answer (its Pod replaced since [`install`]).
    pub fn usage(&self) -> Result<Usage> {
        let scrape = Scrape::at(&self.metrics);
        if scrape.is_empty() {
            bail!(
                "CloudNativePG's metrics at {} did not answer: was its Pod replaced?",
                self.metrics
            );
        }
        Ok(Usage {
            peak_rss_mib: *self.peak_rss_mib.lock().unwrap_or_else(|p| p.into_inner()),
            rss_mib: scrape.rss_mib(),
            cpu_seconds: scrape.cpu_seconds(),
        })
    }
}

impl Drop for Installed {
    fn drop(&mut self) {
        self.sampler.abort();
    }
}

/// One pass: create, backup and restore, each timed.
pub async fn pass(admin: &Client, built: &Built) -> Result<[Duration; 3]> {
    let store = &built.store;
    delete_namespace(admin, NAMESPACE).await?;
    ensure_namespace(admin, NAMESPACE).await?;
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), NAMESPACE);
    secrets
        .create(&PostParams::default(), &credentials(store)?)
        .await?;
    let clusters = api(admin, NAMESPACE, "Cluster");
    // Each pass archives under a path of its own: barman refuses a non-empty WAL archive.
    let path = format!(
        "s3://{}/cloudnative-pg/{}/",
        store.bucket,
        k8s_openapi::jiff::Timestamp::now().as_millisecond()
    );
    let object_store = barman_object_store(store, &path);

    let started = Instant::now();
    clusters
        .create(
            &PostParams::default(),
            &cluster(NAME, Some(&object_store), None)?,
        )
        .await?;
    let source = until_serving(admin, &clusters, NAME).await?;
    let created = started.elapsed();

    data::fill(&source).await?;
    let rows = data::digest(&source).await?;
    until_archived(&source).await?;

    let backups = api(admin, NAMESPACE, "Backup");
    let started = Instant::now();
    backups.create(&PostParams::default(), &backup()?).await?;
    until_backed_up(&backups).await?;
    let backed_up = started.elapsed();

    let started = Instant::now();
    clusters
        .create(
            &PostParams::default(),
            &cluster(RESTORED, Some(&object_store), Some(NAME))?,
        )
        .await?;
    let restored = until_serving(admin, &clusters, RESTORED).await?;
    let restored_in = started.elapsed();
    data::holds(&restored, &rows, "CloudNativePG's restore").await?;

    delete_namespace(admin, NAMESPACE).await?;
    Ok([created, backed_up, restored_in])
}

/// Its `kind` (`Cluster`, `Backup`) in `namespace`.
pub fn api(admin: &Client, namespace: &str, kind: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("postgresql.cnpg.io", "v1", kind);
    Api::namespaced_with(admin.clone(), namespace, &ApiResource::from_gvk(&gvk))
}

/// The object store's keys, for barman-cloud.
fn credentials(store: &ObjectStore) -> Result<Secret> {
    Ok(serde_json::from_value(json!({
        "metadata": { "name": CREDENTIALS },
        "stringData": {
            "ACCESS_KEY_ID": store.access_key_id,
            "ACCESS_SECRET_KEY": store.secret_access_key,
            "REGION": store.region,
        }
    }))?)
}

/// `barmanObjectStore` for the node's store under `path`, uncompressed (its default).
fn barman_object_store(store: &ObjectStore, path: &str) -> Value {
    let key = |key: &str| json!({ "name": CREDENTIALS, "key": key });
    json!({
        "destinationPath": path,
        "endpointURL": store.endpoint,
        "s3Credentials": {
            "accessKeyId": key("ACCESS_KEY_ID"),
            "secretAccessKey": key("ACCESS_SECRET_KEY"),
            "region": key("REGION"),
        },
    })
}

/// A single-instance Cluster, archiving to `object_store` when given, bootstrapped from
/// `recover_from`'s backups there when given. The superuser is enabled: the harness switches and
/// watches the WAL.
pub fn cluster(
    name: &str,
    object_store: Option<&Value>,
    recover_from: Option<&str>,
) -> Result<DynamicObject> {
    let mut spec = json!({
        "instances": 1,
        "imageName": format!("{CLOUDNATIVE_PG_POSTGRES}:{MAJOR}"),
        "postgresUID": 999,
        "postgresGID": 999,
        "enableSuperuserAccess": true,
        "storage": { "size": "4Gi" },
    });
    if let Some(object_store) = object_store {
        spec["backup"] = json!({ "barmanObjectStore": object_store });
    }
    if let (Some(source), Some(object_store)) = (recover_from, object_store) {
        spec["bootstrap"] = json!({ "recovery": { "source": source } });
        spec["externalClusters"] = json!([{ "name": source, "barmanObjectStore": object_store }]);
    }
    Ok(serde_json::from_value(json!({
        "apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
        "metadata": { "name": name }, "spec": spec,
    }))?)
}

fn backup() -> Result<DynamicObject> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "postgresql.cnpg.io/v1", "kind": "Backup",
        "metadata": { "name": NAME },
        "spec": { "cluster": { "name": NAME }, "method": "barmanObjectStore" },
    }))?)
}

/// Waits until Cluster `name` says Ready and its primary accepts connections.
async fn until_serving(
    admin: &Client,
    clusters: &Api<DynamicObject>,
    name: &str,
) -> Result<PostgresStore> {
    wait_for(STEP_TIMEOUT, || async {
        let cluster = clusters.get(name).await.ok()?;
        ready(&cluster.data).then_some(())
    })
    .await
    .with_context(|| format!("CloudNativePG's Cluster {name} did not become Ready"))?;
    wait_for(STEP_TIMEOUT, || accepting(admin, name))
        .await
        .with_context(|| format!("CloudNativePG's Cluster {name} does not accept connections"))
}

/// Its `Ready` condition is true.
pub fn ready(cluster: &Value) -> bool {
    cluster["status"]["conditions"]
        .as_array()
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// The primary of Cluster `name` answers a query with its superuser Secret's credentials.
async fn accepting(admin: &Client, name: &str) -> Option<PostgresStore> {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), NAMESPACE);
    let primary = ListParams::default().labels(&format!(
        "cnpg.io/cluster={name},cnpg.io/instanceRole=primary"
    ));
    let address = pods
        .list(&primary)
        .await
        .ok()?
        .items
        .into_iter()
        .find(testkit::running_and_ready)?
        .status?
        .pod_ip?;
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), NAMESPACE);
    let data = secrets.get(&format!("{name}-superuser")).await.ok()?.data?;
    let text = |key: &str| String::from_utf8(data.get(key)?.0.clone()).ok();
    let store = PostgresStore::new(&address, &text("username")?, &text("password")?, DATABASE);
    (store.psql("select 1").await.ok()?.trim() == "1").then_some(store)
}

/// Switches to a new WAL file and waits until the one it closed is archived: what the rows wrote
/// is in the archive before the backup is timed.
async fn until_archived(store: &PostgresStore) -> Result<()> {
    let closed = store
        .psql("select pg_walfile_name(pg_switch_wal())")
        .await
        .map_err(|e| anyhow::anyhow!("switching the WAL: {e}"))?;
    let archived = format!(
        "select coalesce(last_archived_wal >= '{}', false) from pg_stat_archiver",
        closed.trim()
    );
    wait_for(STEP_TIMEOUT, || async {
        (store.psql(&archived).await.ok()?.trim() == "t").then_some(())
    })
    .await
    .with_context(|| format!("WAL file {} was not archived", closed.trim()))
}

/// Waits until the Backup completed; an error naming why if it failed.
async fn until_backed_up(backups: &Api<DynamicObject>) -> Result<()> {
    let status = wait_for(STEP_TIMEOUT, || async {
        let status = backups.get(NAME).await.ok()?.data["status"].clone();
        ["completed", "failed"]
            .contains(&status["phase"].as_str()?)
            .then_some(status)
    })
    .await
    .context("CloudNativePG's Backup did not finish")?;
    if status["phase"] != "completed" {
        bail!("CloudNativePG's Backup failed: {}", status["error"]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> ObjectStore {
        ObjectStore {
            endpoint: "http://10.0.0.1:7070".to_owned(),
            bucket: "backups".to_owned(),
            access_key_id: "id".to_owned(),
            secret_access_key: "secret".to_owned(),
            region: "us-east-1".to_owned(),
        }
    }

    #[test]
    fn a_restored_cluster_recovers_from_the_source_archive() {
        let object_store = barman_object_store(&store(), "s3://backups/p/");
        let restored =
            serde_json::to_value(cluster(RESTORED, Some(&object_store), Some(NAME)).unwrap())
                .unwrap();
        assert_eq!(
            restored["spec"]["bootstrap"],
            json!({ "recovery": { "source": NAME } })
        );
        assert_eq!(restored["spec"]["externalClusters"][0]["name"], NAME);
        assert_eq!(
            restored["spec"]["externalClusters"][0]["barmanObjectStore"]["destinationPath"],
            "s3://backups/p/"
        );
        let source =
            serde_json::to_value(cluster(NAME, Some(&object_store), None).unwrap()).unwrap();
        assert_eq!(source["spec"]["bootstrap"], Value::Null);
        let without = serde_json::to_value(cluster(NAME, None, None).unwrap()).unwrap();
        assert_eq!(without["spec"]["backup"], Value::Null);
        assert_eq!(
            source["spec"]["imageName"],
            "ghcr.io/cloudnative-pg/postgresql:15"
        );
    }

    #[test]
    fn ready_only_with_a_true_ready_condition() {
        let with = |status: &str| {
            json!({ "status": { "conditions": [
            { "type": "ContinuousArchiving", "status": "True" },
            { "type": "Ready", "status": status },
        ] } })
        };
        assert!(ready(&with("True")));
        assert!(!ready(&with("False")));
        assert!(!ready(&json!({})));
    }
}
