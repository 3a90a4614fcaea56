//! The SampleDB round on the real node: four steps of a SampleDB (PostgreSQL), each by the
//! operator, then by hand (the floor) with the operator's own objects, images and scripts:
//! - created until it accepts connections. By hand: the operator's Secret, ConfigMaps, claims,
//!   Service and StatefulSet copied into the floor's namespace and created, then, once
//!   PostgreSQL accepts connections, its init Job's Pod.
//! - a backup of about 1 GiB ([`data::ROWS`] written first on both sides, not timed): an
//!   on-demand backup (the annotation) until the status says it succeeded. By hand: its backup
//!   Job's Pod (`pg_dump`).
//! - a restore of that dump into a new SampleDB (`spec.restore`) until it is Ready and accepts
//!   connections. By hand: the new SampleDB's objects copied, then its restore Job's Pod
//!   (`pg_restore`).
//! - an upgrade of the 1 GiB database from PostgreSQL 15 to 17 (`spec.version`). By hand: its
//!   StatefulSet scaled to 0, the operator's upgrade Job's Pod (a dump by 15, a restore by 17),
//!   then the StatefulSet with the operator's new template.
//!
//! What every restored or upgraded database holds is read back: every row, by a digest.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use app_operator::api::conditions::READY;
use app_operator::api::{BACKUP_REQUESTED_AT, SampleDB};
use app_operator::controllers::sampledb::children::{
    DATABASE, dump_file, generated_secret, upgrade_job_name,
};
use app_operator::reconcile::conditions::is_true;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret, Service};
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use testkit::sql_store::PostgresStore;

use super::TimedStep;
use super::cluster::{delete_namespace, ensure_namespace, until_none, wait_for};
use super::copy;
use super::process::Operator;

pub(super) mod data;

const NAME: &str = "bench-db";
/// The SampleDB restored from [`NAME`]'s backup.
const RESTORED: &str = "bench-db-restored";
const OPERATOR_NAMESPACE: &str = "bench-db-operator";
const FLOOR_NAMESPACE: &str = "bench-db-floor";
const VERSION: &str = "15";
const UPGRADED_VERSION: &str = "17";
/// Longest a step may take (a restore or an upgrade of 1 GiB takes minutes).
const STEP_TIMEOUT: Duration = Duration::from_secs(900);

/// The steps' names, in order.
fn step_names() -> [String; 4] {
    [
        format!("create (PostgreSQL {VERSION}) → accepting connections"),
        "backup of 1 GiB (pg_dump)".to_owned(),
        "restore of 1 GiB into a new SampleDB (pg_restore)".to_owned(),
        format!("upgrade {VERSION} → {UPGRADED_VERSION} of 1 GiB"),
    ]
}

/// What the operator made for a SampleDB, for the floor to make by hand: its objects in the order
/// they are created, and its first Job's Pod (init or restore).
struct Built {
    objects: Vec<Value>,
    first_job_pod: Value,
}

/// One pass: each step by the operator, then by hand.
pub async fn sampledb_pass(admin: &Client, operator: &Operator) -> Result<Vec<TimedStep>> {
    for namespace in [OPERATOR_NAMESPACE, FLOOR_NAMESPACE] {
        delete_namespace(admin, namespace).await?;
        ensure_namespace(admin, namespace).await?;
    }
    let databases: Api<SampleDB> = Api::namespaced(admin.clone(), OPERATOR_NAMESPACE);
    let mut seconds = Vec::new();

    // Created.
    let started = Instant::now();
    databases
        .create(&PostParams::default(), &sample_db(NAME, None)?)
        .await?;
    let source = until_serving(admin, NAME, VERSION).await?;
    let by_operator = started.elapsed();
    let created = built(admin, NAME).await?;
    operator.until_idle(STEP_TIMEOUT).await?;
    let started = Instant::now();
    let floor_source = by_hand(admin, &created, NAME).await?;
    seconds.push((by_operator, started.elapsed()));

    // Filled alike on both sides (not timed).
    data::fill(&source).await?;
    data::fill(&floor_source).await?;
    let rows = data::digest(&source).await?;
    data::holds(&floor_source, &rows, "writing the same rows by hand").await?;
    eprintln!(
        "bench: the SampleDB holds {:.0} MiB ({} rows)",
        data::size_mib(&source).await?,
        data::ROWS
    );

    // Backed up.
    let (by_operator, dump, backup_pod) = backup_by_operator(admin).await?;
    operator.until_idle(STEP_TIMEOUT).await?;
    seconds.push((by_operator, run_to_success(admin, &backup_pod).await?));

    // Restored into a new SampleDB.
    let started = Instant::now();
    databases
        .create(&PostParams::default(), &sample_db(RESTORED, Some(&dump))?)
        .await?;
    let restored = until_serving(admin, RESTORED, VERSION).await?;
    let by_operator = started.elapsed();
    data::holds(&restored, &rows, "the operator's restore").await?;
    let restored_objects = built(admin, RESTORED).await?;
    operator.until_idle(STEP_TIMEOUT).await?;
    let started = Instant::now();
    let floor_restored = by_hand(admin, &restored_objects, RESTORED).await?;
    seconds.push((by_operator, started.elapsed()));
    data::holds(&floor_restored, &rows, "the restore by hand").await?;

    // Upgraded.
    let (by_operator, upgrade) = upgrade_by_operator(admin, &databases, &rows).await?;
    operator.until_idle(STEP_TIMEOUT).await?;
    let started = Instant::now();
    let floor_upgraded = upgrade_by_hand(admin, &upgrade).await?;
    seconds.push((by_operator, started.elapsed()));
    serves_the_upgrade(&floor_upgraded, &rows, "the upgrade by hand").await?;

    for namespace in [OPERATOR_NAMESPACE, FLOOR_NAMESPACE] {
        delete_namespace(admin, namespace).await?;
    }
    Ok(step_names()
        .into_iter()
        .zip(seconds)
        .map(|(name, (operator, floor))| TimedStep {
            name,
            operator_seconds: operator.as_secs_f64(),
            floor_seconds: floor.as_secs_f64(),
        })
        .collect())
}

/// SampleDB `name` (PostgreSQL [`VERSION`], room for 1 GiB and its dumps), restored from `dump`
/// in [`NAME`]'s backups volume when given.
pub(super) fn sample_db(name: &str, dump: Option<&str>) -> Result<SampleDB> {
    let mut spec = json!({
        "version": VERSION,
        "storage": { "size": "4Gi", "backupsSize": "4Gi" },
        // Deleted with its data when the pass ends, without a final dump.
        "deletion": { "policy": "Delete" }
    });
    if let Some(dump) = dump {
        spec["restore"] = json!({ "source": NAME, "backupFile": dump });
    }
    Ok(serde_json::from_value(json!({
        "apiVersion": "db.example.com/v1alpha1", "kind": "SampleDB",
        "metadata": { "name": name }, "spec": spec
    }))?)
}

/// What the operator made for SampleDB `name`.
fn selector(name: &str) -> ListParams {
    ListParams::default().labels(&format!("app.kubernetes.io/instance={name}"))
}

/// Its database Pod.
fn server(name: &str) -> ListParams {
    ListParams::default().labels(&format!(
        "app.kubernetes.io/instance={name},db.example.com/role=database"
    ))
}

/// Waits until the operator's SampleDB `name` says Ready for its generation at `version`, and
/// accepts connections.
async fn until_serving(admin: &Client, name: &str, version: &str) -> Result<PostgresStore> {
    let databases: Api<SampleDB> = Api::namespaced(admin.clone(), OPERATOR_NAMESPACE);
    wait_for(STEP_TIMEOUT, || async {
        let database = databases.get(name).await.ok()?;
        let status = database.status?;
        (is_true(&status.conditions, READY)
            && status.observed_generation == database.metadata.generation
            && status.current_version.as_deref() == Some(version))
        .then_some(())
    })
    .await
    .with_context(|| format!("the operator's SampleDB {name} did not become Ready at {version}"))?;
    until_accepting(admin, OPERATOR_NAMESPACE, name).await
}

/// Waits until the database Pod of `name` in `namespace` accepts connections.
async fn until_accepting(admin: &Client, namespace: &str, name: &str) -> Result<PostgresStore> {
    wait_for(STEP_TIMEOUT, || accepting(admin, namespace, name))
        .await
        .with_context(|| format!("{name} in {namespace} does not accept connections"))
}

/// The operator's children of SampleDB `name`, copied for the floor.
async fn built(admin: &Client, name: &str) -> Result<Built> {
    async fn each<K: copy::Namespaced>(
        admin: &Client,
        name: &str,
        objects: &mut Vec<Value>,
    ) -> Result<()> {
        let listed = Api::<K>::namespaced(admin.clone(), OPERATOR_NAMESPACE)
            .list(&selector(name))
            .await?;
        for object in listed {
            let value = serde_json::to_value(&object)?;
            objects.push(copy::copied(&value, OPERATOR_NAMESPACE, FLOOR_NAMESPACE)?);
        }
        Ok(())
    }
    let mut objects = Vec::new();
    each::<Secret>(admin, name, &mut objects).await?;
    each::<ConfigMap>(admin, name, &mut objects).await?;
    each::<PersistentVolumeClaim>(admin, name, &mut objects).await?;
    each::<Service>(admin, name, &mut objects).await?;
    each::<StatefulSet>(admin, name, &mut objects).await?;
    let jobs: Api<Job> = Api::namespaced(admin.clone(), OPERATOR_NAMESPACE);
    let first_job = jobs
        .list(&selector(name))
        .await?
        .items
        .into_iter()
        .next()
        .with_context(|| format!("SampleDB {name}'s init or restore Job"))?;
    let first_job_pod = copy::copied(
        &copy::job_pod(&first_job),
        OPERATOR_NAMESPACE,
        FLOOR_NAMESPACE,
    )?;
    Ok(Built {
        objects,
        first_job_pod,
    })
}

/// By hand: the operator's objects created in the floor's namespace, then, once PostgreSQL
/// accepts connections, the first Job's Pod, until it succeeded.
async fn by_hand(admin: &Client, built: &Built, name: &str) -> Result<PostgresStore> {
    for object in &built.objects {
        copy::create(admin, FLOOR_NAMESPACE, object.clone()).await?;
    }
    let store = until_accepting(admin, FLOOR_NAMESPACE, name).await?;
    run_to_success(admin, &built.first_job_pod).await?;
    Ok(store)
}

/// Creates `pod` (a copy) in the floor's namespace and waits until it succeeded: its time.
async fn run_to_success(admin: &Client, pod: &Value) -> Result<Duration> {
    let name = pod["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let started = Instant::now();
    copy::create(admin, FLOOR_NAMESPACE, pod.clone()).await?;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), FLOOR_NAMESPACE);
    copy::until_succeeded(&pods, &name, STEP_TIMEOUT).await?;
    Ok(started.elapsed())
}

/// An on-demand backup of [`NAME`] by the operator until its status says it succeeded: its time,
/// the dump's file name and the backup Job's Pod copied for the floor.
async fn backup_by_operator(admin: &Client) -> Result<(Duration, String, Value)> {
    let databases: Api<SampleDB> = Api::namespaced(admin.clone(), OPERATOR_NAMESPACE);
    let request = k8s_openapi::jiff::Timestamp::now().to_string();
    let annotation = json!({ "metadata": { "annotations": { BACKUP_REQUESTED_AT: request } } });
    let started = Instant::now();
    databases
        .patch(NAME, &PatchParams::default(), &Patch::Merge(&annotation))
        .await?;
    let job = wait_for(STEP_TIMEOUT, || async {
        let backup = databases.get(NAME).await.ok()?.status?.backup;
        (backup.last_handled_request.as_ref() == Some(&request))
            .then_some(backup.last_successful_job)
            .flatten()
    })
    .await
    .context("the on-demand backup did not succeed")?;
    let taken = started.elapsed();
    let jobs: Api<Job> = Api::namespaced(admin.clone(), OPERATOR_NAMESPACE);
    let job = jobs.get(&job).await?;
    let pod = copy::copied(&copy::job_pod(&job), OPERATOR_NAMESPACE, FLOOR_NAMESPACE)?;
    let dump = dump_file(&job.metadata.name.unwrap_or_default());
    Ok((taken, dump, pod))
}

/// What the floor repeats of the operator's upgrade: its Job's Pod, and the StatefulSet's
/// template after it.
struct Upgrade {
    job_pod: Value,
    template: Value,
}

/// [`NAME`] upgraded by the operator until it serves [`UPGRADED_VERSION`] with every row.
async fn upgrade_by_operator(
    admin: &Client,
    databases: &Api<SampleDB>,
    rows: &str,
) -> Result<(Duration, Upgrade)> {
    let version = json!({ "spec": { "version": UPGRADED_VERSION } });
    let started = Instant::now();
    databases
        .patch(NAME, &PatchParams::default(), &Patch::Merge(&version))
        .await?;
    let upgraded = until_serving(admin, NAME, UPGRADED_VERSION).await?;
    let taken = started.elapsed();
    serves_the_upgrade(&upgraded, rows, "the operator's upgrade").await?;
    let jobs: Api<Job> = Api::namespaced(admin.clone(), OPERATOR_NAMESPACE);
    let job = jobs.get(&upgrade_job_name(NAME, UPGRADED_VERSION)).await?;
    let job_pod = copy::copied(&copy::job_pod(&job), OPERATOR_NAMESPACE, FLOOR_NAMESPACE)?;
    let sets: Api<StatefulSet> = Api::namespaced(admin.clone(), OPERATOR_NAMESPACE);
    let set = serde_json::to_value(sets.get(NAME).await?)?;
    let set = copy::copied(&set, OPERATOR_NAMESPACE, FLOOR_NAMESPACE)?;
    let template = set["spec"]["template"].clone();
    Ok((taken, Upgrade { job_pod, template }))
}

/// By hand: the floor's StatefulSet scaled to 0 until its Pod is gone, the upgrade Job's Pod run,
/// then the StatefulSet with the operator's new template.
async fn upgrade_by_hand(admin: &Client, upgrade: &Upgrade) -> Result<PostgresStore> {
    let sets: Api<StatefulSet> = Api::namespaced(admin.clone(), FLOOR_NAMESPACE);
    let replicas = |count: i32| json!({ "spec": { "replicas": count } });
    sets.patch(NAME, &PatchParams::default(), &Patch::Merge(&replicas(0)))
        .await?;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), FLOOR_NAMESPACE);
    until_none(&pods, &server(NAME), STEP_TIMEOUT)
        .await
        .context("the floor's database Pod was not deleted")?;
    run_to_success(admin, &upgrade.job_pod).await?;
    let mut upgraded = replicas(1);
    upgraded["spec"]["template"] = upgrade.template.clone();
    sets.patch(NAME, &PatchParams::default(), &Patch::Merge(&upgraded))
        .await?;
    until_accepting(admin, FLOOR_NAMESPACE, NAME).await
}

/// `store` runs [`UPGRADED_VERSION`] and holds every row.
async fn serves_the_upgrade(store: &PostgresStore, rows: &str, what: &str) -> Result<()> {
    let major = data::major_version(store).await?;
    if major != UPGRADED_VERSION {
        bail!("after {what} the server runs PostgreSQL {major}, not {UPGRADED_VERSION}");
    }
    data::holds(store, rows, what).await
}

/// The database Pod of `name` in `namespace` is Ready and answers a query with the credentials
/// its Secret holds, at the Pod's address: a connection to it.
async fn accepting(admin: &Client, namespace: &str, name: &str) -> Option<PostgresStore> {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), namespace);
    let server = pods
        .list(&server(name))
        .await
        .ok()?
        .items
        .into_iter()
        .find(testkit::running_and_ready)?;
    let address = server.status?.pod_ip?;
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), namespace);
    let data = secrets.get(&generated_secret(name)).await.ok()?.data?;
    let text = |key: &str| String::from_utf8(data.get(key)?.0.clone()).ok();
    let store = PostgresStore::new(&address, &text("username")?, &text("password")?, DATABASE);
    (store.psql("select 1").await.ok()?.trim() == "1").then_some(store)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_finds_the_database_by_its_instance_label() {
        assert_eq!(
            server(NAME).label_selector.as_deref(),
            Some("app.kubernetes.io/instance=bench-db,db.example.com/role=database")
        );
    }

    #[test]
    fn a_restored_database_starts_from_the_dump_in_the_source_backups() {
        let restored = serde_json::to_value(sample_db(RESTORED, Some("b.dump")).unwrap()).unwrap();
        assert_eq!(
            restored["spec"]["restore"],
            json!({ "source": NAME, "backupFile": "b.dump" })
        );
        let source = serde_json::to_value(sample_db(NAME, None).unwrap()).unwrap();
        assert_eq!(source["spec"]["restore"], Value::Null);
    }
}
