//! The SampleDB round on the real node: a SampleDB (PostgreSQL 15, 1 GiB) created by the operator
//! until it says Ready and accepts connections, then the same by hand (the floor): everything the
//! operator made for it (its Secret, ConfigMaps, claims, Service and StatefulSet) copied into
//! another namespace and created, and once PostgreSQL accepts connections, the init Job's Pod
//! run on its own, as the operator runs its init Job then.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use app_operator::api::SampleDB;
use app_operator::api::conditions::READY;
use app_operator::reconcile::conditions::is_true;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret, Service};
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use testkit::sql_store::PostgresStore;

use super::TimedStep;
use super::cluster::{delete_namespace, ensure_namespace, wait_for};
use super::copy;
use super::process::Operator;

const NAME: &str = "bench-db";
const OPERATOR_NAMESPACE: &str = "bench-db-operator";
const FLOOR_NAMESPACE: &str = "bench-db-floor";
const VERSION: &str = "15";
/// Longest a step may take (images are local; PostgreSQL initializes in seconds).
const STEP_TIMEOUT: Duration = Duration::from_secs(300);

/// What the operator made, for the floor to make by hand: in the order it is created.
struct Built {
    objects: Vec<Value>,
    init_pod: Value,
}

/// One operator pass, then one floor pass.
pub async fn sampledb_pass(admin: &Client, operator: &Operator) -> Result<Vec<TimedStep>> {
    delete_namespace(admin, OPERATOR_NAMESPACE).await?;
    delete_namespace(admin, FLOOR_NAMESPACE).await?;
    let (operator_seconds, built) = by_operator(admin, operator).await?;
    let floor_seconds = by_hand(admin, &built).await?;
    Ok(vec![TimedStep {
        name: format!("create (PostgreSQL {VERSION}) → accepting connections"),
        operator_seconds,
        floor_seconds,
    }])
}

/// What the operator made for the SampleDB.
fn selector() -> ListParams {
    ListParams::default().labels(&format!("app.kubernetes.io/instance={NAME}"))
}

/// Its database Pod.
fn server() -> ListParams {
    ListParams::default().labels(&format!(
        "app.kubernetes.io/instance={NAME},db.example.com/role=database"
    ))
}

async fn by_operator(admin: &Client, operator: &Operator) -> Result<(f64, Built)> {
    ensure_namespace(admin, OPERATOR_NAMESPACE).await?;
    let databases: Api<SampleDB> = Api::namespaced(admin.clone(), OPERATOR_NAMESPACE);
    let database: SampleDB = serde_json::from_value(json!({
        "apiVersion": "db.example.com/v1alpha1", "kind": "SampleDB",
        "metadata": { "name": NAME },
        "spec": {
            "version": VERSION, "storage": { "size": "1Gi" },
            // Deleted with its data when the pass ends, without a final dump.
            "deletion": { "policy": "Delete" }
        }
    }))?;
    let started = Instant::now();
    databases.create(&PostParams::default(), &database).await?;
    wait_for(STEP_TIMEOUT, || async {
        let database = databases.get(NAME).await.ok()?;
        let status = database.status?;
        (is_true(&status.conditions, READY)
            && status.observed_generation == database.metadata.generation)
            .then_some(())
    })
    .await
    .context("the operator's SampleDB did not become Ready")?;
    wait_for(STEP_TIMEOUT, || accepting(admin, OPERATOR_NAMESPACE))
        .await
        .context("the operator's SampleDB does not accept connections")?;
    let seconds = started.elapsed().as_secs_f64();
    let built = built(admin).await?;
    operator.until_idle(STEP_TIMEOUT).await?;
    delete_namespace(admin, OPERATOR_NAMESPACE).await?;
    Ok((seconds, built))
}

/// The operator's children of the SampleDB, copied for the floor.
async fn built(admin: &Client) -> Result<Built> {
    async fn each<K: copy::Namespaced>(admin: &Client, objects: &mut Vec<Value>) -> Result<()> {
        let listed = Api::<K>::namespaced(admin.clone(), OPERATOR_NAMESPACE)
            .list(&selector())
            .await?;
        for object in listed {
            let value = serde_json::to_value(&object)?;
            objects.push(copy::copied(&value, OPERATOR_NAMESPACE, FLOOR_NAMESPACE)?);
        }
        Ok(())
    }
    let mut objects = Vec::new();
    each::<Secret>(admin, &mut objects).await?;
    each::<ConfigMap>(admin, &mut objects).await?;
    each::<PersistentVolumeClaim>(admin, &mut objects).await?;
    each::<Service>(admin, &mut objects).await?;
    each::<StatefulSet>(admin, &mut objects).await?;
    let jobs: Api<Job> = Api::namespaced(admin.clone(), OPERATOR_NAMESPACE);
    let init = jobs
        .list(&selector())
        .await?
        .items
        .into_iter()
        .next()
        .context("the SampleDB's init Job")?;
    let init_pod = copy::copied(&copy::job_pod(&init), OPERATOR_NAMESPACE, FLOOR_NAMESPACE)?;
    Ok(Built { objects, init_pod })
}

/// By hand: the operator's objects created in the floor's namespace, then, once PostgreSQL
/// accepts connections, the init Job's Pod, until it succeeded.
async fn by_hand(admin: &Client, built: &Built) -> Result<f64> {
    ensure_namespace(admin, FLOOR_NAMESPACE).await?;
    let started = Instant::now();
    for object in &built.objects {
        copy::create(admin, FLOOR_NAMESPACE, object.clone()).await?;
    }
    wait_for(STEP_TIMEOUT, || accepting(admin, FLOOR_NAMESPACE))
        .await
        .context("the floor's PostgreSQL does not accept connections")?;
    let init = built.init_pod["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    copy::create(admin, FLOOR_NAMESPACE, built.init_pod.clone()).await?;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), FLOOR_NAMESPACE);
    copy::until_succeeded(&pods, &init, STEP_TIMEOUT).await?;
    let seconds = started.elapsed().as_secs_f64();
    delete_namespace(admin, FLOOR_NAMESPACE).await?;
    Ok(seconds)
}

/// The database Pod in `namespace` is Ready and answers a query with the credentials its Secret
/// holds, at the Pod's address.
async fn accepting(admin: &Client, namespace: &str) -> Option<()> {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), namespace);
    let server = pods
        .list(&server())
        .await
        .ok()?
        .items
        .into_iter()
        .find(testkit::running_and_ready)?;
    let address = server.status?.pod_ip?;
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), namespace);
    let data = secrets
        .get(&format!("{NAME}-credentials"))
        .await
        .ok()?
        .data?;
    let text = |key: &str| String::from_utf8(data.get(key)?.0.clone()).ok();
    let store = PostgresStore::new(&address, &text("username")?, &text("password")?, "app");
    (store.psql("select 1").await.ok()?.trim() == "1").then_some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_finds_the_database_by_its_instance_label() {
        assert_eq!(
            server().label_selector.as_deref(),
            Some("app.kubernetes.io/instance=bench-db,db.example.com/role=database")
        );
    }
}
