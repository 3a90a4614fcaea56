//! The fault suite (`cargo xtask chaos`): rows of the fault table in docs/architecture.md, run
//! one after another, each on a control plane of its own whose API server keeps an audit log.
//! Besides its own goal every row checks what a user relies on after any fault: every MyApp
//! Ready at its generation with exactly its children, every AppCluster with `size` Pods and
//! never more, no panic, and no operator write for two minutes once converged. That last check
//! of a row runs while the next row does (see [`Aftermath`]), so this file is its own harness
//! (`harness = false`): `cargo xtask chaos <part of a row's name>` runs the rows matching it.
//! The operator runs as users run it: as its ServiceAccount (from the Pod each replica plays),
//! under its own ClusterRole, Role and admission policies from `config/default`.
//!
//! Too long for `make test` (its smoke subset is `faults.rs` and the restart tests in
//! `process.rs`); `test = false` in Cargo.toml keeps it out of `cargo test`.

// Test code: a failed expectation is a failed test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{ExitCode, ExitStatus};
use std::time::{Duration, Instant};

use app_operator::mutation::Mutation;
use app_operator_api::{AppCluster, MyApp};
use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use local_cluster::Stop;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;
use support::PodCount;
use support::cluster::OwnCluster;
use support::process::OperatorProcess;
use testkit::eventually;
use testkit::proxy::{Fault, FaultProxy};

/// The goal of most rows: converged this long after the fault ended.
const CONVERGED: Duration = Duration::from_secs(60);
/// The bound on rollouts after a control-plane restart, which wait on the controller-manager's
/// and kwok's own recovery too.
const ROLLED_OUT: Duration = Duration::from_secs(180);
/// How long a converged operator is watched for writes it should not make (the goal: 2 min;
/// `APP_OPERATOR_CHAOS_QUIET_SECS` shortens it while working on one row).
fn quiet() -> Duration {
    Duration::from_secs(
        std::env::var("APP_OPERATOR_CHAOS_QUIET_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(120),
    )
}
/// The Pod the operator plays: it acts as its ServiceAccount from that Pod (impersonated), under
/// its own ClusterRole and policies, and the audit log tells its writes apart by the Pod.
const OPERATOR: &str = "chaos-operator";
/// The namespace of the leader election Lease: where `config/rbac` lets the operator hold it,
/// and where the leader writes policy reads it.
const LEASE_NAMESPACE: &str = "app-operator-system";
/// Whether this run is the suite's mutation check (`APP_OPERATOR_CHAOS_MUTATE=1`, with which
/// `cargo xtask chaos` builds the operator with its `mutations` feature): each row runs a
/// deliberately broken operator (one of `app_operator::mutation`'s defects, a flag, or without
/// what protects it), and must then fail. docs/architecture.md's table says which row catches
/// which.
fn mutated() -> bool {
    std::env::var_os("APP_OPERATOR_CHAOS_MUTATE").is_some()
}

/// `flags` in the mutation check (see [`mutated`]), else none.
fn mutation(flags: &'static [&'static str]) -> &'static [&'static str] {
    if mutated() { flags } else { &[] }
}

/// A leader that holds on to its lease for 30 s without renewing it (40 s lease): what the rows
/// on a cut-off or slow leader must catch.
const SLOW_TO_STEP_DOWN: &[&str] = &[
    "--leader-election-renew-deadline=30s",
    "--leader-election-lease-duration=40s",
];

/// The leader election flags of every row with more than one replica.
const ELECTION: [&str; 2] = [
    "--leader-elect",
    "--leader-election-namespace=app-operator-system",
];

/// Runs the rows whose names contain one of the arguments (every row without any), one after
/// another; each row's quiet check runs beside the next row. Flags (`--nocapture`, ...) are
/// ignored: this is the whole harness.
fn main() -> ExitCode {
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| !arg.starts_with('-'))
        .collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run(&filters))
}

/// A row of the suite: its name (what a filter matches) and how to run it.
type Row = (&'static str, RowFn);
type RowFn = fn() -> BoxFuture<'static, Aftermath>;

macro_rules! rows {
    ($($row:ident),* $(,)?) => {
        [$((stringify!($row), (|| Box::pin($row())) as RowFn)),*]
    };
}

async fn run(filters: &[String]) -> ExitCode {
    let all: [Row; 13] = rows![
        sigkill_at_a_random_moment_of_a_burst_then_restart,
        changes_made_while_the_operator_was_down_are_reflected_after_it_starts,
        a_standby_takes_over_within_20_s_of_a_leader_killed_mid_burst,
        converged_within_60_s_after_connections_were_refused_then_reset,
        a_deleted_crd_is_warned_about_and_its_reinstall_picked_up,
        the_api_server_and_etcd_stopping_under_the_operator,
        a_lease_with_a_skewed_renew_time_is_taken_after_its_duration_on_our_clock,
        a_blackhole_during_a_burst_frees_every_worker_and_converges_within_90_s,
        a_blackholed_leader_exits_within_12_s_and_never_writes_beside_its_successor,
        a_slow_api_server_keeps_the_lease_at_1_and_3_s_and_takes_it_away_cleanly_at_6_s,
        dead_watches_are_replaced_and_edits_applied_within_70_s,
        throttled_by_priority_and_fairness_the_operator_still_converges,
        a_deposed_leaders_held_writes_are_refused_once_its_successor_leads,
    ];
    let rows: Vec<Row> = all
        .into_iter()
        .filter(|(name, _)| filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str())))
        .collect();
    if rows.is_empty() {
        println!("no row's name contains any of {filters:?}");
        return ExitCode::FAILURE;
    }
    println!("running {} rows", rows.len());
    let suite = Instant::now();
    let mut checks = Vec::new();
    let mut failed = Vec::new();
    for (name, row) in rows {
        println!("row {name} ...");
        let started = Instant::now();
        // The row on a thread of its own, as a test's body would be: its blocking calls
        // (kubectl, waiting for a process) must not hold up a worker, whose queued tasks (the
        // fault proxy, the quiet checks) would wait with it.
        let runtime = tokio::runtime::Handle::current();
        match tokio::task::spawn_blocking(move || runtime.block_on(row())).await {
            Ok(aftermath) => {
                println!(
                    "row {name}: its goals met after {:.1?}; its quiet check runs beside the next row",
                    started.elapsed()
                );
                let check = tokio::spawn(async move {
                    aftermath.check().await;
                    started.elapsed()
                });
                checks.push((name, check));
            }
            Err(_) => {
                println!("row {name}: FAILED after {:.1?}", started.elapsed());
                failed.push(name);
            }
        }
    }
    for (name, check) in checks {
        match check.await {
            Ok(took) => println!("row {name}: ok, {took:.1?} with its quiet check"),
            Err(_) => {
                println!("row {name}: FAILED its quiet check");
                failed.push(name);
            }
        }
    }
    println!(
        "the fault suite: {} failed, {:.1?}",
        failed.len(),
        suite.elapsed()
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        println!("failed rows: {failed:?}");
        ExitCode::FAILURE
    }
}

/// One row's control plane, with the client the checks use.
struct Scene {
    cluster: OwnCluster,
    client: Client,
    /// The defects its operators run with in the mutation check.
    mutations: &'static [Mutation],
}

/// How far a convergence check goes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Until {
    /// What the operator does alone: each MyApp's status at its generation, its children there
    /// and current, each AppCluster with `size` Pods.
    Applied,
    /// And the rollouts the controller-manager and kwok do: every MyApp and AppCluster Ready.
    RolledOut,
}

impl Scene {
    /// The control plane of the row `row`, whose operators run with `mutations` in the
    /// mutation check.
    async fn new(row: &str, mutations: &'static [Mutation]) -> Scene {
        let cluster = OwnCluster::up(&format!("chaos-{row}"), true).await;
        // The zombie-write row's mutation: no fencing.
        cluster.install_operator_rbac(!mutated());
        let client = cluster.client().await;
        Scene {
            cluster,
            client,
            mutations,
        }
    }

    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), "default")
    }

    /// The operator (MyApp and AppCluster controllers) as a replica in the Pod `pod`: its
    /// ServiceAccount, impersonated from that Pod (see [`OwnCluster::install_operator_rbac`]),
    /// through `kubeconfig` if given (a proxy's), with `extra` flags.
    fn operator(&self, pod: &str, kubeconfig: Option<&Path>, extra: &[&str]) -> OperatorProcess {
        let own = self.cluster.kubeconfig_as_pod(pod);
        let args = [
            &[
                "--controllers=myapp,appcluster",
                "--watch-namespace=default",
                // Named, so that a replica playing a Pod does not look its (absent) Pod up for it.
                "--helper-image=app-operator:chaos",
            ],
            extra,
        ]
        .concat();
        let defects: Vec<&str> = self.mutations.iter().map(|m| m.into()).collect();
        let defects = if mutated() {
            defects.join(",")
        } else {
            String::new()
        };
        OperatorProcess::spawn_with_env(
            kubeconfig.unwrap_or(&own),
            &args,
            &[("POD_NAME", pod), ("APP_OPERATOR_MUTATIONS", &defects)],
        )
    }

    /// Creates MyApps `first..first + count` (`app-<i>`), ten requests at a time; those whose
    /// index is below `autoscaled` have autoscaling enabled.
    async fn create_my_apps(&self, first: usize, count: usize, autoscaled: usize) {
        let api = self.api::<MyApp>();
        futures::stream::iter(first..first + count)
            .for_each_concurrent(10, |i| {
                let api = api.clone();
                async move {
                    let mut spec = json!({ "replicas": 1, "image": "nginx:1.27", "port": 80 });
                    if i < autoscaled {
                        spec["autoScaling"] = json!({ "enabled": true, "maxReplicas": 3 });
                    }
                    let app: MyApp = testkit::object(json!({
                        "apiVersion": "example.com/v1", "kind": "MyApp",
                        "metadata": { "name": format!("app-{i}") }, "spec": spec,
                    }));
                    api.create(&PostParams::default(), &app).await.unwrap();
                }
            })
            .await;
    }

    async fn create_app_cluster(&self, name: &str, size: i32) {
        let cluster: AppCluster = testkit::object(json!({
            "apiVersion": "demo.demo.io/v1", "kind": "AppCluster",
            "metadata": { "name": name }, "spec": { "size": size },
        }));
        self.api::<AppCluster>()
            .create(&PostParams::default(), &cluster)
            .await
            .unwrap();
    }

    async fn patch<K>(&self, name: &str, patch: serde_json::Value)
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        self.api::<K>()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    /// Sets the image of MyApps `app-<i>` for each `i` of `apps`.
    async fn set_images(&self, apps: std::ops::Range<usize>, image: &str) {
        for i in apps {
            self.patch::<MyApp>(&format!("app-{i}"), json!({ "spec": { "image": image } }))
                .await;
        }
    }

    /// Waits (at most `within`, failing with `goal`) until everything is converged; returns how
    /// long it took.
    async fn converged(&self, within: Duration, goal: &str) -> Duration {
        self.settled(Until::RolledOut, within, goal).await
    }

    /// Waits (at most `within`, failing with `goal`) until the operator has done its part of
    /// converging, whether or not the rollouts it started are done; returns how long it took.
    async fn applied(&self, within: Duration, goal: &str) -> Duration {
        self.settled(Until::Applied, within, goal).await
    }

    async fn settled(&self, until: Until, within: Duration, goal: &str) -> Duration {
        let start = Instant::now();
        let mut last = String::new();
        let mut told = false;
        let result = tokio::time::timeout(within, async {
            loop {
                match self.divergence(until).await {
                    None => return,
                    // Once convergence is slow, what still lags and each change of it: which
                    // part (operator, controller-manager, kwok) a slow row waits on.
                    Some(what) => {
                        let slow = start.elapsed() >= Duration::from_secs(10);
                        if slow && (what != last || !told) {
                            println!("  {goal}: at {:.1?}: {what}", start.elapsed());
                            told = true;
                        }
                        last = what;
                    }
                }
                // Between polls, under the timeout around this loop.
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
        .await;
        assert!(result.is_ok(), "{goal}: not converged: {last}");
        start.elapsed()
    }

    /// What is not converged yet, if anything: a MyApp not Ready at its generation, a child
    /// missing, extra or stale, an AppCluster without `size` Ready Pods. Up to
    /// [`Until::Applied`], Ready is not asked for (it needs the rollouts done).
    async fn divergence(&self, until: Until) -> Option<String> {
        let list = ListParams::default();
        let (apps, deployments, services) = (self.api(), self.api(), self.api());
        let (hpas, clusters, pods) = (self.api(), self.api(), self.api());
        let Ok((apps, deployments, services, hpas, clusters, pods)) = futures::try_join!(
            Api::<MyApp>::list(&apps, &list),
            Api::<Deployment>::list(&deployments, &list),
            Api::<Service>::list(&services, &list),
            Api::<HorizontalPodAutoscaler>::list(&hpas, &list),
            Api::<AppCluster>::list(&clusters, &list),
            Api::<Pod>::list(&pods, &list),
        ) else {
            return Some("the API server did not answer".into());
        };
        let owned_by = |owners: Option<&Vec<_>>| -> Option<String> {
            owners?
                .iter()
                .find(
                    |o: &&k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference| {
                        o.controller == Some(true)
                    },
                )
                .map(|o| o.uid.clone())
        };
        let by_uid: BTreeMap<String, &MyApp> = apps
            .items
            .iter()
            .map(|app| (app.uid().unwrap_or_default(), app))
            .collect();
        let deployment_of: BTreeMap<String, &Deployment> = deployments
            .items
            .iter()
            .filter_map(|d| Some((owned_by(d.metadata.owner_references.as_ref())?, d)))
            .collect();
        for app in &apps.items {
            let name = app.name_any();
            let status = app.status.as_ref();
            if status.and_then(|s| s.observed_generation) != app.metadata.generation {
                return Some(format!("MyApp {name}: status not at its generation"));
            }
            let ready = status.is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            });
            let Some(deployment) = deployment_of.get(&app.uid().unwrap_or_default()) else {
                return Some(format!("MyApp {name}: no Deployment"));
            };
            if !ready && until == Until::RolledOut {
                // Whether the rollout waits on the controller-manager (generation not observed,
                // replicas not updated) or on kwok (Pods not ready).
                let rollout = deployment.status.as_ref().map(|s| {
                    format!(
                        "generation {:?} observed {:?}, updated {:?}, ready {:?}, available {:?} of {:?}",
                        deployment.metadata.generation,
                        s.observed_generation,
                        s.updated_replicas,
                        s.ready_replicas,
                        s.available_replicas,
                        s.replicas
                    )
                });
                return Some(format!("MyApp {name}: not Ready; Deployment {rollout:?}"));
            }
            let image = deployment
                .spec
                .as_ref()
                .and_then(|s| s.template.spec.as_ref())
                .and_then(|s| s.containers.first())
                .and_then(|c| c.image.clone());
            if image.as_deref() != Some(app.spec.image.as_str()) {
                return Some(format!("MyApp {name}: Deployment image {image:?}"));
            }
            let autoscaled = app.spec.auto_scaling.as_ref().is_some_and(|a| a.enabled);
            let has_hpa = hpas.items.iter().any(|h| h.name_any() == name);
            if autoscaled != has_hpa {
                return Some(format!(
                    "MyApp {name}: autoscaling {autoscaled}, HPA {has_hpa}"
                ));
            }
        }
        // Every child belongs to a MyApp that exists, one of each kind per MyApp.
        for (kind, owners) in [
            (
                "Deployment",
                deployments
                    .items
                    .iter()
                    .map(|d| owned_by(d.metadata.owner_references.as_ref()))
                    .collect::<Vec<_>>(),
            ),
            (
                "Service",
                services
                    .items
                    .iter()
                    .filter(|s| s.name_any() != "kubernetes")
                    .map(|s| owned_by(s.metadata.owner_references.as_ref()))
                    .collect(),
            ),
        ] {
            let distinct: BTreeSet<_> = owners.iter().collect();
            if distinct.len() != owners.len() || owners.len() != apps.items.len() {
                return Some(format!(
                    "{} {kind}s for {} MyApps (duplicates or orphans)",
                    owners.len(),
                    apps.items.len()
                ));
            }
            if let Some(orphan) = owners
                .iter()
                .find(|o| o.as_ref().is_none_or(|uid| !by_uid.contains_key(uid)))
            {
                return Some(format!("a {kind} owned by {orphan:?}, no MyApp"));
            }
        }
        for cluster in &clusters.items {
            let name = cluster.name_any();
            let size = cluster.spec.size;
            let live = pods
                .items
                .iter()
                .filter(|p| p.labels().get("app") == Some(&name))
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .count();
            let ready = cluster.status.as_ref().map(|s| s.ready);
            let all_ready = ready == Some(size) || until == Until::Applied;
            if !all_ready || live != usize::try_from(size).unwrap_or(0) {
                return Some(format!(
                    "AppCluster {name}: size {size}, status.ready {ready:?}, {live} Pods"
                ));
            }
        }
        None
    }

    /// The writes the replica in the Pod `who` made (leases aside: renewing one is
    /// what a leader does) at or after `since`.
    fn writes_by(&self, who: &str, since: Timestamp) -> Vec<String> {
        self.cluster
            .audit()
            .into_iter()
            .filter(|e| e.pod == who && e.at >= since)
            .filter(|e| e.resource != "leases")
            .map(|e| {
                format!(
                    "{} {} {} {} at {}",
                    e.verb, e.resource, e.name, e.code, e.at
                )
            })
            .collect()
    }
}

/// What a row leaves once its own goals are met: its control plane and operators, converged, to
/// be watched for a write by `writer` for [`quiet`] and then checked for a panic. The suite runs
/// this check beside the next row: an idle control plane and operator cost next to nothing, and
/// two minutes of waiting per row would be half the suite.
struct Aftermath {
    scene: Scene,
    writer: &'static str,
    operators: Vec<OperatorProcess>,
}

impl Aftermath {
    async fn check(self) {
        let since = Timestamp::now();
        let quiet = quiet();
        // The audit log then shows every request of the whole period: nothing is missed.
        tokio::time::sleep(quiet).await;
        // Reading the audit log and stopping the control plane (when `self` goes) block: on a
        // thread of their own, not on a worker whose queued tasks the row beside would wait for
        // (an 8 s stall made a lease look taken after 24.8 s when it was taken after 16.3 s).
        let checked = tokio::task::spawn_blocking(move || {
            let writes = self.scene.writes_by(self.writer, since);
            assert!(
                writes.is_empty(),
                "the converged operator wrote {} times within {quiet:?} (goal: none): {:?}",
                writes.len(),
                &writes[..writes.len().min(10)]
            );
            for operator in &self.operators {
                no_panic(operator);
            }
        })
        .await;
        if let Err(failed) = checked {
            std::panic::resume_unwind(failed.into_panic());
        }
    }
}

fn sigkill(operator: &mut OperatorProcess) {
    signal(operator, Signal::SIGKILL);
    operator.wait();
}

/// Waits for `operator` to exit by itself, failing as `who` if it still runs after `limit`;
/// how it exited and how long that took.
async fn exit(
    operator: &mut OperatorProcess,
    limit: Duration,
    who: &str,
) -> (ExitStatus, Duration) {
    let start = Instant::now();
    loop {
        if let Some(status) = operator.exited() {
            return (status, start.elapsed());
        }
        assert!(start.elapsed() < limit, "{who} still runs after {limit:?}");
        // Between polls, under the limit above.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn no_panic(operator: &OperatorProcess) {
    let log = operator.log();
    assert!(!log.contains("panicked"), "the operator panicked:\n{log}");
}

/// A pseudo-random delay in `0..bound` from `seed` (splitmix64): a seed printed by a failing
/// run reproduces its kill moment.
fn delay_for(seed: u64, bound: Duration) -> Duration {
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    let millis = u64::try_from(bound.as_millis()).unwrap_or(u64::MAX).max(1);
    Duration::from_millis(z % millis)
}

/// The seeds of the SIGKILL row: `APP_OPERATOR_CHAOS_SEEDS=3,17` reruns those, else 1..=5.
fn seeds() -> Vec<u64> {
    std::env::var("APP_OPERATOR_CHAOS_SEEDS").map_or_else(
        |_| (1..=5).collect(),
        |list| list.split(',').map(|s| s.trim().parse().unwrap()).collect(),
    )
}

async fn sigkill_at_a_random_moment_of_a_burst_then_restart() -> Aftermath {
    let mut aftermath = None;
    for seed in seeds() {
        // The previous seed's control plane goes before the next one starts.
        drop(aftermath.take());
        let scene = Scene::new(&format!("sigkill-{seed}"), &[Mutation::CountOnlyReadyPods]).await;
        let moment = delay_for(seed, Duration::from_secs(20));
        println!("seed {seed}: SIGKILL {moment:?} into the burst");
        let pods = PodCount::start(scene.api::<Pod>(), "app=burst").await;
        scene.create_app_cluster("burst", 0).await;
        let mut operator = scene.operator(OPERATOR, None, &[]);
        operator.ready().await;
        let burst = async {
            scene
                .patch::<AppCluster>("burst", json!({ "spec": { "size": 200 } }))
                .await;
            scene.create_my_apps(0, 300, 0).await;
        };
        let crash = async {
            // The fault's moment, in the middle of the burst.
            tokio::time::sleep(moment).await;
            sigkill(&mut operator);
        };
        futures::join!(burst, crash);
        no_panic(&operator);
        let restarted = scene.operator(OPERATOR, None, &[]);
        let took = scene
            .converged(
                CONVERGED,
                &format!("seed {seed}: converged ≤ 60 s after the restart"),
            )
            .await;
        println!("seed {seed}: converged {took:?} after the restart");
        assert!(
            pods.most() <= 200,
            "seed {seed}: {} Pods at once for size 200 (goal: never more than size)",
            pods.most()
        );
        no_panic(&restarted);
        // The quiet check once, after the last seed: two minutes per seed would double the row.
        aftermath = Some(Aftermath {
            scene,
            writer: OPERATOR,
            operators: vec![restarted],
        });
    }
    aftermath.expect("at least one seed")
}

async fn changes_made_while_the_operator_was_down_are_reflected_after_it_starts() -> Aftermath {
    let scene = Scene::new("while-down", &[Mutation::SkipReadyAtGeneration]).await;
    let mut operator = scene.operator(OPERATOR, None, &[]);
    scene.create_my_apps(0, 60, 10).await;
    scene.create_app_cluster("down", 200).await;
    scene
        .converged(support::TIMEOUT * 3, "the first convergence")
        .await;
    no_panic(&operator);
    kill(
        Pid::from_raw(i32::try_from(operator.pid()).unwrap()),
        Signal::SIGTERM,
    )
    .unwrap();
    assert!(
        operator.wait().success(),
        "a SIGTERM ends the operator cleanly"
    );

    scene.set_images(10..40, "nginx:1.28").await;
    for i in 0..10 {
        scene
            .patch::<MyApp>(
                &format!("app-{i}"),
                json!({ "spec": { "autoScaling": { "enabled": false, "maxReplicas": 3 } } }),
            )
            .await;
    }
    // The Deployments of MyApps not otherwise edited: only their children say they need work.
    for i in 40..60 {
        scene
            .api::<Deployment>()
            .delete(&format!("app-{i}"), &Default::default())
            .await
            .unwrap();
    }
    scene
        .patch::<AppCluster>("down", json!({ "spec": { "size": 50 } }))
        .await;

    let restarted = scene.operator(OPERATOR, None, &[]);
    let took = scene
        .converged(CONVERGED, "all changes reflected ≤ 60 s after the restart")
        .await;
    println!("changes made while down: converged {took:?} after the restart");
    Aftermath {
        scene,
        writer: OPERATOR,
        operators: vec![restarted],
    }
}

async fn a_standby_takes_over_within_20_s_of_a_leader_killed_mid_burst() -> Aftermath {
    let scene = Scene::new("leader-kill", &[]).await;
    let mut leader = scene.operator("chaos-replica-a", None, &ELECTION);
    leader.ready().await;
    eventually(support::TIMEOUT, "replica a to lead", || async {
        let lease = scene.cluster.audit();
        lease
            .iter()
            .any(|e| e.pod == "chaos-replica-a" && e.resource == "leases" && e.code < 300)
            .then_some(())
    })
    .await;
    // Mutated: the standby elects itself on a lease of its own, a second leader at once.
    let standby = scene.operator(
        "chaos-replica-b",
        None,
        &[
            &ELECTION[..],
            mutation(&["--leader-election-id=chaos-other"]),
        ]
        .concat(),
    );
    standby.ready().await;

    let burst = scene.create_my_apps(0, 100, 0);
    let crash = async {
        // The fault's moment, in the middle of the burst.
        tokio::time::sleep(Duration::from_secs(3)).await;
        sigkill(&mut leader);
        Timestamp::now()
    };
    let ((), killed) = futures::join!(burst, crash);
    scene
        .converged(CONVERGED, "converged ≤ 60 s after the leader was killed")
        .await;

    let first_standby = assert_one_writer_at_a_time(&scene);
    let taking_over = first_standby.duration_since(killed);
    println!("the standby's first write came {taking_over:?} after the leader was killed");
    assert!(
        taking_over.as_secs() <= 20,
        "standby wrote after {taking_over:?} > 20 s"
    );
    Aftermath {
        scene,
        writer: "chaos-replica-b",
        operators: vec![standby],
    }
}

async fn converged_within_60_s_after_connections_were_refused_then_reset() -> Aftermath {
    let scene = Scene::new("refuse-reset", &[Mutation::WatchErrorsFatal]).await;
    let (proxy, proxied) = through_proxy(&scene, OPERATOR).await;
    let mut operator = scene.operator(OPERATOR, Some(&proxied), &[]);
    scene.create_my_apps(0, 50, 0).await;
    scene
        .converged(support::TIMEOUT, "the first convergence")
        .await;

    for (fault, images) in [(Fault::Refuse, 0..25), (Fault::Reset, 25..50)] {
        proxy.set(fault);
        scene.set_images(images, "nginx:1.28").await;
        // The fault's duration; what it left is checked after it heals.
        tokio::time::sleep(Duration::from_secs(30)).await;
    }
    proxy.set(Fault::Pass);
    let took = scene
        .converged(CONVERGED, "converged ≤ 60 s after the network healed")
        .await;
    println!("refused then reset for 30 s each: converged {took:?} after heal");
    assert!(operator.exited().is_none(), "the operator stays up");
    Aftermath {
        scene,
        writer: OPERATOR,
        operators: vec![operator],
    }
}

async fn a_deleted_crd_is_warned_about_and_its_reinstall_picked_up() -> Aftermath {
    let scene = Scene::new("crd", &[Mutation::WatchErrorsFatal]).await;
    let operator = scene.operator(OPERATOR, None, &[]);
    scene.create_my_apps(0, 5, 0).await;
    scene
        .converged(support::TIMEOUT, "the first convergence")
        .await;

    scene
        .cluster
        .kubectl(&["delete", "crd", "myapps.example.com"]);
    eventually(
        support::TIMEOUT,
        "a WARN line for the MyApp watch",
        || async {
            operator
                .log()
                .lines()
                .any(|l| l.contains("WARN") && l.contains("watch failed") && l.contains("MyApp"))
                .then_some(())
        },
    )
    .await;
    // The outage's duration (the CRD away); what it left is checked after.
    tokio::time::sleep(Duration::from_secs(30)).await;
    scene.cluster.kubectl(&[
        "apply",
        "--server-side",
        "-f",
        &support::cluster::repo_file("config/crd/bases/example.com_myapps.yaml"),
    ]);
    scene.cluster.kubectl(&[
        "wait",
        "--for=condition=Established",
        "crd/myapps.example.com",
        "--timeout=60s",
    ]);
    scene.create_my_apps(100, 1, 0).await;
    let took = scene
        .converged(
            CONVERGED,
            "a new MyApp converged ≤ 60 s after the CRD was Established",
        )
        .await;
    println!("CRD reinstalled: converged {took:?} after Established");
    Aftermath {
        scene,
        writer: OPERATOR,
        operators: vec![operator],
    }
}

async fn the_api_server_and_etcd_stopping_under_the_operator() -> Aftermath {
    let scene = Scene::new("control-plane", &[Mutation::WatchErrorsFatal]).await;
    let mut operator = scene.operator(OPERATOR, None, &[]);
    scene.create_my_apps(0, 20, 0).await;
    scene
        .converged(support::TIMEOUT, "the first convergence")
        .await;
    let outages = [
        ("kube-apiserver", Stop::Term, 5),
        ("kube-apiserver", Stop::Kill, 5),
        ("kube-apiserver", Stop::Term, 45),
        ("kube-apiserver", Stop::Kill, 45),
        ("etcd", Stop::Kill, 10),
        ("etcd", Stop::Kill, 40),
    ];
    for (round, (component, how, down)) in outages.into_iter().enumerate() {
        let back = scene
            .cluster
            .restart(component, how, Duration::from_secs(down))
            .await;
        assert!(
            operator.exited().is_none(),
            "the operator exited with {component} {how:?} for {down} s"
        );
        let image = format!("nginx:1.{}", 30 + round);
        scene.set_images(0..20, &image).await;
        // The goal holds the operator to its part; the rollouts after it are the
        // controller-manager's and kwok's, whose own recovery from an API server restart can
        // take longer (docs/architecture.md, the fault suite).
        let applied = scene
            .applied(
                CONVERGED,
                &format!(
                    "the operator's part done ≤ 60 s after {component} ({how:?}, {down} s) was back"
                ),
            )
            .await;
        scene
            .converged(
                ROLLED_OUT.saturating_sub(back.elapsed()),
                &format!("rolled out ≤ 180 s after {component} ({how:?}, {down} s) was back"),
            )
            .await;
        let count = scene
            .api::<MyApp>()
            .list(&ListParams::default())
            .await
            .unwrap();
        assert_eq!(count.items.len(), 20, "MyApps lost with {component}");
        println!(
            "{component} {how:?} down {down} s: the operator's part done {applied:?} after the edits; rolled out {:?} after it was back",
            back.elapsed()
        );
    }
    Aftermath {
        scene,
        writer: OPERATOR,
        operators: vec![operator],
    }
}

/// Replica b (the successor) wrote, and replica a (the first leader) changed nothing once it
/// had (leases aside): every request of a's that the API server completed after b's first write
/// failed (refused by the leader writes policy, or cancelled because the process that sent it
/// was gone by the time a fault delivered it). Returns when b first wrote.
fn assert_one_writer_at_a_time(scene: &Scene) -> Timestamp {
    let writes: Vec<_> = scene
        .cluster
        .audit()
        .into_iter()
        .filter(|e| e.pod.starts_with("chaos-replica-") && e.resource != "leases")
        .collect();
    let first = writes
        .iter()
        .find(|e| e.pod == "chaos-replica-b")
        .expect("the successor wrote")
        .at;
    let late: Vec<_> = writes
        .iter()
        .filter(|e| e.pod == "chaos-replica-a" && e.at >= first)
        .collect();
    let shown: Vec<_> = late
        .iter()
        .map(|e| format!("{} {} {}: {}", e.verb, e.resource, e.name, e.code))
        .collect();
    println!("the old leader's requests completed after its successor's first write: {shown:?}");
    let changed: Vec<_> = late.iter().filter(|e| e.code < 300).collect();
    assert!(
        changed.is_empty(),
        "two writers: the old leader changed objects after its successor's first write: {changed:?}"
    );
    first
}

/// The holder of the operator's leader election Lease, if it exists and names one.
async fn lease_holder(scene: &Scene) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(scene.client.clone(), LEASE_NAMESPACE);
    let lease = leases.get_opt("app-operator.example.com").await.ok()??;
    lease.spec?.holder_identity
}

async fn a_lease_with_a_skewed_renew_time_is_taken_after_its_duration_on_our_clock() -> Aftermath {
    let scene = Scene::new("lease-skew", &[Mutation::LeaseExpiryFromRenewTime]).await;
    let mut leader = None;
    for skew_secs in [3600, -3600] {
        // The previous case's leader goes (killed) before the lease is replaced.
        drop(leader.take());
        let renew = MicroTime(Timestamp::now() + SignedDuration::from_secs(skew_secs));
        let lease = Lease {
            metadata: kube::api::ObjectMeta {
                name: Some("app-operator.example.com".into()),
                ..Default::default()
            },
            spec: Some(k8s_openapi::api::coordination::v1::LeaseSpec {
                holder_identity: Some("another-operator".into()),
                lease_duration_seconds: Some(15),
                acquire_time: Some(renew.clone()),
                renew_time: Some(renew),
                ..Default::default()
            }),
        };
        let leases: Api<Lease> = Api::namespaced(scene.client.clone(), LEASE_NAMESPACE);
        let _ = leases
            .delete("app-operator.example.com", &Default::default())
            .await;
        leases.create(&PostParams::default(), &lease).await.unwrap();
        let started = Instant::now();
        let operator = scene.operator(OPERATOR, None, &ELECTION);
        let holder = eventually(Duration::from_secs(40), "the lease taken", || async {
            lease_holder(&scene)
                .await
                .filter(|h| h != "another-operator")
        })
        .await;
        let took = started.elapsed();
        println!("renewTime {skew_secs:+} s from now: the lease taken after {took:?} by {holder}");
        assert!(
            (15..=19).contains(&took.as_secs()),
            "lease acquired after {took:?} (goal: 15–19 s, neither earlier nor never)"
        );
        no_panic(&operator);
        leader = Some(operator);
    }
    scene.create_my_apps(0, 1, 0).await;
    scene
        .converged(CONVERGED, "the new leader reconciles")
        .await;
    Aftermath {
        scene,
        writer: OPERATOR,
        operators: leader.into_iter().collect(),
    }
}

/// What the lease's holder identity contains when `operator` holds it.
fn holder_mark(operator: &OperatorProcess) -> String {
    format!("_{:08x}", operator.pid())
}

/// Two replicas with leader election: `chaos-replica-a` through a fault proxy, leading, and
/// `chaos-replica-b` standing by, ready. Mutated, the leader is [`SLOW_TO_STEP_DOWN`].
async fn proxied_leader_and_standby(
    scene: &Scene,
) -> (FaultProxy, OperatorProcess, OperatorProcess) {
    let (proxy, proxied) = through_proxy(scene, "chaos-replica-a").await;
    let flags = [&ELECTION[..], mutation(SLOW_TO_STEP_DOWN)].concat();
    let leader = scene.operator("chaos-replica-a", Some(&proxied), &flags);
    let leads = holder_mark(&leader);
    eventually(support::TIMEOUT, "replica a to lead", || async {
        lease_holder(scene).await.filter(|h| h.contains(&leads))
    })
    .await;
    let standby = scene.operator("chaos-replica-b", None, &ELECTION);
    standby.ready().await;
    (proxy, leader, standby)
}

/// A kubeconfig acting as `user` through a new fault proxy.
async fn through_proxy(scene: &Scene, user: &str) -> (FaultProxy, std::path::PathBuf) {
    proxied(scene, &scene.cluster.kubeconfig_as_pod(user), user).await
}

/// A copy of the kubeconfig `own`, named after `who`, whose server is a new fault proxy.
async fn proxied(scene: &Scene, own: &Path, who: &str) -> (FaultProxy, std::path::PathBuf) {
    let server = std::fs::read_to_string(own)
        .unwrap()
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: https://").map(str::to_owned))
        .unwrap();
    let proxy = FaultProxy::start(server.parse().unwrap()).await;
    let proxied = scene
        .cluster
        .layout
        .state_dir
        .join(format!("{who}-proxied.kubeconfig"));
    proxy.kubeconfig(own, &proxied);
    (proxy, proxied)
}

async fn a_blackhole_during_a_burst_frees_every_worker_and_converges_within_90_s() -> Aftermath {
    let scene = Scene::new("burst-blackhole", &[Mutation::NoKeepAlive]).await;
    let (proxy, proxied) = through_proxy(&scene, OPERATOR).await;
    let operator = scene.operator(OPERATOR, Some(&proxied), &[]);
    operator.ready().await;
    let burst = scene.create_my_apps(0, 100, 0);
    let outage = async {
        // The fault's moment and duration; what it left is checked after it heals.
        tokio::time::sleep(Duration::from_secs(2)).await;
        proxy.set(Fault::Blackhole);
        tokio::time::sleep(Duration::from_secs(30)).await;
        // The path heals for new connections only: those open through the outage stay dead, as
        // when a load balancer or the API server lost them meanwhile. The operator must find out
        // by itself (HTTP/2 pings) and reconnect.
        proxy.set(Fault::BlackholeOpen);
        Instant::now()
    };
    let ((), healed) = futures::join!(burst, outage);
    scene
        .converged(
            Duration::from_secs(90).saturating_sub(healed.elapsed()),
            "all converged ≤ 90 s after the blackhole ended",
        )
        .await;
    println!(
        "blackholed 30 s mid-burst: converged {:?} after heal",
        healed.elapsed()
    );
    let active = r#"controller_runtime_active_workers{controller="myapp"}"#;
    eventually(
        support::TIMEOUT,
        "no worker busy once converged",
        || async { (operator.metric(active).await? == 0.0).then_some(()) },
    )
    .await;
    Aftermath {
        scene,
        writer: OPERATOR,
        operators: vec![operator],
    }
}

async fn a_blackholed_leader_exits_within_12_s_and_never_writes_beside_its_successor() -> Aftermath
{
    let scene = Scene::new("leader-blackhole", &[]).await;
    let (leader_proxy, mut leader, standby) = proxied_leader_and_standby(&scene).await;

    let burst = scene.create_my_apps(0, 50, 0);
    let outage = async {
        // The fault's moment, in the middle of the burst.
        tokio::time::sleep(Duration::from_secs(2)).await;
        leader_proxy.set(Fault::Blackhole);
        let (exited, after) = exit(
            &mut leader,
            Duration::from_secs(25),
            "the blackholed leader (goal: exits ≤ 12 s)",
        )
        .await;
        // The rest of the outage's 25 s; what it left is checked after it heals.
        tokio::time::sleep(Duration::from_secs(25).saturating_sub(after)).await;
        leader_proxy.set(Fault::Pass);
        (exited, after)
    };
    let ((), (exited, after)) = futures::join!(burst, outage);
    println!("the blackholed leader exited ({exited}) {after:?} after the cut");
    assert!(
        !exited.success() && after.as_secs() <= 12,
        "old leader exited ({exited}) after {after:?} (goal: non-zero, ≤ 12 s)"
    );
    scene
        .converged(CONVERGED, "converged ≤ 60 s after the cut")
        .await;
    assert_one_writer_at_a_time(&scene);
    Aftermath {
        scene,
        writer: "chaos-replica-b",
        operators: vec![standby],
    }
}

async fn a_slow_api_server_keeps_the_lease_at_1_and_3_s_and_takes_it_away_cleanly_at_6_s()
-> Aftermath {
    let scene = Scene::new("delay", &[]).await;
    let (proxy, mut leader, standby) = proxied_leader_and_standby(&scene).await;
    let leads = holder_mark(&leader);
    scene.create_my_apps(0, 10, 0).await;
    scene
        .converged(support::TIMEOUT, "the first convergence")
        .await;

    // Every answer to the leader comes late; a renewal (a read and a write) takes twice that.
    for (late, image) in [(1, "nginx:1.28"), (3, "nginx:1.29")] {
        proxy.set(Fault::Delay(Duration::from_secs(late)));
        scene.set_images(0..10, image).await;
        let took = scene
            .converged(
                CONVERGED,
                &format!("converged ≤ 60 s with answers {late} s late"),
            )
            .await;
        // Up to two lease durations in all: a leader that missed a renewal would lose it.
        testkit::stays_for(
            Duration::from_secs(30).saturating_sub(took),
            &format!("answers {late} s late: the leader keeps the lease"),
            || async {
                let holder = lease_holder(&scene).await.unwrap_or_default();
                holder
                    .contains(&leads)
                    .then_some(())
                    .ok_or_else(|| format!("the leader lost the lease (holder {holder:?})"))
            },
        )
        .await;
        assert!(
            leader.exited().is_none(),
            "answers {late} s late: the leader exited (goal: keeps leading)"
        );
        println!("answers {late} s late: converged after {took:?}, the leader kept the lease");
    }

    proxy.set(Fault::Delay(Duration::from_secs(6)));
    let (exited, after) = exit(
        &mut leader,
        Duration::from_secs(40),
        "answers 6 s late: the leader (goal: steps down ≤ 20 s)",
    )
    .await;
    println!("answers 6 s late: the leader exited ({exited}) after {after:?}");
    assert!(
        !exited.success() && after <= Duration::from_secs(20),
        "answers 6 s late: the leader exited ({exited}) after {after:?} (goal: non-zero, ≤ 20 s: the renew deadline and one late answer)"
    );
    let log = leader.log();
    assert!(
        log.contains("could not renew within the renew deadline"),
        "the leader did not say why it stepped down:\n{log}"
    );
    scene.set_images(0..10, "nginx:1.30").await;
    scene
        .converged(CONVERGED, "converged ≤ 60 s under the standby")
        .await;
    assert_one_writer_at_a_time(&scene);
    Aftermath {
        scene,
        writer: "chaos-replica-b",
        operators: vec![standby, leader],
    }
}

async fn dead_watches_are_replaced_and_edits_applied_within_70_s() -> Aftermath {
    let scene = Scene::new("dead-watches", &[Mutation::NoKeepAlive]).await;
    let (proxy, proxied) = through_proxy(&scene, OPERATOR).await;
    let operator = scene.operator(OPERATOR, Some(&proxied), &[]);
    scene.create_my_apps(0, 1, 0).await;
    scene.create_app_cluster("watched", 10).await;
    scene
        .converged(support::TIMEOUT, "the first convergence")
        .await;
    let pods = PodCount::start(scene.api::<Pod>(), "app=watched").await;

    // Every connection open now (the watches among them) goes silent; new ones work.
    proxy.set(Fault::BlackholeOpen);
    scene
        .patch::<AppCluster>("watched", json!({ "spec": { "size": 20 } }))
        .await;
    scene
        .patch::<MyApp>("app-0", json!({ "spec": { "image": "nginx:1.28" } }))
        .await;
    let took = scene
        .converged(
            Duration::from_secs(70),
            "edits applied ≤ 70 s after the watches went silent",
        )
        .await;
    println!("dead watches: edits applied after {took:?}");
    assert!(
        pods.most() <= 20,
        "{} Pods at once for size 20 (goal: never more than size)",
        pods.most()
    );
    proxy.set(Fault::Pass);
    Aftermath {
        scene,
        writer: OPERATOR,
        operators: vec![operator],
    }
}

/// Creates MyApps `first..first + 300` and returns how long until everything converged.
async fn burst_of_300(scene: &Scene, first: usize, goal: &str, within: Duration) -> Duration {
    let started = Instant::now();
    scene.create_my_apps(first, 300, 0).await;
    scene
        .converged(within.saturating_sub(started.elapsed()), goal)
        .await;
    started.elapsed()
}

async fn throttled_by_priority_and_fairness_the_operator_still_converges() -> Aftermath {
    let scene = Scene::new("apf", &[Mutation::ThrottledIsPermanent]).await;
    let mut operator = scene.operator(OPERATOR, None, &[]);
    operator.ready().await;
    let unthrottled = burst_of_300(&scene, 0, "the unthrottled burst", support::TIMEOUT * 5).await;

    // The operator's requests get a priority level of one seat that rejects (429) what does not
    // fit, instead of queuing it.
    let limits = json!({
        "apiVersion": "v1", "kind": "List", "items": [
            { "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
              "metadata": { "name": "chaos-one-seat" },
              "spec": { "type": "Limited", "limited": {
                  "nominalConcurrencyShares": 1, "lendablePercent": 0,
                  "limitResponse": { "type": "Reject" } } } },
            { "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
              "metadata": { "name": "chaos-operator" },
              "spec": { "priorityLevelConfiguration": { "name": "chaos-one-seat" },
                  "matchingPrecedence": 100,
                  "rules": [{
                      "subjects": [{ "kind": "ServiceAccount", "serviceAccount": {
                          "name": "app-operator-controller-manager", "namespace": LEASE_NAMESPACE } }],
                      "resourceRules": [{ "verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                          "namespaces": ["*"], "clusterScope": true }] }] } },
        ]
    });
    let file = scene.cluster.layout.state_dir.join("apf.json");
    std::fs::write(&file, limits.to_string()).unwrap();
    scene
        .cluster
        .kubectl(&["apply", "-f", file.to_str().unwrap()]);
    let throttled = burst_of_300(
        &scene,
        300,
        "converged ≤ 3 × the unthrottled time",
        unthrottled * 3,
    )
    .await;
    let rejected = operator
        .metric(r#"rest_client_requests_total{method="PATCH",code="429"}"#)
        .await
        .unwrap_or(0.0)
        + operator
            .metric(r#"rest_client_requests_total{method="POST",code="429"}"#)
            .await
            .unwrap_or(0.0);
    println!(
        "300 MyApps: {unthrottled:?} unthrottled, {throttled:?} throttled; {rejected} writes answered 429"
    );
    assert!(
        rejected > 0.0,
        "no 429 in rest_client_requests_total: the throttle did not bite"
    );
    assert!(operator.exited().is_none(), "the operator stays up");
    Aftermath {
        scene,
        writer: OPERATOR,
        operators: vec![operator],
    }
}

/// Zombie writes: the leader's requests are held on the way (its answers still come) while ten
/// MyApps get a new image, so its applies of that image are sent but not delivered; it is then
/// paused (SIGSTOP: as a process stalled by its node), loses the lease, and its successor applies
/// that image and then a newer one. Only then are the held requests delivered, and the paused
/// leader resumed. Both replicas run as the operator's ServiceAccount under its own ClusterRole
/// and policies (config/default), each as the Pod it plays. The leader writes policy
/// (config/fencing/leader_writes_policy.yaml) must refuse every write of the deposed leader that
/// reaches the API server after its successor's first: none may change an object. Run with
/// `APP_OPERATOR_CHAOS_MUTATE=1`, the policy is left out (the mutation this row catches).
async fn a_deposed_leaders_held_writes_are_refused_once_its_successor_leads() -> Aftermath {
    let scene = Scene::new("zombie", &[]).await;
    let (old, new) = ("chaos-replica-a", "chaos-replica-b");
    let (proxy, proxied) = proxied(&scene, &scene.cluster.kubeconfig_as_pod(old), old).await;
    let mut leader = scene.operator(old, Some(&proxied), &ELECTION);
    let leads = holder_mark(&leader);
    eventually(support::TIMEOUT, "replica a to lead", || async {
        lease_holder(&scene).await.filter(|h| h.contains(&leads))
    })
    .await;
    let standby = scene.operator(new, None, &ELECTION);
    standby.ready().await;
    scene.create_my_apps(0, 10, 0).await;
    scene
        .converged(support::TIMEOUT, "the first convergence")
        .await;

    proxy.set(Fault::HoldRequests);
    scene.set_images(0..10, "nginx:1.28").await;
    // The leader saw the edits (its watches' answers pass) and its applies are on the way: its
    // workers wait on them.
    let active = r#"controller_runtime_active_workers{controller="myapp"}"#;
    eventually(support::TIMEOUT, "the leader's applies held", || async {
        (leader.metric(active).await? >= 1.0).then_some(())
    })
    .await;
    signal(&leader, Signal::SIGSTOP);
    let first_new = eventually(support::TIMEOUT, "the successor's first write", || async {
        scene
            .cluster
            .audit()
            .into_iter()
            .find(|e| e.pod == new && e.resource != "leases" && e.code < 300)
            .map(|e| e.at)
    })
    .await;
    scene.set_images(0..10, "nginx:1.29").await;
    scene
        .applied(CONVERGED, "the successor applied the newer image")
        .await;

    let released = Timestamp::now();
    proxy.set(Fault::Pass);
    let late = |scene: &Scene| -> Vec<local_cluster::audit::AuditEvent> {
        scene
            .cluster
            .audit()
            .into_iter()
            .filter(|e| e.pod == old && e.at >= first_new)
            .filter(|e| !matches!(e.resource.as_str(), "leases" | "events"))
            .collect()
    };
    eventually(support::TIMEOUT, "the held writes delivered", || async {
        late(&scene).iter().any(|e| e.at >= released).then_some(())
    })
    .await;
    signal(&leader, Signal::SIGCONT);
    let (exited, _) = exit(
        &mut leader,
        support::TIMEOUT,
        "the resumed old leader (goal: exits, its lease lost)",
    )
    .await;
    let show = |e: &local_cluster::audit::AuditEvent| {
        format!("{} {} {}: {}", e.verb, e.resource, e.name, e.code)
    };
    let late = late(&scene);
    let changed: Vec<_> = late.iter().filter(|e| e.code < 300).map(show).collect();
    let late: Vec<_> = late.iter().map(show).collect();
    println!(
        "the deposed leader's writes that arrived after its successor's first: {late:?}; it exited ({exited})"
    );
    assert!(
        changed.is_empty(),
        "{} stale writes of the deposed leader changed objects after its successor led: {changed:?}",
        changed.len()
    );
    assert!(!exited.success(), "the old leader exited {exited}");
    scene
        .converged(CONVERGED, "converged at the newer image")
        .await;
    Aftermath {
        scene,
        writer: new,
        operators: vec![standby],
    }
}

fn signal(operator: &OperatorProcess, signal: Signal) {
    kill(
        Pid::from_raw(i32::try_from(operator.pid()).unwrap()),
        signal,
    )
    .unwrap();
}
