//! EtcdCluster against real etcd: the member runner starts the pinned etcd binary for every
//! member Pod (kwok runs nothing), so membership, quorum and data are etcd's own.

// Test code: a failed expectation is a failed test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use app_operator::api::EtcdCluster;
use app_operator::etcd::Member;
use app_operator::etcd::address::is_member_pod_name;
use app_operator::manager::ControllerKind;
use kube::ResourceExt;
use kube::api::ListParams;
use support::etcd::{
    self, SLOW, Setup, Target, base64, converged, endpoints, get, members, patch_spec, pods, put,
};
use support::{condition, events};
use testkit::member_runner::MemberRunner;
use testkit::{TestNamespace, eventually, kubectl_ok, stays_for};

const SAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../config/samples/etcd_v1beta2_etcdcluster.yaml"
);
const CLUSTER: &str = "example-etcd-cluster";

/// The EtcdCluster controller alone.
async fn setup(prefix: &str) -> Setup {
    etcd::setup(prefix, &[ControllerKind::Etcdcluster]).await
}

async fn status(ns: &TestNamespace) -> app_operator::api::EtcdClusterStatus {
    ns.api::<EtcdCluster>()
        .get(CLUSTER)
        .await
        .unwrap()
        .status
        .unwrap_or_default()
}

/// Writes a key every 100 ms through whichever member answers: counts writes no member took,
/// and the longest time without a successful write.
struct Writer {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Writes>,
}

struct Writes {
    written: usize,
    failed: usize,
    longest_gap: Duration,
}

impl Writer {
    fn start(ns: &TestNamespace, cluster: &str) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let (target, cluster) = (Target::from(ns), cluster.to_owned());
        let task = tokio::spawn({
            let stop = stop.clone();
            async move {
                let mut writes = Writes {
                    written: 0,
                    failed: 0,
                    longest_gap: Duration::ZERO,
                };
                let mut last_ok = std::time::Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    let key = format!("k{}", writes.written + writes.failed);
                    if put(&endpoints(&target, &cluster).await, &key, "v").await {
                        writes.written += 1;
                        writes.longest_gap = writes.longest_gap.max(last_ok.elapsed());
                        last_ok = std::time::Instant::now();
                    } else {
                        writes.failed += 1;
                    }
                    // The writer's pace: a write every 100 ms until stopped.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                writes.longest_gap = writes.longest_gap.max(last_ok.elapsed());
                writes
            }
        });
        Writer { stop, task }
    }

    async fn finish(self) -> Writes {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap()
    }
}

/// The sample applied (one member), then scaled to three.
async fn three_members(ns: &TestNamespace) -> Vec<Member> {
    kubectl_ok(&["apply", "-n", &ns.name, "-f", SAMPLE]);
    converged(ns, CLUSTER, 1).await;
    resize(ns, CLUSTER, 3).await;
    converged(ns, CLUSTER, 3).await
}

async fn resize(ns: &TestNamespace, cluster: &str, size: i32) {
    patch_spec(ns, cluster, serde_json::json!({ "size": size })).await;
}

/// Seed 004: size 1 → one Pod `example-etcd-cluster-xxxxxxxxxx`, one member of that name; size 2
/// → the new member was in etcd's member list before its process started, then promoted; writes
/// never failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_walkthrough_on_real_etcd() {
    let s = setup("etcd-walkthrough").await;
    kubectl_ok(&["apply", "-n", &s.ns.name, "-f", SAMPLE]);
    let first = converged(&s.ns, CLUSTER, 1).await;
    let pod_names: Vec<String> = pods(&Target::from(&s.ns), CLUSTER)
        .await
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    assert!(is_member_pod_name(CLUSTER, &pod_names[0]), "{pod_names:?}");
    assert_eq!(
        first[0].name, pod_names[0],
        "the member is named after its Pod"
    );
    let status =
        s.ns.api::<EtcdCluster>()
            .get(CLUSTER)
            .await
            .unwrap()
            .status
            .unwrap();
    assert_eq!(
        (
            format!("{:?}", status.phase),
            status.current_version.as_deref()
        ),
        ("Running".to_owned(), Some("3.6.16"))
    );

    let writer = Writer::start(&s.ns, CLUSTER);
    // Writes before the change too: a gap at its very start would show.
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Step 8: the same manifest with size 2.
    let two = std::fs::read_to_string(SAMPLE)
        .unwrap()
        .replace("size: 1", "size: 2");
    let path = std::env::temp_dir().join(format!("{}-size2.yaml", s.ns.name));
    std::fs::write(&path, two).unwrap();
    kubectl_ok(&["apply", "-n", &s.ns.name, "-f", path.to_str().unwrap()]);
    let second = converged(&s.ns, CLUSTER, 2).await;
    let Writes {
        written, failed, ..
    } = writer.finish().await;
    assert!(written > 10, "the writer wrote only {written} keys");
    assert_eq!(
        failed,
        0,
        "{failed} of {} writes failed while scaling",
        written + failed
    );

    let new = second.iter().find(|m| m.name != first[0].name).unwrap();
    let starts = s.runner.starts();
    let start = starts.iter().find(|s| s.pod == new.name).unwrap();
    assert_eq!(start.cluster_state, "existing");
    let before = start
        .members_before
        .as_ref()
        .expect("the member list before the start");
    let listed = before
        .iter()
        .find(|m| m.peer_urls == new.peer_urls)
        .unwrap_or_else(|| {
            panic!(
                "{} was not a member before its process started: {before:?}",
                new.name
            )
        });
    assert!(
        listed.is_learner && listed.name.is_empty(),
        "it was added as a learner and had not started: {listed:?}"
    );
    let events = kubectl_ok(&[
        "get",
        "events",
        "-n",
        &s.ns.name,
        "-o",
        "jsonpath={.items[*].reason}",
    ]);
    for reason in ["MemberCreated", "MemberAdded", "MemberPromoted"] {
        assert!(events.contains(reason), "no {reason} event: {events}");
    }
}

/// 1 → 3 never has two joining members at once; 3 → 1 removes each member from etcd before its
/// Pod is deleted (the runner lists the members just before it stops a process), and the data
/// survives; no Warning is published on the way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_1_to_3_and_back_keeps_quorum_and_data() {
    let (client, adds) = etcd::RecordsMemberAdds::client(false);
    let s = etcd::setup_with("etcd-scale", &[ControllerKind::Etcdcluster], client).await;
    kubectl_ok(&["apply", "-n", &s.ns.name, "-f", SAMPLE]);
    converged(&s.ns, CLUSTER, 1).await;
    assert!(
        put(
            &endpoints(&Target::from(&s.ns), CLUSTER).await,
            "kept",
            "yes"
        )
        .await
    );

    resize(&s.ns, CLUSTER, 3).await;
    converged(&s.ns, CLUSTER, 3).await;
    // A second member can only start joining at an add: etcd's answer to each add lists the
    // members right after it, and the one just added must be the only one joining.
    let answers = adds.answers();
    assert_eq!(answers.len(), 2, "one add per new member: {answers:?}");
    for members in &answers {
        let joining = members
            .iter()
            .filter(|m| m.is_learner || !m.is_started())
            .count();
        assert_eq!(
            joining, 1,
            "at most one member joins at a time: {members:?}"
        );
    }

    resize(&s.ns, CLUSTER, 1).await;
    converged(&s.ns, CLUSTER, 1).await;
    // A removed member's process either exits by itself or is stopped when its Pod goes.
    let stops = eventually(SLOW, "two member processes ended", || async {
        let stops = s.runner.stops();
        (stops.len() == 2).then_some(stops)
    })
    .await;
    for stop in &stops {
        let before = stop
            .members_before
            .as_ref()
            .expect("the member list before the stop");
        assert!(
            before.iter().all(|m| m.name != stop.pod),
            "{} was still a member when its Pod was deleted: {before:?}",
            stop.pod
        );
    }
    assert_eq!(
        get(&endpoints(&Target::from(&s.ns), CLUSTER).await, "kept")
            .await
            .as_deref(),
        Some(base64("yes").as_str()),
        "a key written before scaling is still there"
    );
    let events = kubectl_ok(&[
        "get",
        "events",
        "-n",
        &s.ns.name,
        "-o",
        "jsonpath={.items[*].reason}",
    ]);
    assert!(
        events.contains("MemberRemoved") && events.contains("PodDeleted"),
        "{events}"
    );
    // etcd refusing a change until a just-promoted member has been connected for 5 s is part of
    // every scale, not something to warn about (or back off from).
    let warnings = kubectl_ok(&[
        "get",
        "events",
        "-n",
        &s.ns.name,
        "--field-selector=type=Warning,reportingComponent=app-operator-etcdcluster",
        "-o",
        "jsonpath={.items[*].reason}",
    ]);
    assert_eq!(warnings, "", "no Warning while scaling");
}

/// Three members; one member's process is killed → a new member (new ID) replaces it, the dead
/// one is gone, a Warning says so, writes go on. Then two of three are killed → QuorumLost, and
/// no membership call is made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_member_is_replaced_and_a_lost_quorum_is_left_alone() {
    let s = setup("etcd-heal").await;
    let target = Target::from(&s.ns);
    let before = three_members(&s.ns).await;

    // A follower dies: its endpoint refuses at once, so the writer never waits on an election.
    let leader = testkit::etcd::http_request(
        endpoints(&target, CLUSTER).await[0]
            .trim_start_matches("http://")
            .parse()
            .unwrap(),
        "POST",
        "/v3/maintenance/status",
        "{}",
    )
    .await
    .map(|(_, body)| {
        serde_json::from_str::<serde_json::Value>(&body).unwrap()["leader"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    })
    .unwrap();
    let victim = before
        .iter()
        .find(|m| m.id.to_string() != leader)
        .unwrap()
        .clone();
    let writer = Writer::start(&s.ns, CLUSTER);
    // Writes before the kill too: a gap at its very start would show.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        s.runner.kill(&victim.name),
        "no process for {}",
        victim.name
    );
    let after = eventually(SLOW, "the dead member replaced", || async {
        let members = converged(&s.ns, CLUSTER, 3).await;
        (!members.iter().any(|m| m.id == victim.id)).then_some(members)
    })
    .await;
    let Writes {
        written, failed, ..
    } = writer.finish().await;
    assert_eq!(failed, 0, "{failed} of {} writes failed", written + failed);
    let replacement: Vec<&Member> = after
        .iter()
        .filter(|m| before.iter().all(|b| b.id != m.id))
        .collect();
    assert_eq!(replacement.len(), 1, "one new member: {after:?}");
    assert!(events(&s.ns).await.contains("ReplacingDeadMember"));

    // Two of three die: no quorum. Nothing may be removed or added.
    let calls_before = s.operator.metrics.etcd_membership_operations();
    for member in after.iter().take(2) {
        assert!(s.runner.kill(&member.name));
    }
    eventually(SLOW, "Degraded/QuorumLost", || async {
        let status = status(&s.ns).await;
        (condition(&status.conditions, "Degraded") == Some(("True".into(), "QuorumLost".into())))
            .then_some(())
    })
    .await;
    stays_for(
        Duration::from_secs(10),
        "no membership call without a quorum",
        || async {
            let calls = s.operator.metrics.etcd_membership_operations();
            (calls == calls_before)
                .then_some(())
                .ok_or(format!("membership calls {calls_before:?} -> {calls:?}"))
        },
    )
    .await;
    let available = condition(&status(&s.ns).await.conditions, "Available");
    assert_eq!(available.map(|a| a.0), Some("False".into()));
}

/// `paused: true` and a new size: nothing changes. Unpaused: it converges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_cluster_is_only_observed() {
    let s = setup("etcd-paused").await;
    let target = Target::from(&s.ns);
    kubectl_ok(&["apply", "-n", &s.ns.name, "-f", SAMPLE]);
    converged(&s.ns, CLUSTER, 1).await;
    patch_spec(
        &s.ns,
        CLUSTER,
        serde_json::json!({ "paused": true, "size": 3 }),
    )
    .await;
    stays_for(
        Duration::from_secs(10),
        "a paused cluster keeps its one Pod and member",
        || async {
            let pods = pods(&target, CLUSTER).await.len();
            if pods != 1 {
                return Err(format!("a paused cluster got Pods: {pods}"));
            }
            let members = members(&target, CLUSTER)
                .await
                .ok_or("no member answered")?;
            (members.len() == 1)
                .then_some(())
                .ok_or(format!("a paused cluster got members: {members:?}"))
        },
    )
    .await;
    patch_spec(&s.ns, CLUSTER, serde_json::json!({ "paused": false })).await;
    converged(&s.ns, CLUSTER, 3).await;
}

/// The operator dies between adding a member and creating its Pod: the next one creates that
/// member's Pod (no second member is added), and the cluster converges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_killed_between_member_add_and_pod_create_converges_after_restart() {
    let ns = TestNamespace::new("etcd-crash").await;
    let target = Target::from(&ns);
    let dir = std::env::temp_dir().join(format!("etcd-members-{}", ns.name));
    let _runner = MemberRunner::start(ns.client.clone(), Some(&ns.name), &dir).await;
    let (client, adds) = support::etcd::RecordsMemberAdds::client(true);
    let first = support::start_with(&ns, &[ControllerKind::Etcdcluster], client).await;
    kubectl_ok(&["apply", "-n", &ns.name, "-f", SAMPLE]);
    converged(&ns, CLUSTER, 1).await;
    resize(&ns, CLUSTER, 2).await;
    tokio::time::timeout(SLOW, adds.first.cancelled())
        .await
        .expect("a member add");
    drop(first);

    let members_after_crash = members(&target, CLUSTER).await.unwrap();
    assert_eq!(members_after_crash.len(), 2, "{members_after_crash:?}");
    let added = members_after_crash
        .iter()
        .find(|m| !m.is_started())
        .expect("an unstarted member");
    assert_eq!(
        pods(&target, CLUSTER).await.len(),
        1,
        "the crash came before the Pod"
    );

    let _second = support::start(&ns, &[ControllerKind::Etcdcluster]).await;
    let members = converged(&ns, CLUSTER, 2).await;
    assert!(
        members.iter().any(|m| m.id == added.id),
        "the member added before the crash is the one that joined: {members:?}"
    );
}

/// Deleting the EtcdCluster: its Pods and Services are garbage-collected, and the runner has no
/// process left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_cluster_removes_pods_services_and_processes() {
    let s = setup("etcd-delete").await;
    let target = Target::from(&s.ns);
    three_members(&s.ns).await;
    let services = kubectl_ok(&["get", "services", "-n", &s.ns.name, "-o", "name"]);
    assert!(
        services.contains("service/example-etcd-cluster\n")
            && services.contains("service/example-etcd-cluster-client"),
        "{services}"
    );
    kubectl_ok(&[
        "delete",
        "etcdcluster",
        CLUSTER,
        "-n",
        &s.ns.name,
        "--wait=true",
    ]);
    eventually(SLOW, "Pods, Services and processes gone", || async {
        let services = kubectl_ok(&["get", "services", "-n", &s.ns.name, "-o", "name"]);
        (pods(&target, CLUSTER).await.is_empty()
            && services.trim().is_empty()
            && s.runner.running().is_empty())
        .then_some(())
    })
    .await;
}

/// A version that skips a minor release is accepted by the schema (it is an upgrade) but not
/// rolled out: `Degraded/UnsupportedUpgrade`, and the members stay as they are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skipping_a_minor_release_is_degraded_not_rolled_out() {
    let s = setup("etcd-skip").await;
    let target = Target::from(&s.ns);
    kubectl_ok(&["apply", "-n", &s.ns.name, "-f", SAMPLE]);
    let before = converged(&s.ns, CLUSTER, 1).await;
    patch_spec(&s.ns, CLUSTER, serde_json::json!({ "version": "3.8.0" })).await;
    let message = eventually(SLOW, "Degraded/UnsupportedUpgrade", || async {
        let status = status(&s.ns).await;
        let degraded = status.conditions.iter().find(|c| c.type_ == "Degraded")?;
        (degraded.status == "True" && degraded.reason == "UnsupportedUpgrade")
            .then(|| degraded.message.clone())
    })
    .await;
    assert!(
        message.contains("3.6.16") && message.contains("3.8.0"),
        "{message}"
    );
    stays_for(Duration::from_secs(3), "the member not touched", || async {
        let versions: Vec<Option<String>> = pods(&target, CLUSTER)
            .await
            .iter()
            .map(|pod| pod.annotations().get("etcd.version").cloned())
            .collect();
        if versions != [Some("3.6.16".to_owned())] {
            return Err(format!("its Pod's version: {versions:?}"));
        }
        let members = members(&target, CLUSTER).await;
        (members.as_ref() == Some(&before))
            .then_some(())
            .ok_or(format!("members {before:?} -> {members:?}"))
    })
    .await;
    assert!(status(&s.ns).await.target_version.as_deref() == Some("3.8.0"));
}

/// 3.5 → 3.6 on three members: one member at a time (its Pod's image changes in place and the
/// runner restarts the process on the same data with the new binary), `targetVersion` while
/// rolling, the members keep their IDs, and writes never stop for more than 5 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_rolls_one_member_at_a_time_without_a_write_gap() {
    let s = setup("etcd-upgrade").await;
    let target = Target::from(&s.ns);
    let old = std::fs::read_to_string(SAMPLE)
        .unwrap()
        .replace("size: 1", "size: 3")
        .replace("3.6.16", "3.5.35");
    let path = std::env::temp_dir().join(format!("{}-3.5.yaml", s.ns.name));
    std::fs::write(&path, old).unwrap();
    kubectl_ok(&["apply", "-n", &s.ns.name, "-f", path.to_str().unwrap()]);
    let before = converged(&s.ns, CLUSTER, 3).await;
    assert_eq!(
        status(&s.ns).await.current_version.as_deref(),
        Some("3.5.35")
    );

    // Sample the Pods' versions and the status while rolling.
    let sampling = Arc::new(AtomicBool::new(true));
    let most_moving = Arc::new(AtomicUsize::new(0));
    let saw_target = Arc::new(AtomicBool::new(false));
    let sampler = tokio::spawn({
        let (sampling, most_moving, saw_target) =
            (sampling.clone(), most_moving.clone(), saw_target.clone());
        let (target, clusters) = (target.clone(), s.ns.api::<EtcdCluster>());
        async move {
            while sampling.load(Ordering::Relaxed) {
                // A member is "moving" while its Pod says 3.6 but it does not answer as 3.6 yet;
                // counted from the Pods whose process is not the new one.
                let pods = pods(&target, CLUSTER).await;
                let new = pods
                    .iter()
                    .filter(|p| {
                        p.annotations().get("etcd.version").map(String::as_str) == Some("3.6.16")
                    })
                    .count();
                let status = clusters.get(CLUSTER).await.ok().and_then(|c| c.status);
                if let Some(status) = status {
                    if status.target_version.as_deref() == Some("3.6.16") && new < 3 {
                        saw_target.store(true, Ordering::Relaxed);
                    }
                    let upgraded = status.current_version.as_deref() == Some("3.6.16");
                    let moving = if upgraded {
                        0
                    } else {
                        new.saturating_sub(count_answering_new(&target).await)
                    };
                    most_moving.fetch_max(moving, Ordering::Relaxed);
                }
                // The sampler's pace, until the upgrade has converged.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    });
    let writer = Writer::start(&s.ns, CLUSTER);
    patch_spec(&s.ns, CLUSTER, serde_json::json!({ "version": "3.6.16" })).await;
    eventually(SLOW, "every member on 3.6.16", || async {
        let status = status(&s.ns).await;
        (status.current_version.as_deref() == Some("3.6.16") && status.target_version.is_none())
            .then_some(())
    })
    .await;
    let after = converged(&s.ns, CLUSTER, 3).await;
    let writes = writer.finish().await;
    sampling.store(false, Ordering::Relaxed);
    sampler.await.unwrap();

    let ids = |members: &[Member]| {
        let mut ids: Vec<u64> = members.iter().map(|m| m.id).collect();
        ids.sort_unstable();
        ids
    };
    assert_eq!(
        ids(&after),
        ids(&before),
        "members upgrade in place, keeping their IDs"
    );
    assert!(
        saw_target.load(Ordering::Relaxed),
        "targetVersion was never shown while rolling"
    );
    assert!(
        most_moving.load(Ordering::Relaxed) <= 1,
        "more than one member upgrading at once"
    );
    assert!(
        writes.longest_gap < Duration::from_secs(5),
        "writes stopped for {:?}",
        writes.longest_gap
    );
    let starts = s.runner.starts();
    assert_eq!(
        starts.iter().filter(|s| s.version == "3.6").count(),
        3,
        "{starts:?}"
    );
}

/// How many of the cluster's members answer their status as 3.6.
async fn count_answering_new(target: &Target) -> usize {
    let mut count = 0;
    for endpoint in endpoints(target, CLUSTER).await {
        let address = endpoint.trim_start_matches("http://").parse().unwrap();
        if let Some((200, body)) =
            testkit::etcd::http_request(address, "POST", "/v3/maintenance/status", "{}").await
            && body.contains("\"version\":\"3.6.16\"")
        {
            count += 1;
        }
    }
    count
}

/// With `pod.persistentVolumeClaimSpec`, each member has a claim of its own, named after its Pod;
/// a removed member's claim goes with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_member_keeps_its_data_on_its_own_claim_deleted_with_the_member() {
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
    let s = setup("etcd-claims").await;
    let class = format!("etcd-{}", s.ns.name);
    // Static volumes for the claims to bind to (there is no provisioner here).
    let volumes: kube::Api<PersistentVolume> = kube::Api::all(s.ns.client.clone());
    for index in 0..3 {
        let volume: PersistentVolume = testkit::object(serde_json::json!({
            "metadata": { "name": format!("{class}-{index}") },
            "spec": {
                "storageClassName": class,
                "capacity": { "storage": "1Gi" },
                "accessModes": ["ReadWriteOnce"],
                "hostPath": { "path": format!("/tmp/{class}-{index}") }
            }
        }));
        volumes.create(&Default::default(), &volume).await.unwrap();
    }
    let manifest = format!(
        "apiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdCluster\nmetadata:\n  name: {CLUSTER}\nspec:\n  size: 3\n  pod:\n    persistentVolumeClaimSpec:\n      storageClassName: {class}\n      accessModes: [ReadWriteOnce]\n      resources:\n        requests:\n          storage: 1Gi\n"
    );
    let path = std::env::temp_dir().join(format!("{}-claims.yaml", s.ns.name));
    std::fs::write(&path, manifest).unwrap();
    kubectl_ok(&["apply", "-n", &s.ns.name, "-f", path.to_str().unwrap()]);
    let members = converged(&s.ns, CLUSTER, 3).await;

    let claims = s.ns.api::<PersistentVolumeClaim>();
    let claim_names = || async {
        let mut names: Vec<String> = claims
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
            .map(ResourceExt::name_any)
            .collect();
        names.sort();
        names
    };
    let mut member_names: Vec<String> = members.iter().map(|m| m.name.clone()).collect();
    member_names.sort();
    assert_eq!(
        claim_names().await,
        member_names,
        "one claim per member, named after its Pod"
    );
    let pod = &pods(&Target::from(&s.ns), CLUSTER).await[0];
    let volume = &pod.spec.as_ref().unwrap().volumes.as_ref().unwrap()[0];
    assert_eq!(
        volume
            .persistent_volume_claim
            .as_ref()
            .map(|c| c.claim_name.clone()),
        Some(pod.name_any())
    );

    resize(&s.ns, CLUSTER, 1).await;
    let left = converged(&s.ns, CLUSTER, 1).await;
    let left = eventually(SLOW, "the removed members' claims gone", || async {
        let names = claim_names().await;
        (names == [left[0].name.clone()]).then_some(names)
    })
    .await;
    assert_eq!(left.len(), 1);
    kubectl_ok(&[
        "delete",
        "etcdcluster",
        CLUSTER,
        "-n",
        &s.ns.name,
        "--wait=true",
    ]);
    for index in 0..3 {
        let _ = volumes
            .delete(&format!("{class}-{index}"), &Default::default())
            .await;
    }
}
