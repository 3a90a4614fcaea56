//! Both PostgreSQL operators at rest with many databases (issue 40, part 4): N SampleDBs made
//! and Ready, then app-operator's memory and CPU over a quiet minute; the namespace deleted; then
//! N single-instance CloudNativePG Clusters the same way. One side at a time: the node's kubelet
//! admits 110 Pods.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use app_operator::api::SampleDB;
use app_operator::api::conditions::READY;
use app_operator::reconcile::conditions::is_true;
use kube::Client;
use kube::api::{Api, DynamicObject, PostParams};
use serde::Serialize;

use super::cloudnativepg::{self, Installed};
use super::cluster::{delete_namespace, ensure_namespace, wait_for};
use super::process::Operator;
use super::sampledb;

const NAMESPACE: &str = "bench-at-rest";
/// How long every database may take to become Ready.
const READY_TIMEOUT: Duration = Duration::from_secs(1800);
/// The quiet window each operator's CPU is measured over, once its databases are Ready.
const WINDOW: Duration = Duration::from_secs(60);

/// One operator with its databases Ready.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct AtRest {
    /// From the first create until every database was Ready.
    pub ready_seconds: f64,
    /// Its RSS at the end of the window.
    pub rss_mib: f64,
    /// CPU seconds it used over the window.
    pub window_cpu_seconds: f64,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct BothAtRest {
    pub databases: usize,
    pub window_seconds: f64,
    pub app_operator: AtRest,
    pub cloudnativepg: AtRest,
}

pub async fn both(
    admin: &Client,
    operator: &Operator,
    cloudnative_pg: &Installed,
    count: usize,
) -> Result<BothAtRest> {
    let names: Vec<String> = (0..count).map(|i| format!("db-{i:03}")).collect();

    eprintln!("bench: {count} SampleDBs, then app-operator at rest for {WINDOW:?}");
    let databases = names
        .iter()
        .map(|name| sampledb::sample_db(name, None))
        .collect::<Result<Vec<_>>>()?;
    let app_operator = side(
        admin,
        Api::namespaced(admin.clone(), NAMESPACE),
        databases,
        |db: &SampleDB| {
            db.status.as_ref().is_some_and(|s| {
                is_true(&s.conditions, READY) && s.observed_generation == db.metadata.generation
            })
        },
        || Ok((operator.rss_mib(), operator.totals().0)),
    )
    .await
    .context("app-operator's SampleDBs")?;

    eprintln!("bench: {count} CloudNativePG Clusters, then CloudNativePG at rest for {WINDOW:?}");
    let clusters = names
        .iter()
        .map(|name| cloudnativepg::cluster(name, None, None))
        .collect::<Result<Vec<_>>>()?;
    let cloudnativepg = side(
        admin,
        cloudnativepg::api(admin, NAMESPACE, "Cluster"),
        clusters,
        |cluster: &DynamicObject| cloudnativepg::ready(&cluster.data),
        || cloudnative_pg.usage().map(|u| (u.rss_mib, u.cpu_seconds)),
    )
    .await
    .context("CloudNativePG's Clusters")?;

    Ok(BothAtRest {
        databases: count,
        window_seconds: WINDOW.as_secs_f64(),
        app_operator,
        cloudnativepg,
    })
}

/// In a namespace of their own: `objects` created until `ready` says so of every one, then the
/// operator's `usage` (RSS, CPU seconds so far) read across [`WINDOW`]; the namespace deleted.
async fn side<K>(
    admin: &Client,
    api: Api<K>,
    objects: Vec<K>,
    ready: impl Fn(&K) -> bool,
    usage: impl Fn() -> Result<(f64, f64)>,
) -> Result<AtRest>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    delete_namespace(admin, NAMESPACE).await?;
    ensure_namespace(admin, NAMESPACE).await?;
    let count = objects.len();
    let started = Instant::now();
    for object in &objects {
        api.create(&PostParams::default(), object).await?;
    }
    wait_for(READY_TIMEOUT, || async {
        let listed = api.list(&Default::default()).await.ok()?;
        (listed.items.iter().filter(|o| ready(o)).count() == count).then_some(())
    })
    .await
    .with_context(|| format!("not all {count} became Ready"))?;
    let ready_seconds = started.elapsed().as_secs_f64();
    let (_, cpu_before) = usage()?;
    // A window of measurement, not a wait for something.
    tokio::time::sleep(WINDOW).await;
    let (rss_mib, cpu_after) = usage()?;
    delete_namespace(admin, NAMESPACE).await?;
    Ok(AtRest {
        ready_seconds,
        rss_mib,
        window_cpu_seconds: cpu_after - cpu_before,
    })
}
