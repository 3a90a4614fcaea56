//! SampleDB on the local control plane: kube-controller-manager really runs the StatefulSet, Job,
//! garbage-collector and volume controllers (claims bind to host-path volumes); kwok plays the
//! kubelet, so Job Pods succeed, fail (chaos label) or hang (delay annotation) on demand. What the
//! Jobs' scripts do inside PostgreSQL is tested against a real server in `sampledb_scripts.rs`.

// Test code: a failed expectation is a failed test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::time::{Duration, Instant};

use app_operator::api::sampledb::{SampleDB, SampleDBStatus};
use app_operator::manager::ControllerKind;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    ConfigMap, PersistentVolume, PersistentVolumeClaim, Pod, Secret, Service,
};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, PropagationPolicy};
use serde_json::{Value, json};
use support::{TIMEOUT, condition, events};
use testkit::{TestNamespace, eventually, kubectl, kubectl_ok, object, settled, stays_for};

const FAIL_LABEL: &str = "pod-container-running-failed.stage.kwok.x-k8s.io";
const DELAY_ANNOTATION: &str = "pod-complete.stage.kwok.x-k8s.io/delay";

fn sampledb(name: &str, spec: Value) -> SampleDB {
    object(json!({
        "apiVersion": "db.example.com/v1alpha1",
        "kind": "SampleDB",
        "metadata": { "name": name },
        "spec": spec,
    }))
}

async fn create(ns: &TestNamespace, name: &str, spec: Value) {
    ns.api::<SampleDB>()
        .create(&PostParams::default(), &sampledb(name, spec))
        .await
        .unwrap();
}

async fn patch_spec(ns: &TestNamespace, name: &str, spec: Value) {
    ns.api::<SampleDB>()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": spec })),
        )
        .await
        .unwrap();
}

async fn status(ns: &TestNamespace, name: &str) -> SampleDBStatus {
    ns.api::<SampleDB>()
        .get(name)
        .await
        .unwrap()
        .status
        .unwrap_or_default()
}

/// Waits until the condition `type_` has `status` (and `reason`, if given); returns its message.
async fn wait_for_condition(
    ns: &TestNamespace,
    name: &str,
    type_: &str,
    wanted: &str,
    reason: Option<&str>,
) -> String {
    let api = ns.api::<SampleDB>();
    eventually(
        TIMEOUT,
        &format!("{name}: {type_}={wanted} {reason:?}"),
        || async {
            let status = api.get(name).await.ok()?.status?;
            let found = status.conditions.iter().find(|c| c.type_ == type_)?;
            (found.status == wanted && reason.is_none_or(|r| found.reason == r))
                .then(|| found.message.clone())
        },
    )
    .await
}

async fn jobs(ns: &TestNamespace, name: &str, role: &str) -> Vec<Job> {
    ns.api::<Job>()
        .list(&ListParams::default().labels(&format!(
            "db.example.com/sampledb={name},db.example.com/role={role}"
        )))
        .await
        .unwrap()
        .items
}

async fn database_pods(ns: &TestNamespace, name: &str) -> usize {
    ns.api::<Pod>()
        .list(&ListParams::default().labels(&format!(
            "db.example.com/sampledb={name},db.example.com/role=database"
        )))
        .await
        .unwrap()
        .items
        .len()
}

fn finished(job: &Job) -> Option<&str> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.status == "True" && (c.type_ == "Complete" || c.type_ == "Failed"))
        .map(|c| c.type_.as_str())
}

/// Requests that change something (POST, PUT, PATCH, DELETE) the operator has sent so far.
fn writes(operator: &support::Operator) -> u64 {
    let text = operator.metrics.encode().unwrap();
    app_operator::telemetry::metrics::requests_by_method(&text)
        .iter()
        .filter(|(method, _)| matches!(method.as_str(), "POST" | "PUT" | "PATCH" | "DELETE"))
        .map(|(_, count)| count)
        .sum()
}

/// Creates `name` and waits until it is Ready and Initialized.
async fn ready(ns: &TestNamespace, name: &str, spec: Value) {
    create(ns, name, spec).await;
    wait_for_condition(ns, name, "Ready", "True", None).await;
}

/// Create → finalizer first; credentials, connection, both claims Bound and unowned, Service,
/// StatefulSet; the init Job only once the database is Ready; then Ready, Initialized,
/// currentVersion, the kubectl columns, and no writes once converged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_database_gets_its_volumes_then_its_init_job_and_settles() {
    let ns = TestNamespace::new("sdb-create").await;
    let operator = support::start(&ns, &[ControllerKind::Sampledb]).await;
    create(&ns, "example-database", json!({ "version": "15.8" })).await;

    // The first child already finds the finalizer on its owner.
    let config_maps = ns.api::<ConfigMap>();
    eventually(TIMEOUT, "the connection ConfigMap", || async {
        config_maps
            .get_opt("example-database-connection")
            .await
            .unwrap()
    })
    .await;
    let db = ns.api::<SampleDB>().get("example-database").await.unwrap();
    assert_eq!(db.finalizers(), ["db.example.com/final-snapshot"]);

    // The init Job appears only once the StatefulSet has a Ready replica.
    let jobs_api = ns.api::<Job>();
    let sets = ns.api::<StatefulSet>();
    eventually(TIMEOUT, "the init Job", || async {
        jobs_api.get_opt("example-database-init").await.unwrap()
    })
    .await;
    let set = sets.get("example-database").await.unwrap();
    assert!(
        set.status.and_then(|s| s.ready_replicas).unwrap_or(0) >= 1,
        "init Job created before the database was Ready"
    );

    wait_for_condition(&ns, "example-database", "Ready", "True", None).await;
    let status = status(&ns, "example-database").await;
    assert_eq!(status.current_version.as_deref(), Some("15.8"));
    assert_eq!(
        condition(&status.conditions, "Initialized").map(|c| c.0),
        Some("True".to_owned())
    );
    assert_eq!(
        status.credentials_secret.as_deref(),
        Some("example-database-credentials")
    );
    let secret = ns
        .api::<Secret>()
        .get("example-database-credentials")
        .await
        .unwrap();
    assert!(secret.data.unwrap_or_default().contains_key("password"));
    ns.api::<Service>().get("example-database").await.unwrap();

    let claims = ns.api::<PersistentVolumeClaim>();
    for claim in ["example-database-data", "example-database-backups"] {
        let bound = eventually(TIMEOUT, &format!("{claim} Bound"), || async {
            let claim = claims.get(claim).await.ok()?;
            (claim.status.as_ref()?.phase.as_deref() == Some("Bound")).then_some(claim)
        })
        .await;
        assert!(
            bound.owner_references().is_empty(),
            "{claim} has an owner the garbage collector could delete it with"
        );
    }
    let set = sets.get("example-database").await.unwrap();
    let pod = set.spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.containers[0].image.as_deref(), Some("postgres:15.8"));

    for resource in ["SampleDB", "sdb"] {
        let table = kubectl_ok(&["get", resource, "-n", &ns.name, "-o", "wide"]);
        for column in ["VERSION", "READY", "STATUS", "PHASE", "LAST BACKUP", "AGE"] {
            assert!(table.contains(column), "no {column} in: {table}");
        }
        // The Ready condition's status, and the phase.
        assert!(
            table.contains("15.8") && table.contains("True") && table.contains("Ready"),
            "{table}"
        );
    }

    // Converged: a reconcile (an annotation triggers one) writes nothing.
    let before = settled(
        TIMEOUT,
        Duration::from_secs(2),
        "the operator's writes",
        || async { writes(&operator) },
    )
    .await;
    let reconciles = operator.metrics.reconciles("sampledb");
    ns.api::<SampleDB>()
        .patch(
            "example-database",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "annotations": { "poke": "1" } } })),
        )
        .await
        .unwrap();
    eventually(TIMEOUT, "a reconcile", || async {
        (operator.metrics.reconciles("sampledb") > reconciles).then_some(())
    })
    .await;
    stays_for(
        Duration::from_secs(1),
        "no write to a converged SampleDB",
        || async {
            let now = writes(&operator);
            (now == before)
                .then_some(())
                .ok_or(format!("{} writes", now - before))
        },
    )
    .await;
}

/// An init Job that fails → Degraded/InitJobFailed, a Warning, phase Failed, no backups; fixed
/// and its Job deleted → initialized.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_init_is_degraded_without_backups_and_recovers() {
    let ns = TestNamespace::new("sdb-init-fail").await;
    let _operator = support::start(&ns, &[ControllerKind::Sampledb]).await;
    create(
        &ns,
        "db",
        json!({
            "version": "15.8",
            "backup": { "schedule": "*/2 * * * * *" },
            "jobPodMetadata": { "labels": { FAIL_LABEL: "true" } },
        }),
    )
    .await;
    let message = wait_for_condition(&ns, "db", "Degraded", "True", Some("InitJobFailed")).await;
    assert!(message.contains("db-init"), "{message}");
    assert_eq!(
        status(&ns, "db").await.phase,
        app_operator::api::sampledb::SampleDBPhase::Failed
    );
    stays_for(
        Duration::from_secs(5),
        "no backup of an uninitialized database",
        || async {
            let backups = jobs(&ns, "db", "backup").await;
            backups.is_empty().then_some(()).ok_or(format!(
                "backups ran: {:?}",
                backups
                    .iter()
                    .map(ResourceExt::name_any)
                    .collect::<Vec<_>>()
            ))
        },
    )
    .await;
    let events = events(&ns).await;
    assert!(events.contains("Warning InitJobFailed"), "{events}");

    patch_spec(&ns, "db", json!({ "jobPodMetadata": { "labels": null } })).await;
    ns.api::<Job>()
        .delete(
            "db-init",
            &DeleteParams {
                propagation_policy: Some(PropagationPolicy::Background),
                ..DeleteParams::default()
            },
        )
        .await
        .unwrap();
    wait_for_condition(&ns, "db", "Initialized", "True", None).await;
    wait_for_condition(&ns, "db", "Degraded", "False", None).await;
    eventually(TIMEOUT, "a backup after recovery", || async {
        (!jobs(&ns, "db", "backup").await.is_empty()).then_some(())
    })
    .await;
}

/// A 6-field schedule every 5 s: backup Jobs with the credentials and the backups volume; status,
/// condition and metrics follow; history is trimmed; `suspend` stops new Jobs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backups_run_on_schedule_are_trimmed_and_suspend() {
    let ns = TestNamespace::new("sdb-backup").await;
    let operator = support::start(&ns, &[ControllerKind::Sampledb]).await;
    ready(
        &ns,
        "db",
        json!({
            "version": "15.8",
            "backup": { "schedule": "*/5 * * * * *", "successfulJobsHistoryLimit": 2 },
        }),
    )
    .await;
    let job = eventually(TIMEOUT, "a backup Job", || async {
        jobs(&ns, "db", "backup").await.into_iter().next()
    })
    .await;
    assert!(
        job.name_any().starts_with("db-backup-"),
        "{}",
        job.name_any()
    );
    let spec = job.spec.clone().unwrap();
    assert!(spec.active_deadline_seconds.is_some());
    let pod = spec.template.spec.unwrap();
    let container = &pod.containers[0];
    let env: Vec<&str> = container
        .env
        .iter()
        .flatten()
        .map(|e| e.name.as_str())
        .collect();
    for name in ["PGUSER", "PGPASSWORD", "BACKUP_DIR", "BACKUP_FILE"] {
        assert!(env.contains(&name), "no {name} in {env:?}");
    }
    assert_eq!(
        container.env_from.as_ref().unwrap()[0]
            .config_map_ref
            .as_ref()
            .unwrap()
            .name,
        "db-connection"
    );
    let claims: Vec<String> = pod
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| Some(v.persistent_volume_claim.as_ref()?.claim_name.clone()))
        .collect();
    assert_eq!(claims, ["db-backups"]);

    // Four backups succeed; only the two newest Jobs are kept.
    eventually(Duration::from_secs(90), "4 successful backups", || async {
        let text = operator.metrics.encode().unwrap();
        let line = text.lines().find(|l| {
            l.starts_with("app_operator_sampledb_backups_total{")
                && l.contains("result=\"succeeded\"")
        })?;
        (line.rsplit(' ').next()?.parse::<f64>().ok()? >= 4.0).then_some(())
    })
    .await;
    let status = status(&ns, "db").await;
    assert!(status.backup.last_successful_time.is_some());
    assert!(status.backup.next_schedule_time.is_some());
    assert_eq!(
        condition(&status.conditions, "LastBackupSucceeded").map(|c| c.0),
        Some("True".to_owned())
    );
    let text = operator.metrics.encode().unwrap();
    assert!(
        text.contains("app_operator_sampledb_last_successful_backup_timestamp_seconds{"),
        "{text}"
    );
    eventually(TIMEOUT, "history trimmed to 2", || async {
        let done = jobs(&ns, "db", "backup")
            .await
            .iter()
            .filter(|j| finished(j) == Some("Complete"))
            .count();
        (done <= 2).then_some(())
    })
    .await;

    patch_spec(&ns, "db", json!({ "backup": { "suspend": true } })).await;
    // Reconciles of one object run one at a time: once the status shows the suspend, any Job
    // made before it exists.
    eventually(TIMEOUT, "the suspend observed", || async {
        let db = ns.api::<SampleDB>().get("db").await.ok()?;
        let status = db.status?;
        (status.observed_generation == db.metadata.generation
            && status.backup.next_schedule_time.is_none())
        .then_some(())
    })
    .await;
    let names =
        |jobs: Vec<Job>| -> Vec<String> { jobs.iter().map(ResourceExt::name_any).collect() };
    let before = names(jobs(&ns, "db", "backup").await);
    stays_for(
        Duration::from_secs(11),
        "no new backup while suspended",
        || async {
            let after = names(jobs(&ns, "db", "backup").await);
            let new: Vec<&String> = after.iter().filter(|n| !before.contains(n)).collect();
            new.is_empty()
                .then_some(())
                .ok_or(format!("suspended, yet new backups: {new:?}"))
        },
    )
    .await;
}

/// A backup that hangs never overlaps the next one; it fails at its deadline, which is reported
/// (status, condition, Warning), and the next tick still runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_backup_times_out_without_overlap() {
    let ns = TestNamespace::new("sdb-backup-hung").await;
    let _operator = support::start(&ns, &[ControllerKind::Sampledb]).await;
    ready(&ns, "db", json!({ "version": "15.8" })).await;
    patch_spec(
        &ns,
        "db",
        json!({
            "backup": { "schedule": "*/2 * * * * *", "timeoutSeconds": 5 },
            "jobPodMetadata": { "annotations": { DELAY_ANNOTATION: "1h" } },
        }),
    )
    .await;
    let started = Instant::now();
    let mut most_running = 0;
    let mut failed = 0;
    while started.elapsed() < Duration::from_secs(16) {
        let all = jobs(&ns, "db", "backup").await;
        let running = all.iter().filter(|j| finished(j).is_none()).count();
        most_running = most_running.max(running);
        failed = all
            .iter()
            .filter(|j| finished(j) == Some("Failed"))
            .count()
            .max(failed);
        // Samples the Jobs through the whole 16 s; the asserts below need all of them.
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(most_running, 1, "backups overlapped (or none ran)");
    assert!(failed >= 1, "the hung backup did not fail at its deadline");
    wait_for_condition(
        &ns,
        "db",
        "LastBackupSucceeded",
        "False",
        Some("BackupFailed"),
    )
    .await;
    let status = status(&ns, "db").await;
    assert!(status.backup.last_failed_time.is_some() && status.backup.last_failed_job.is_some());
    let events = events(&ns).await;
    assert!(events.contains("Warning BackupFailed"), "{events}");
    let failed_job = jobs(&ns, "db", "backup")
        .await
        .into_iter()
        .find(|j| finished(j) == Some("Failed"))
        .unwrap();
    let reason = failed_job.status.unwrap().conditions.unwrap();
    assert!(
        reason
            .iter()
            .any(|c| c.reason.as_deref() == Some("DeadlineExceeded")),
        "{reason:?}"
    );
}

/// The operator down across three ticks → exactly one catch-up Job, the missed ticks counted
/// with an Event; a Job of that tick's name with our labels (made while it was down) is adopted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_operator_catches_up_once_and_adopts_the_ticks_job() {
    let ns = TestNamespace::new("sdb-catch-up").await;
    let operator = support::start(&ns, &[ControllerKind::Sampledb]).await;
    ready(
        &ns,
        "db",
        json!({ "version": "15.8", "backup": { "schedule": "*/5 * * * * *" } }),
    )
    .await;
    eventually(TIMEOUT, "a first backup", || async {
        status(&ns, "db").await.backup.last_schedule_time
    })
    .await;
    drop(operator);
    // What the stopped operator had in flight lands before the baseline.
    let (before, before_jobs) = settled(
        TIMEOUT,
        Duration::from_secs(1),
        "the status and Jobs of the stopped operator",
        || async {
            let jobs: Vec<String> = jobs(&ns, "db", "backup")
                .await
                .iter()
                .map(ResourceExt::name_any)
                .collect();
            (status(&ns, "db").await, jobs)
        },
    )
    .await;

    // Down for three ticks; come back 1 s after a tick, whose Job already exists. The sleeps are
    // the downtime itself: nothing is watched.
    tokio::time::sleep(Duration::from_secs(15)).await;
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let tick = (now / 5 + 1) * 5;
    let wait = u64::try_from((tick + 1 - now).max(0)).unwrap();
    // To 1 s after the next tick.
    tokio::time::sleep(Duration::from_secs(wait)).await;
    let tick = k8s_openapi::jiff::Timestamp::from_second(tick).unwrap();
    let job_name = format!("db-backup-{}", tick.strftime("%Y%m%d-%H%M%S"));
    let made_by_hand: Job = object(json!({
        "metadata": { "name": job_name, "labels": {
            "app.kubernetes.io/managed-by": "app-operator",
            "app.kubernetes.io/name": "sampledb",
            "app.kubernetes.io/instance": "db",
            "db.example.com/sampledb": "db",
            "db.example.com/role": "backup",
        }},
        "spec": { "backoffLimit": 0, "template": { "spec": {
            "restartPolicy": "Never",
            "containers": [{ "name": "backup", "image": "postgres:15.8" }],
        }}},
    }));
    ns.api::<Job>()
        .create(&PostParams::default(), &made_by_hand)
        .await
        .unwrap();
    let _operator = support::start(&ns, &[ControllerKind::Sampledb]).await;

    let adopted = eventually(Duration::from_secs(4), "the tick's Job adopted", || async {
        let job = ns.api::<Job>().get(&job_name).await.ok()?;
        (!job.owner_references().is_empty()).then_some(job)
    })
    .await;
    assert_eq!(adopted.owner_references()[0].kind, "SampleDB");
    // The status is written after the Job is adopted, in the same pass. On a loaded machine the
    // adopted Job may already have finished and the next tick's backup started when the test
    // looks: that tick's Job is the schedule going on, not a second catch-up.
    let after = eventually(TIMEOUT, "the catch-up recorded in the status", || async {
        let after = status(&ns, "db").await;
        (after.backup.last_schedule_time.as_ref().map(|t| t.0) >= Some(tick)).then_some(after)
    })
    .await;
    // Job names end in the tick's time (`%Y%m%d-%H%M%S`), so they sort by tick.
    let catch_ups: Vec<String> = jobs(&ns, "db", "backup")
        .await
        .iter()
        .map(ResourceExt::name_any)
        .filter(|n| !before_jobs.contains(n) && *n <= job_name)
        .collect();
    assert_eq!(
        catch_ups,
        std::slice::from_ref(&job_name),
        "one catch-up Job, the adopted one"
    );
    assert!(
        after.backup.skipped_schedules >= before.backup.skipped_schedules + 2,
        "skipped: {} → {}",
        before.backup.skipped_schedules,
        after.backup.skipped_schedules
    );
    let events = events(&ns).await;
    assert!(events.contains("Warning MissedSchedules"), "{events}");
    assert!(!events.contains("ChildConflict"), "{events}");
}

/// An upgrade stops the database before its Job starts and starts the new version after it;
/// a failed one runs the old version again, Degraded; going back to the recorded version
/// recovers; a downgrade is refused by the API server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_runs_with_the_database_stopped_and_a_failed_one_rolls_back() {
    let ns = TestNamespace::new("sdb-upgrade").await;
    let _operator = support::start(&ns, &[ControllerKind::Sampledb]).await;
    ready(&ns, "db", json!({ "version": "15.8" })).await;

    patch_spec(&ns, "db", json!({ "version": "16.4" })).await;
    let job_api = ns.api::<Job>();
    eventually(TIMEOUT, "the upgrade Job", || async {
        job_api.get_opt("db-upgrade-16-4").await.unwrap()
    })
    .await;
    assert_eq!(
        database_pods(&ns, "db").await,
        0,
        "upgrade Job started beside a running database"
    );
    let job = job_api.get("db-upgrade-16-4").await.unwrap();
    let pod = job.spec.unwrap().template.spec.unwrap();
    assert_eq!(
        pod.init_containers.unwrap()[0].image.as_deref(),
        Some("postgres:15.8")
    );
    assert_eq!(pod.containers[0].image.as_deref(), Some("postgres:16.4"));
    let sets = ns.api::<StatefulSet>();
    eventually(TIMEOUT, "the new version running", || async {
        let status = status(&ns, "db").await;
        let set = sets.get("db").await.ok()?;
        let spec = set.spec?;
        (status.current_version.as_deref() == Some("16.4")
            && spec.replicas == Some(1)
            && spec.template.spec?.containers[0].image.as_deref() == Some("postgres:16.4"))
        .then_some(())
    })
    .await;
    wait_for_condition(&ns, "db", "Ready", "True", None).await;

    // A failing upgrade: the database comes back on 16.4.
    patch_spec(
        &ns,
        "db",
        json!({ "version": "17.2", "jobPodMetadata": { "labels": { FAIL_LABEL: "true" } } }),
    )
    .await;
    let message = wait_for_condition(&ns, "db", "Degraded", "True", Some("UpgradeFailed")).await;
    assert!(message.contains("16.4"), "{message}");
    eventually(TIMEOUT, "the old version running again", || async {
        let set = sets.get("db").await.ok()?;
        let spec = set.spec?;
        (spec.replicas == Some(1)
            && spec.template.spec?.containers[0].image.as_deref() == Some("postgres:16.4"))
        .then_some(())
    })
    .await;
    assert_eq!(
        status(&ns, "db").await.current_version.as_deref(),
        Some("16.4")
    );

    // Back to the recorded version: allowed, and the failed Job goes.
    patch_spec(
        &ns,
        "db",
        json!({ "version": "16.4", "jobPodMetadata": { "labels": null } }),
    )
    .await;
    wait_for_condition(&ns, "db", "Degraded", "False", None).await;
    eventually(TIMEOUT, "the failed upgrade Job deleted", || async {
        job_api
            .get_opt("db-upgrade-17-2")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;

    let refused = ns
        .api::<SampleDB>()
        .patch(
            "db",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "version": "15.8" } })),
        )
        .await;
    let status = support::rejection(refused);
    assert!(
        status.message.contains("spec.version cannot go down"),
        "{}",
        status.message
    );
}

/// Deletion under each propagation policy: the snapshot Job (no owner) starts once the database
/// Pods are gone; then the StatefulSet, the data claim and its volume go, the backups claim
/// stays, and so does nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_snapshots_the_stopped_database_then_removes_its_data() {
    let ns = TestNamespace::new("sdb-delete").await;
    let _operator = support::start(&ns, &[ControllerKind::Sampledb]).await;
    let policies = [
        ("bg", PropagationPolicy::Background),
        ("fg", PropagationPolicy::Foreground),
        ("orphan", PropagationPolicy::Orphan),
    ];
    for (name, _) in &policies {
        create(&ns, name, json!({ "version": "15.8" })).await;
    }
    for (name, _) in &policies {
        wait_for_condition(&ns, name, "Ready", "True", None).await;
    }
    let claims = ns.api::<PersistentVolumeClaim>();
    let mut volumes = Vec::new();
    for (name, _) in &policies {
        let claim = eventually(TIMEOUT, "the data claim bound", || async {
            let claim = claims.get(&format!("{name}-data")).await.ok()?;
            claim.spec.as_ref()?.volume_name.clone()
        })
        .await;
        volumes.push(claim);
    }
    let dbs = ns.api::<SampleDB>();
    for (name, policy) in &policies {
        let uid = dbs.get(name).await.unwrap().uid().unwrap();
        dbs.delete(
            name,
            &DeleteParams {
                propagation_policy: Some(policy.clone()),
                ..DeleteParams::default()
            },
        )
        .await
        .unwrap();
        let snapshot = format!("{name}-final-snapshot-{}", &uid[..8]);
        let job_api = ns.api::<Job>();
        let job = eventually(TIMEOUT, &snapshot, || async {
            job_api.get_opt(&snapshot).await.unwrap()
        })
        .await;
        assert_eq!(
            database_pods(&ns, name).await,
            0,
            "{name}: snapshot beside a running database"
        );
        assert!(
            job.owner_references().is_empty(),
            "{name}: the snapshot Job has an owner"
        );
        let mounted: Vec<String> = job
            .spec
            .unwrap()
            .template
            .spec
            .unwrap()
            .volumes
            .iter()
            .flatten()
            .filter_map(|v| Some(v.persistent_volume_claim.as_ref()?.claim_name.clone()))
            .collect();
        assert!(
            mounted.contains(&format!("{name}-data"))
                && mounted.contains(&format!("{name}-backups")),
            "{mounted:?}"
        );
    }
    let sets = ns.api::<StatefulSet>();
    let volumes_api: Api<PersistentVolume> = Api::all(testkit::client().await);
    for ((name, _), volume) in policies.iter().zip(&volumes) {
        eventually(TIMEOUT, &format!("{name} gone with its data"), || async {
            let gone = dbs.get_opt(name).await.unwrap().is_none()
                && sets.get_opt(name).await.unwrap().is_none()
                && claims
                    .get_opt(&format!("{name}-data"))
                    .await
                    .unwrap()
                    .is_none()
                && volumes_api.get_opt(volume).await.unwrap().is_none();
            gone.then_some(())
        })
        .await;
        assert!(
            claims
                .get_opt(&format!("{name}-backups"))
                .await
                .unwrap()
                .is_some(),
            "{name}: the backups claim went too"
        );
    }
}

/// A snapshot that fails, or times out, keeps the SampleDB with Degraded and a message naming
/// the patch that unblocks it; that patch lets it go within 30 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_or_hung_snapshot_blocks_deletion_until_the_policy_says_delete() {
    let ns = TestNamespace::new("sdb-snapshot-fail").await;
    let _operator = support::start(&ns, &[ControllerKind::Sampledb]).await;
    let cases = [
        (
            "failing",
            json!({ "labels": { FAIL_LABEL: "true" } }),
            "SnapshotFailed",
        ),
        (
            "hung",
            json!({ "annotations": { DELAY_ANNOTATION: "1h" } }),
            "SnapshotTimedOut",
        ),
    ];
    for (name, _, _) in &cases {
        ready(
            &ns,
            name,
            json!({ "version": "15.8", "deletion": { "snapshotTimeoutSeconds": 4 } }),
        )
        .await;
    }
    let dbs = ns.api::<SampleDB>();
    for (name, metadata, _) in &cases {
        patch_spec(&ns, name, json!({ "jobPodMetadata": metadata })).await;
        dbs.delete(name, &DeleteParams::default()).await.unwrap();
    }
    for (name, _, reason) in &cases {
        let message = wait_for_condition(&ns, name, "Degraded", "True", Some(reason)).await;
        assert!(
            message.contains(&format!("kubectl patch sampledb {name} -n {}", ns.name))
                && message.contains(r#"{"spec":{"deletion":{"policy":"Delete"}}}"#),
            "{message}"
        );
        stays_for(
            Duration::from_secs(2),
            &format!("{name} kept while its snapshot did not succeed"),
            || async {
                dbs.get_opt(name)
                    .await
                    .unwrap()
                    .map(|_| ())
                    .ok_or(format!("{name} went without a snapshot"))
            },
        )
        .await;
        let events = events(&ns).await;
        assert!(events.contains(&format!("Warning {reason}")), "{events}");
    }
    for (name, _, _) in &cases {
        let command = r#"{"spec":{"deletion":{"policy":"Delete"}}}"#;
        kubectl_ok(&[
            "patch", "sampledb", name, "-n", &ns.name, "--type", "merge", "-p", command,
        ]);
        let patched = Instant::now();
        eventually(Duration::from_secs(30), &format!("{name} gone"), || async {
            dbs.get_opt(name).await.unwrap().is_none().then_some(())
        })
        .await;
        assert!(patched.elapsed() <= Duration::from_secs(30));
    }
}

/// Deleting the namespace of a SampleDB is not held by its finalizer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_its_namespace_is_not_held_by_the_snapshot_finalizer() {
    let ns = TestNamespace::new("sdb-namespace").await;
    let operator = support::start(&ns, &[ControllerKind::Sampledb]).await;
    ready(&ns, "db", json!({ "version": "15.8" })).await;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(testkit::client().await);
    namespaces
        .delete(&ns.name, &DeleteParams::default())
        .await
        .unwrap();
    // The API server may still admit the snapshot Job for a moment after the namespace turned
    // Terminating (its admission reads a cache); then the snapshot runs instead of being skipped.
    let mut snapshot_admitted = false;
    let deadline = Instant::now() + Duration::from_secs(60);
    while namespaces.get_opt(&ns.name).await.unwrap().is_some() {
        assert!(
            Instant::now() < deadline,
            "the namespace is still there after 60 s"
        );
        snapshot_admitted |= !jobs(&ns, "db", "final-snapshot").await.is_empty();
        // Between looks at the namespace and the snapshot Job, under the deadline above.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let text = operator.metrics.encode().unwrap();
    let skipped = text.contains(
        r#"app_operator_cleanups_skipped_total{controller="sampledb",reason="NamespaceTerminating"} 1"#,
    );
    assert!(
        skipped != snapshot_admitted,
        "the snapshot must be either skipped (and counted) or taken: skipped={skipped}, admitted={snapshot_admitted}\n{text}"
    );
}

/// Restore at creation: the restore Job runs (with the backup file) instead of the init Job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_restored_at_creation_runs_the_restore_job_instead_of_init() {
    let ns = TestNamespace::new("sdb-restore").await;
    let _operator = support::start(&ns, &[ControllerKind::Sampledb]).await;
    ready(
        &ns,
        "db",
        json!({ "version": "15.8", "restore": { "backupFile": "db-backup-20261123-030000.dump" } }),
    )
    .await;
    let job = ns.api::<Job>().get("db-restore").await.unwrap();
    let container = &job.spec.unwrap().template.spec.unwrap().containers[0];
    let file = container
        .env
        .iter()
        .flatten()
        .find(|e| e.name == "BACKUP_FILE")
        .and_then(|e| e.value.clone());
    assert_eq!(file.as_deref(), Some("db-backup-20261123-030000.dump"));
    assert!(ns.api::<Job>().get_opt("db-init").await.unwrap().is_none());
    assert_eq!(
        status(&ns, "db").await.current_version.as_deref(),
        Some("15.8")
    );
}

/// Asks `db` for a backup now, as `kubectl app-operator backup` does.
async fn request_backup(ns: &TestNamespace, at: &str) {
    ns.api::<SampleDB>()
        .patch(
            "db",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "annotations": {
                app_operator::api::BACKUP_REQUESTED_AT: at } } })),
        )
        .await
        .unwrap();
}

async fn backup_request_handled(ns: &TestNamespace, at: &str) {
    eventually(TIMEOUT, &format!("backup request {at} handled"), || async {
        let status = status(ns, "db").await;
        (status.backup.last_handled_request.as_deref() == Some(at)).then_some(())
    })
    .await;
}

/// On demand and cloned: a new `backup-requested-at` value starts one backup Job annotated with
/// it (the same value again, none); a clone whose source has no backups volume yet is Degraded
/// (RestoreSourceNotFound) and restores from the source's volume once it exists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_on_demand_backup_runs_once_per_request_and_a_clone_restores_from_its_source() {
    let ns = TestNamespace::new("sdb-on-demand").await;
    let _operator = support::start(&ns, &[ControllerKind::Sampledb]).await;
    create(
        &ns,
        "copy",
        json!({ "version": "15.8",
                "restore": { "backupFile": "db-backup-20261128-061500.dump", "source": "db" } }),
    )
    .await;
    let message = wait_for_condition(
        &ns,
        "copy",
        "Degraded",
        "True",
        Some("RestoreSourceNotFound"),
    )
    .await;
    assert!(
        message.contains("SampleDB db has no backups volume (PersistentVolumeClaim db-backups)"),
        "{message}"
    );
    assert!(jobs(&ns, "copy", "restore").await.is_empty());

    ready(&ns, "db", json!({ "version": "15.8" })).await;
    request_backup(&ns, "2026-11-28T06:00:00Z").await;
    backup_request_handled(&ns, "2026-11-28T06:00:00Z").await;
    let annotated = |jobs: Vec<Job>, at: &str| {
        jobs.iter()
            .filter(|job| {
                job.annotations()
                    .get(app_operator::api::BACKUP_REQUESTED_AT)
                    .map(String::as_str)
                    == Some(at)
            })
            .count()
    };
    assert_eq!(
        annotated(jobs(&ns, "db", "backup").await, "2026-11-28T06:00:00Z"),
        1
    );
    wait_for_condition(&ns, "copy", "Ready", "True", None).await;
    let restore = jobs(&ns, "copy", "restore").await;
    let volumes = restore[0]
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .volumes
        .clone();
    assert!(
        volumes.iter().flatten().any(|v| v
            .persistent_volume_claim
            .as_ref()
            .is_some_and(|c| c.claim_name == "db-backups")),
        "the clone's restore Job reads db's backups: {volumes:?}"
    );

    // The same value again starts nothing, also once its backup has finished; a new one starts
    // one more.
    let all_backups = || async { jobs(&ns, "db", "backup").await.len() };
    eventually(TIMEOUT, "the requested backup finished", || async {
        let backups = jobs(&ns, "db", "backup").await;
        backups
            .iter()
            .all(|job| finished(job).is_some())
            .then_some(())
    })
    .await;
    ns.api::<SampleDB>()
        .patch(
            "db",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "labels": { "touched": "yes" } } })),
        )
        .await
        .unwrap();
    stays_for(
        Duration::from_secs(3),
        "no second backup for a handled request",
        || async {
            match all_backups().await {
                1 => Ok(()),
                n => Err(format!("{n} backup Jobs")),
            }
        },
    )
    .await;
    request_backup(&ns, "2026-11-28T06:05:00Z").await;
    backup_request_handled(&ns, "2026-11-28T06:05:00Z").await;
    assert_eq!(
        annotated(jobs(&ns, "db", "backup").await, "2026-11-28T06:05:00Z"),
        1
    );
    assert_eq!(all_backups().await, 2);
}

/// A Secret of the generated credentials' name that someone else made is neither used nor
/// changed: the SampleDB is Degraded (ChildConflict) and starts no server, until the Secret is
/// gone; then its own credentials are made and it becomes Ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_secret_of_the_credentials_name_is_not_used() {
    let ns = TestNamespace::new("sdb-foreign-secret").await;
    let _operator = support::start(&ns, &[ControllerKind::Sampledb]).await;
    let secrets = ns.api::<Secret>();
    let foreign: Secret = serde_json::from_value(json!({
        "metadata": { "name": "db-credentials" },
        "stringData": { "username": "postgres", "password": "chosen-by-someone-else" }
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap();
    create(&ns, "db", json!({ "version": "15.8" })).await;
    let message = wait_for_condition(&ns, "db", "Degraded", "True", Some("ChildConflict")).await;
    assert!(message.contains("db-credentials"), "{message}");
    assert!(
        ns.api::<StatefulSet>()
            .get_opt("db")
            .await
            .unwrap()
            .is_none(),
        "a server was started with someone else's password"
    );
    let kept = secrets.get("db-credentials").await.unwrap();
    assert!(kept.owner_references().is_empty(), "{:?}", kept.metadata);
    assert_eq!(
        kept.data.unwrap()["password"].0,
        b"chosen-by-someone-else",
        "the foreign Secret was changed"
    );

    secrets
        .delete("db-credentials", &DeleteParams::default())
        .await
        .unwrap();
    wait_for_condition(&ns, "db", "Ready", "True", None).await;
    let made = secrets.get("db-credentials").await.unwrap();
    assert_eq!(made.owner_references()[0].name, "db");
}

/// Bad input: refused by `kubectl apply` with the schema's message; what the schema cannot say
/// (a cron expression) is Degraded while the operator keeps serving other SampleDBs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_at_apply_or_degraded_without_stopping_others() {
    let ns = TestNamespace::new("sdb-bad-input").await;
    let _operator = support::start(&ns, &[ControllerKind::Sampledb]).await;
    let apply = |name: &str, spec: &str| {
        let manifest = format!(
            "apiVersion: db.example.com/v1alpha1\nkind: SampleDB\nmetadata:\n  name: {name}\n  namespace: {}\nspec:\n{spec}",
            ns.name
        );
        let path = std::env::temp_dir().join(format!("{}-{name}.yaml", ns.name));
        std::fs::write(&path, manifest).unwrap();
        let output = kubectl(&["apply", "-f", path.to_str().unwrap()]);
        (
            output.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
        )
    };
    for (spec, expected) in [
        ("  version: latest\n", "spec.version"),
        (
            "  version: \"15.8\"\n  backup:\n    timeoutSeconds: 0\n",
            "spec.backup.timeoutSeconds",
        ),
        (
            "  version: \"15.8\"\n  jobTimeoutSeconds: 0\n",
            "spec.jobTimeoutSeconds",
        ),
        (
            "  version: \"15.8\"\n  deletion:\n    policy: Shred\n",
            "spec.deletion.policy",
        ),
        (
            "  version: \"15.8\"\n  storage:\n    size: lots\n",
            "spec.storage.size",
        ),
    ] {
        let (ok, out) = apply("refused", spec);
        assert!(!ok && out.contains(expected), "{spec}: {out}");
    }
    let (ok, out) = apply("grows", "  version: \"15.8\"\n  storage:\n    size: 2Gi\n");
    assert!(ok, "{out}");
    let (ok, out) = apply("grows", "  version: \"15.8\"\n  storage:\n    size: 1Gi\n");
    assert!(!ok && out.contains("storage.size cannot shrink"), "{out}");
    let (ok, out) = apply(
        "grows",
        "  version: \"15.8\"\n  storage:\n    size: 2Gi\n  restore:\n    backupFile: x.dump\n",
    );
    assert!(
        !ok && out.contains("spec.restore is set at creation"),
        "{out}"
    );

    let (ok, out) = apply(
        "bad-cron",
        "  version: \"15.8\"\n  backup:\n    schedule: \"every day at noon\"\n",
    );
    assert!(ok, "{out}");
    let message =
        wait_for_condition(&ns, "bad-cron", "Degraded", "True", Some("InvalidSchedule")).await;
    assert!(message.contains("spec.backup.schedule"), "{message}");
    wait_for_condition(&ns, "grows", "Ready", "True", None).await;
    wait_for_condition(&ns, "bad-cron", "Ready", "True", None).await;
    let events = events(&ns).await;
    assert!(events.contains("Warning InvalidSchedule"), "{events}");
}

/// The schema refuses, at `kubectl apply`, a restore from two sources at once and WAL archiving
/// with no bucket to archive to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_point_in_time_restore_and_wal_archiving_are_checked_at_apply() {
    let ns = TestNamespace::new("sdb-pitr-schema").await;
    let s3 = json!({ "path": "backups/db", "awsSecret": "keys" });
    for (spec, says) in [
        (
            json!({ "version": "15", "restore": {
                "backupFile": "db-backup-20261128-061500.dump",
                "pointInTime": { "s3": s3, "targetTime": "2026-11-28T10:42:00Z" } } }),
            "spec.restore: set exactly one of backupFile, s3 and pointInTime",
        ),
        (
            json!({ "version": "15", "backup": { "archiveWal": true } }),
            "backup.archiveWal archives to backup.s3: set s3 too",
        ),
    ] {
        let refused = ns
            .api::<SampleDB>()
            .create(&PostParams::default(), &sampledb("db", spec.clone()))
            .await;
        let status = support::rejection(refused);
        assert!(status.message.contains(says), "{spec}: {}", status.message);
    }
    ns.api::<SampleDB>()
        .create(
            &PostParams::default(),
            &sampledb(
                "db",
                json!({ "version": "15", "restore": {
                    "pointInTime": { "s3": s3, "targetTime": "2026-11-28T10:42:00Z" } } }),
            ),
        )
        .await
        .expect("a point-in-time restore alone is accepted");
}
