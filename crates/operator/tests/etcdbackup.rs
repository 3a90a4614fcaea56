//! EtcdBackup and restores against real etcd: the member runner runs the members' `etcd` and the
//! backup Jobs' and restoring members' `etcdctl`/`etcdutl` (the pinned release's own binaries),
//! with the claims on the local cluster's host-path volumes. So a snapshot here is a real file
//! that etcd's own tools read, and a restored cluster serves the keys written before.

// Test code: a failed expectation is a failed test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::path::PathBuf;
use std::time::Duration;

use app_operator::api::{EtcdBackup, EtcdBackupStatus, EtcdCluster};
use app_operator::etcd::address::Addressing;
use app_operator::manager::ControllerKind;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{ListParams, PostParams};
use support::etcd::{SLOW, Setup, Target, base64, converged, endpoints, get, patch_spec, put};
use support::{condition, events, rejection};
use testkit::member_runner::MemberRunner;
use testkit::{TestNamespace, eventually, object, stays_for};

const CLUSTER: &str = "origin";
const CONTROLLERS: &[ControllerKind] = &[ControllerKind::Etcdcluster, ControllerKind::Etcdbackup];

async fn setup(prefix: &str) -> Setup {
    support::etcd::setup(prefix, CONTROLLERS).await
}

async fn create_cluster(ns: &TestNamespace, name: &str, spec: serde_json::Value) {
    let cluster: EtcdCluster = object(serde_json::json!({
        "apiVersion": "etcd.database.coreos.com/v1beta2",
        "kind": "EtcdCluster",
        "metadata": { "name": name },
        "spec": spec,
    }));
    ns.api::<EtcdCluster>()
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
}

/// A cluster of `size` members, grown one at a time from the first.
async fn cluster_of(ns: &TestNamespace, size: i32) {
    create_cluster(ns, CLUSTER, serde_json::json!({ "size": 1 })).await;
    converged(ns, CLUSTER, 1).await;
    if size > 1 {
        patch_spec(ns, CLUSTER, serde_json::json!({ "size": size })).await;
        converged(ns, CLUSTER, usize::try_from(size).unwrap()).await;
    }
}

fn backup_object(name: &str, spec: serde_json::Value) -> EtcdBackup {
    object(serde_json::json!({
        "apiVersion": "etcd.database.coreos.com/v1beta2",
        "kind": "EtcdBackup",
        "metadata": { "name": name },
        "spec": spec,
    }))
}

async fn create_backup(ns: &TestNamespace, name: &str, spec: serde_json::Value) {
    ns.api::<EtcdBackup>()
        .create(&PostParams::default(), &backup_object(name, spec))
        .await
        .unwrap();
}

async fn backup_status(ns: &TestNamespace, name: &str) -> EtcdBackupStatus {
    ns.api::<EtcdBackup>()
        .get(name)
        .await
        .unwrap()
        .status
        .unwrap_or_default()
}

/// The host directory of a bound claim (the local cluster's host-path provisioner).
async fn claim_dir(ns: &TestNamespace, claim: &str) -> PathBuf {
    let claim = ns.api::<PersistentVolumeClaim>().get(claim).await.unwrap();
    let volume = claim.spec.unwrap().volume_name.unwrap();
    let volume = kube::Api::<PersistentVolume>::all(ns.client.clone())
        .get(&volume)
        .await
        .unwrap();
    PathBuf::from(volume.spec.unwrap().host_path.unwrap().path)
}

/// `etcdutl snapshot status -w json` of a file, as etcd's own tool reads it.
fn snapshot_status(file: &std::path::Path) -> serde_json::Value {
    let output = std::process::Command::new(testkit::tools().bin("etcdutl"))
        .args(["snapshot", "status", "-w", "json"])
        .arg(file)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "etcdutl snapshot status {}: {}",
        file.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// The revision a member reports now.
async fn revision(endpoint: &str) -> i64 {
    let address = endpoint.trim_start_matches("http://").parse().unwrap();
    let (_, body) = testkit::etcd::http_request(address, "POST", "/v3/maintenance/status", "{}")
        .await
        .unwrap();
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    status["header"]["revision"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

async fn jobs(ns: &TestNamespace, backup: &str) -> Vec<Job> {
    ns.api::<Job>()
        .list(&ListParams::default().labels(&format!("etcd.database.coreos.com/backup={backup}")))
        .await
        .unwrap()
        .items
}

/// How many times the backup Jobs' step `step` (`snapshot`, `verify`) ran and succeeded, from
/// the runner's record.
fn ran(runner: &MemberRunner, step: &str) -> usize {
    runner
        .runs()
        .iter()
        .filter(|run| run.container == step && run.exit_code == 0)
        .count()
}

/// Write keys into 3 members → a backup succeeds with the revision and version it holds; the
/// snapshot is a file etcd's tools read. Restored into a new cluster: the keys are there, and
/// its members are its own (no member of the old cluster in its list).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_of_three_members_restores_into_a_new_cluster_of_its_own() {
    let s = setup("etcd-backup-restore").await;
    cluster_of(&s.ns, 3).await;
    let target = Target::from(&s.ns);
    let old_endpoints = endpoints(&target, CLUSTER).await;
    for key in ["alpha", "beta", "gamma"] {
        assert!(put(&old_endpoints, key, &format!("{key}-value")).await);
    }
    let written_revision = revision(&old_endpoints[0]).await;

    create_backup(
        &s.ns,
        "once",
        serde_json::json!({ "etcdCluster": { "name": CLUSTER } }),
    )
    .await;
    let status = eventually(SLOW, "the backup succeeded", || async {
        let status = backup_status(&s.ns, "once").await;
        status.succeeded.then_some(status)
    })
    .await;
    assert_eq!(status.etcd_revision, Some(written_revision));
    assert_eq!(status.etcd_version.as_deref(), Some("3.6.16"));
    assert_eq!(
        condition(&status.conditions, "Ready"),
        Some(("True".into(), "BackupSucceeded".into()))
    );
    let snapshot = &status.snapshots[0];
    let file = claim_dir(&s.ns, status.claim_name.as_deref().unwrap())
        .await
        .join(&snapshot.file);
    let read = snapshot_status(&file);
    assert_eq!(read["revision"].as_i64(), Some(written_revision));
    assert_eq!(ran(&s.runner, "snapshot"), 1, "{:?}", s.runner.runs());
    assert_eq!(ran(&s.runner, "verify"), 1);

    create_cluster(
        &s.ns,
        "restored",
        serde_json::json!({ "size": 3, "restore": { "backupName": "once" } }),
    )
    .await;
    let restored_members = converged(&s.ns, "restored", 3).await;
    let new_endpoints = endpoints(&target, "restored").await;
    for key in ["alpha", "beta", "gamma"] {
        assert_eq!(
            get(&new_endpoints, key).await,
            Some(base64(&format!("{key}-value"))),
            "{key} in the restored cluster"
        );
    }
    let old_members = support::etcd::members(&target, CLUSTER).await.unwrap();
    for member in &restored_members {
        assert!(
            !old_members
                .iter()
                .any(|old| old.id == member.id || old.peer_urls == member.peer_urls),
            "restored member {member:?} is one of the old cluster's {old_members:?}"
        );
        assert!(
            member.peer_urls.iter().all(|url| Addressing::Loopback
                .pod_of_peer_url("restored", &s.ns.name, url)
                .is_some()),
            "{member:?} is not one of the restored cluster's Pods"
        );
    }
    let restored = s.ns.api::<EtcdCluster>().get("restored").await.unwrap();
    let restore = restored.status.unwrap().restore.unwrap();
    assert_eq!(
        (restore.snapshot.as_str(), restore.etcd_revision),
        (snapshot.file.as_str(), Some(written_revision))
    );
    let events = events(&s.ns).await;
    assert!(events.contains("Normal RestoringFromBackup"), "{events}");
    assert!(events.contains("Normal BackupSucceeded"), "{events}");
}

/// Every few seconds, at most 2 kept: the snapshots rotate. A backup that hangs fails at its
/// deadline and the next one still runs. With the operator stopped across several periods,
/// exactly one backup catches up for the ticks it missed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn periodic_backups_rotate_end_at_their_deadline_and_catch_up_once() {
    let Setup {
        ns,
        runner,
        operator,
    } = setup("etcd-backup-periodic").await;
    cluster_of(&ns, 1).await;
    create_backup(
        &ns,
        "periodic",
        serde_json::json!({
            "etcdCluster": { "name": CLUSTER },
            "backupPolicy": { "backupIntervalInSecond": 4, "maxBackups": 2, "timeoutInSecond": 3 },
        }),
    )
    .await;

    // Rotation: three successes, two snapshots kept, two files in the claim.
    eventually(SLOW, "three successful backups", || async {
        (ran(&runner, "verify") >= 3).then_some(())
    })
    .await;
    let status = eventually(SLOW, "the third success recorded", || async {
        let status = backup_status(&ns, "periodic").await;
        (status.snapshots.len() == 2 && status.succeeded).then_some(status)
    })
    .await;
    let dir = claim_dir(&ns, status.claim_name.as_deref().unwrap()).await;
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".db"))
        .collect();
    files.sort();
    assert_eq!(files, ["periodic-0.db", "periodic-1.db"]);

    // A hang: the Job fails at its deadline, then the next one runs.
    runner.hold(true);
    let failed = eventually(SLOW, "a backup failed at its deadline", || async {
        let status = backup_status(&ns, "periodic").await;
        (!status.succeeded
            && status
                .reason
                .as_deref()
                .is_some_and(|r| r.contains("DeadlineExceeded")))
        .then_some(status)
    })
    .await;
    assert_eq!(
        condition(&failed.conditions, "Degraded"),
        Some(("True".into(), "BackupFailed".into()))
    );
    runner.hold(false);
    eventually(SLOW, "the next backup succeeded", || async {
        let status = backup_status(&ns, "periodic").await;
        (status.succeeded && status.last_success_date > failed.last_failure_date).then_some(())
    })
    .await;

    // Down across several periods: exactly one Job for the ticks missed.
    drop(operator);
    let skipped_before = backup_status(&ns, "periodic").await.skipped_schedules;
    let stopped_at = Timestamp::now();
    // The downtime itself (three periods and more): nothing is watched.
    tokio::time::sleep(Duration::from_secs(13)).await;
    let restarted_at = Timestamp::now();
    let _operator = support::start(&ns, CONTROLLERS).await;
    eventually(SLOW, "a Job for a tick after the restart", || async {
        jobs(&ns, "periodic")
            .await
            .iter()
            .any(|job| tick(job) >= restarted_at)
            .then_some(())
    })
    .await;
    let catch_ups: Vec<String> = jobs(&ns, "periodic")
        .await
        .iter()
        .filter(|job| tick(job) > stopped_at && tick(job) < restarted_at)
        .map(ResourceExt::name_any)
        .collect();
    assert_eq!(catch_ups.len(), 1, "catch-up Jobs: {catch_ups:?}");
    let after = backup_status(&ns, "periodic").await;
    let skipped = after.skipped_schedules - skipped_before;
    let ticks: Vec<String> = jobs(&ns, "periodic")
        .await
        .iter()
        .map(|job| tick(job).to_string())
        .collect();
    assert!(
        skipped >= 2,
        "{skipped} ticks counted as skipped; stopped {stopped_at}, restarted {restarted_at}, Job ticks {ticks:?}, {after:?}"
    );
}

fn tick(job: &Job) -> Timestamp {
    job.annotations()["etcd.database.coreos.com/scheduled-at"]
        .parse()
        .unwrap()
}

/// 2 of 3 members gone: no snapshot is taken from a member without a quorum. The status says so,
/// and the operator backs off instead of retrying in a loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_of_a_cluster_without_quorum_fails_clearly_and_backs_off() {
    let s = setup("etcd-backup-quorum").await;
    cluster_of(&s.ns, 3).await;
    let running = s.runner.running();
    for pod in running.iter().take(2) {
        assert!(s.runner.kill(pod.rsplit('/').next().unwrap()));
    }
    eventually(SLOW, "the cluster reported its lost quorum", || async {
        let status = s.ns.api::<EtcdCluster>().get(CLUSTER).await.ok()?.status?;
        (condition(&status.conditions, "Available") == Some(("False".into(), "QuorumLost".into())))
            .then_some(())
    })
    .await;
    create_backup(
        &s.ns,
        "lost",
        serde_json::json!({ "etcdCluster": { "name": CLUSTER } }),
    )
    .await;
    let status = eventually(SLOW, "the backup reported the lost quorum", || async {
        let status = backup_status(&s.ns, "lost").await;
        (condition(&status.conditions, "Degraded") == Some(("True".into(), "NoQuorum".into())))
            .then_some(status)
    })
    .await;
    assert!(!status.succeeded);
    let reason = status.reason.unwrap();
    assert!(reason.contains("no quorum"), "{reason}");
    stays_for(
        Duration::from_secs(20),
        "no backup Job without a quorum",
        || async {
            let jobs: Vec<String> = jobs(&s.ns, "lost")
                .await
                .iter()
                .map(ResourceExt::name_any)
                .collect();
            jobs.is_empty()
                .then_some(())
                .ok_or(format!("backup Jobs: {jobs:?}"))
        },
    )
    .await;
    let metrics = s.operator.metrics.encode().unwrap();
    let attempts: u64 = metrics
        .lines()
        .find(|line| {
            line.starts_with("app_operator_reconcile_errors_by_reason_total")
                && line.contains(r#"controller="etcdbackup""#)
        })
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0);
    // Backoff from 0.5 s doubling: about 7 attempts in 25 s, not one per reconcile loop.
    assert!(
        (1..=10).contains(&attempts),
        "{attempts} attempts in ~25 s:\n{metrics}"
    );
}

/// Bad input: refused at apply where the schema can say it, else a Degraded reason naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_at_apply_or_degraded_with_a_clear_reason() {
    let s = setup("etcd-backup-input").await;
    let backups = s.ns.api::<EtcdBackup>();
    let negative = backup_object(
        "negative",
        serde_json::json!({
            "etcdCluster": { "name": CLUSTER },
            "backupPolicy": { "backupIntervalInSecond": -5 },
        }),
    );
    let refused = rejection(backups.create(&PostParams::default(), &negative).await);
    assert!(
        refused.message.contains("backupIntervalInSecond"),
        "{}",
        refused.message
    );
    let both = backup_object(
        "both",
        serde_json::json!({
            "etcdCluster": { "name": CLUSTER },
            "backupPolicy": { "backupIntervalInSecond": 60, "schedule": "0 3 * * *" },
        }),
    );
    let refused = rejection(backups.create(&PostParams::default(), &both).await);
    assert!(refused.message.contains("not both"), "{}", refused.message);

    create_backup(
        &s.ns,
        "nowhere",
        serde_json::json!({ "etcdCluster": { "name": "no-such-cluster" } }),
    )
    .await;
    let degraded = |name: &'static str, reason: &'static str| {
        let ns = &s.ns;
        async move {
            eventually(SLOW, &format!("{name} Degraded/{reason}"), || async {
                let status = backup_status(ns, name).await;
                (condition(&status.conditions, "Degraded") == Some(("True".into(), reason.into())))
                    .then_some(status)
            })
            .await
        }
    };
    let status = degraded("nowhere", "ClusterNotFound").await;
    assert!(status.reason.unwrap().contains("no-such-cluster"));

    create_cluster(&s.ns, CLUSTER, serde_json::json!({ "size": 1 })).await;
    create_backup(
        &s.ns,
        "missing-claim",
        serde_json::json!({ "etcdCluster": { "name": CLUSTER }, "pv": { "claimName": "no-such-claim" } }),
    )
    .await;
    let status = degraded("missing-claim", "DestinationNotFound").await;
    assert!(status.reason.unwrap().contains("no-such-claim"));

    let s3 = serde_json::json!({ "path": "backups/etcd.db", "awsSecret": "keys" });
    let without_bucket = backup_object(
        "without-bucket",
        serde_json::json!({ "etcdCluster": { "name": CLUSTER }, "storageType": "S3" }),
    );
    let refused = rejection(
        backups
            .create(&PostParams::default(), &without_bucket)
            .await,
    );
    assert!(
        refused
            .message
            .contains("spec.s3 is set exactly when spec.storageType is S3"),
        "{}",
        refused.message
    );
    // This operator runs outside a Pod and was given no --helper-image.
    create_backup(
        &s.ns,
        "to-bucket",
        serde_json::json!({ "etcdCluster": { "name": CLUSTER }, "storageType": "S3", "s3": s3 }),
    )
    .await;
    let status = degraded("to-bucket", "HelperImageUnknown").await;
    assert!(status.reason.unwrap().contains("--helper-image"));

    create_cluster(
        &s.ns,
        "from-nothing",
        serde_json::json!({ "size": 1, "restore": { "backupName": "no-such-backup" } }),
    )
    .await;
    eventually(SLOW, "the restore reported its missing source", || async {
        let cluster = s.ns.api::<EtcdCluster>().get("from-nothing").await.ok()?;
        let status = cluster.status?;
        (condition(&status.conditions, "Degraded")
            == Some(("True".into(), "RestoreSourceNotFound".into())))
        .then_some(())
    })
    .await;
    assert!(
        support::etcd::pods(&Target::from(&s.ns), "from-nothing")
            .await
            .is_empty()
    );
    let events = events(&s.ns).await;
    assert!(events.contains("Warning RestoreSourceNotFound"), "{events}");
}

/// A restore whose snapshot is not in the claim: the first member's `etcdutl snapshot restore`
/// fails, the cluster says so, and the operator does not start over in a loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_from_a_missing_snapshot_fails_once_and_says_so() {
    let s = setup("etcd-restore-fails").await;
    let claim: PersistentVolumeClaim = object(serde_json::json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": { "name": "empty" },
        "spec": { "accessModes": ["ReadWriteOnce"], "resources": { "requests": { "storage": "1Mi" } } },
    }));
    s.ns.api::<PersistentVolumeClaim>()
        .create(&PostParams::default(), &claim)
        .await
        .unwrap();
    create_backup(
        &s.ns,
        "elsewhere",
        serde_json::json!({ "etcdCluster": { "name": "no-such-cluster" }, "pv": { "claimName": "empty" } }),
    )
    .await;
    // A status that lists a snapshot the claim does not hold (as after someone cleaned it).
    let status = serde_json::json!({ "status": {
        "claimName": "empty",
        "snapshots": [{
            "file": "elsewhere-0.db", "time": "2026-11-24T00:00:00Z", "etcdRevision": 5,
            "etcdVersion": "3.6.16", "sizeBytes": 20480, "job": "elsewhere-20261124-000000",
        }],
    }});
    s.ns.api::<EtcdBackup>()
        .patch_status(
            "elsewhere",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&status),
        )
        .await
        .unwrap();
    create_cluster(
        &s.ns,
        "broken",
        serde_json::json!({ "size": 3, "restore": { "backupName": "elsewhere" } }),
    )
    .await;
    eventually(SLOW, "the cluster reported the failed restore", || async {
        let cluster = s.ns.api::<EtcdCluster>().get("broken").await.ok()?;
        let status = cluster.status?;
        (condition(&status.conditions, "Degraded") == Some(("True".into(), "RestoreFailed".into())))
            .then_some(())
    })
    .await;
    let restores = || {
        s.runner
            .runs()
            .into_iter()
            .filter(|run| run.container == "restore")
            .collect::<Vec<_>>()
    };
    stays_for(
        Duration::from_secs(10),
        "one failed restore, its member kept for its message, and no other started",
        || async {
            let runs = restores();
            let pods = support::etcd::pods(&Target::from(&s.ns), "broken")
                .await
                .len();
            (runs.len() == 1 && runs[0].exit_code != 0 && pods == 1)
                .then_some(())
                .ok_or(format!("{pods} member Pods; restores: {runs:?}"))
        },
    )
    .await;
}

/// Two EtcdBackups of one cluster, created together: both succeed, one after the other (one
/// backup of a cluster at a time).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_backups_of_one_cluster_take_turns() {
    let s = setup("etcd-backup-turns").await;
    cluster_of(&s.ns, 1).await;
    for name in ["first", "second"] {
        create_backup(
            &s.ns,
            name,
            serde_json::json!({ "etcdCluster": { "name": CLUSTER } }),
        )
        .await;
    }
    for name in ["first", "second"] {
        eventually(SLOW, &format!("{name} succeeded"), || async {
            backup_status(&s.ns, name).await.succeeded.then_some(())
        })
        .await;
    }
    let mut spans: Vec<(Timestamp, Timestamp)> = Vec::new();
    for name in ["first", "second"] {
        // A backup succeeds with its Job's Pod; the Job's completion is written after it.
        let span = eventually(SLOW, &format!("{name}'s Job complete"), || async {
            let job = jobs(&s.ns, name).await.pop()?;
            let status = job.status?;
            Some((status.start_time?.0, status.completion_time?.0))
        })
        .await;
        spans.push(span);
    }
    spans.sort();
    assert!(
        spans[1].0 >= spans[0].1,
        "the second backup started before the first finished: {spans:?}"
    );
}
