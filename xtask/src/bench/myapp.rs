//! The MyApp rounds: N MyApps through the operator against two floors, the operator at rest,
//! its restart, and churn.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use app_operator::api::MyApp;
use app_operator::controllers::myapp;
use app_operator::reconcile::apply::controller_reference;
use futures::channel::mpsc;
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde::Serialize;

use super::Options;
use super::cluster::{delete_namespace, ensure_namespace, until_none, wait_for};
use super::cpu;
use super::plane::Plane;
use super::process::{Operator, RssParts};
use super::watch::{ChildPairs, MyAppsConverging, Series, Timeline, myapp_ready};

/// One operator pass and the two floor passes at the same N, back to back.
#[derive(Serialize)]
pub struct Pass {
    /// MyApps whose create the user had answered: how fast the user could create beside the
    /// operator.
    pub operator_created: Series,
    /// MyApps whose Deployment and Service exist.
    pub operator_children: Series,
    /// MyApps with observedGeneration == generation and Ready=True.
    pub operator_ready: Series,
    /// A plain client creating the same Deployments and Services (no MyApps).
    pub floor_children: Series,
    /// The user's creates in the fair floor pass.
    pub fair_created: Series,
    /// The fair floor: the minimum any MyApp operator needs, beside the same MyApp creates by the
    /// user: a Deployment create, a Service create and one status write per MyApp.
    pub fair_children: Series,
    pub fair_ready: Series,
    pub children_seconds: Option<f64>,
    pub ready_seconds: Option<f64>,
    pub floor_seconds: Option<f64>,
    pub fair_seconds: Option<f64>,
    pub fair_ready_seconds: Option<f64>,
    /// (a) over the fair floor's children: the headline.
    pub ratio_to_fair: Option<f64>,
    pub ratio_to_floor: Option<f64>,
    pub all_ready: bool,
    /// The operator's requests from the first create until 5 s after all were Ready, by method,
    /// divided by N.
    pub requests_per_myapp: BTreeMap<String, f64>,
    /// CPU milliseconds per MyApp over the same window, by process: the operator, the control
    /// plane's, the bench client's.
    pub cpu_ms_per_myapp: BTreeMap<String, f64>,
    /// The same over the fair floor pass (the operator is stopped then).
    pub fair_cpu_ms_per_myapp: BTreeMap<String, f64>,
}

impl Pass {
    /// How much slower the machine ran in the operator pass than in its fair floor's
    /// ([`cpu::slowdown`]).
    pub fn slowdown(&self) -> Option<f64> {
        cpu::slowdown(&self.cpu_ms_per_myapp, &self.fair_cpu_ms_per_myapp)
    }

    /// (a) / fair with that slowdown divided out: the operator's cost had both passes run at the
    /// same speed. A diagnostic beside the headline, which stays the plain ratio.
    pub fn ratio_to_fair_at_same_speed(&self) -> Option<f64> {
        ratio(self.ratio_to_fair, self.slowdown())
    }
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    a.zip(b).map(|(a, b)| a / b.max(0.001))
}

#[derive(Serialize)]
pub struct MyAppRound {
    pub n: usize,
    /// Operator and floors alternate `--repeat` times: on a few shared cores one pass is noisy.
    pub passes: Vec<Pass>,
    /// The pass with the median (a) / fair floor (of two middle ones, the higher); a pass that
    /// did not converge counts as the highest.
    pub median: usize,
    /// The operator at rest after its first pass.
    pub at_rest: AtRest,
    /// The operator restarted with the N MyApps converged (the largest N only).
    pub restart: Option<RestartRound>,
}

impl MyAppRound {
    /// The pass with the median ratio, the one reported.
    pub fn median(&self) -> Option<&Pass> {
        self.passes.get(self.median)
    }

    pub fn all_ready(&self) -> bool {
        self.passes.iter().all(|p| p.all_ready)
    }

    pub fn floors_converged(&self) -> bool {
        self.passes
            .iter()
            .all(|p| p.floor_seconds.is_some() && p.fair_ready_seconds.is_some())
    }
}

/// A restart of the operator with N converged MyApps: it should only list and watch again.
#[derive(Serialize)]
pub struct RestartRound {
    /// From the start of the new process until its `/readyz` answered 200.
    pub ready_seconds: f64,
    /// Until it was idle: no work queued or in progress and no request for 3 s.
    pub idle_seconds: f64,
    /// The new process's requests until it was idle.
    pub requests_by_method: BTreeMap<String, u64>,
    pub peak_rss_mib: f64,
}

impl RestartRound {
    pub fn writes(&self) -> u64 {
        writes(&self.requests_by_method)
    }
}

const WRITES: [&str; 4] = ["POST", "PUT", "PATCH", "DELETE"];

fn writes(requests: &BTreeMap<String, u64>) -> u64 {
    WRITES
        .iter()
        .filter_map(|method| requests.get(*method))
        .sum()
}

pub async fn myapp_round(
    plane: &mut Plane,
    operator: &mut Operator,
    n: usize,
    restart: bool,
    options: &Options,
) -> Result<MyAppRound> {
    let mut passes = Vec::new();
    let mut at_rest = None;
    let mut restarted = None;
    for pass in 0..options.repeat {
        let namespace = format!("{OPERATOR_NAMESPACE}{n}-{pass}");
        let measured = operator_pass(&plane.admin, operator, n, &namespace, options).await?;
        if at_rest.is_none() {
            at_rest = Some(steady_state(operator, options).await);
            if restart {
                restarted = Some(restart_round(operator).await?);
            }
        }
        // Stopped while the floors run (it would reconcile their MyApps and take CPU from
        // them), and before its own pass's objects go, so that no reconcile of a MyApp losing
        // its children competes with their deletion; resumed whatever happens.
        operator.pause()?;
        let floors = floor_passes(plane, n, pass, options).await;
        operator.resume()?;
        if plane.starts_anew() {
            // Its API server is gone: a new process on the new one, not timed.
            operator.restart().await?;
        } else {
            // It catches up on what it missed while stopped (its own namespace's deletion, the
            // floors' MyApps): that work belongs to no round's window.
            operator.until_idle(catch_up_within(n)).await?;
        }
        let (floor_children, fair, fair_cpu_ms_per_myapp) = floors?;
        let OperatorPass {
            timeline:
                Timeline {
                    created: operator_created,
                    children: operator_children,
                    ready: operator_ready,
                },
            requests_per_myapp,
            cpu_ms_per_myapp,
        } = measured;
        let Timeline {
            created: fair_created,
            children: fair_children,
            ready: fair_ready,
        } = fair;
        let children_seconds = operator_children.total(n);
        let floor_seconds = floor_children.total(n);
        let fair_seconds = fair_children.total(n);
        passes.push(Pass {
            ready_seconds: operator_ready.total(n),
            all_ready: operator_ready.points.len() >= n,
            ratio_to_fair: ratio(children_seconds, fair_seconds),
            ratio_to_floor: ratio(children_seconds, floor_seconds),
            fair_ready_seconds: fair_ready.total(n),
            children_seconds,
            floor_seconds,
            fair_seconds,
            operator_created,
            operator_children,
            operator_ready,
            floor_children,
            fair_created,
            fair_children,
            fair_ready,
            requests_per_myapp,
            cpu_ms_per_myapp,
            fair_cpu_ms_per_myapp,
        });
    }
    let mut order: Vec<usize> = (0..passes.len()).collect();
    let by_ratio = |i: &usize| {
        passes
            .get(*i)
            .and_then(|p| p.ratio_to_fair)
            .unwrap_or(f64::INFINITY)
    };
    order.sort_by(|a, b| by_ratio(a).total_cmp(&by_ratio(b)));
    Ok(MyAppRound {
        n,
        median: order.get(passes.len() / 2).copied().unwrap_or(0),
        passes,
        at_rest: at_rest.unwrap_or_default(),
        restart: restarted,
    })
}

/// How long an operator may take to become idle after a restart.
const IDLE_WITHIN: Duration = Duration::from_secs(300);

/// How long the operator may take to catch up after the floors on a shared plane (its own
/// namespace's deletion included): it grows with N.
fn catch_up_within(n: usize) -> Duration {
    convergence_timeout(n).max(Duration::from_secs(600))
}

/// The prefixes of the MyApp rounds' namespaces: the operator's, the floor's, the fair floor's.
const OPERATOR_NAMESPACE: &str = "bench-myapp-";
const FLOOR_NAMESPACE: &str = "bench-floor-";
const FAIR_NAMESPACE: &str = "bench-fair-";

/// Deletes whatever MyApp round namespaces exist (a round that failed left its own).
pub async fn delete_round_namespaces(admin: &Client) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    for namespace in namespaces.list_metadata(&Default::default()).await? {
        let name = namespace.metadata.name.unwrap_or_default();
        if [OPERATOR_NAMESPACE, FLOOR_NAMESPACE, FAIR_NAMESPACE]
            .iter()
            .any(|prefix| name.starts_with(prefix))
        {
            delete_namespace(admin, &name).await?;
        }
    }
    Ok(())
}

/// The operator pass's objects cleared; the fair floor (with the CPU per MyApp its pass took, by
/// process), then the floor, each in a namespace of its own and cleared after it. The fair floor
/// comes first, next to the operator pass it is the headline's divisor for: this machine's
/// speed drifts from minute to minute (the same fair floor pass has taken 37 to 68 s).
async fn floor_passes(
    plane: &mut Plane,
    n: usize,
    pass: usize,
    options: &Options,
) -> Result<(Series, Timeline, BTreeMap<String, f64>)> {
    plane.clear().await?;
    let namespace = format!("{FAIR_NAMESPACE}{n}-{pass}");
    let cpu_before = cpu::sample();
    let fair = fair_floor_pass(&plane.admin, &plane.floor, n, &namespace, options).await?;
    let fair_cpu = cpu::per_myapp_ms(&cpu_before, &cpu::sample(), n);
    plane.clear().await?;
    let namespace = format!("{FLOOR_NAMESPACE}{n}-{pass}");
    let floor_children = floor_pass(&plane.admin, &plane.floor, n, &namespace, options).await?;
    plane.clear().await?;
    Ok((floor_children, fair, fair_cpu))
}

pub fn convergence_timeout(n: usize) -> Duration {
    Duration::from_secs(120 + u64::try_from(n).unwrap_or(u64::MAX) / 2)
}

/// What the operator pass measured.
struct OperatorPass {
    timeline: Timeline,
    requests_per_myapp: BTreeMap<String, f64>,
    cpu_ms_per_myapp: BTreeMap<String, f64>,
}

/// What the operator's own CPU is reported under beside the control plane's processes.
pub const OPERATOR_CPU: &str = "operator";

/// N MyApps created at the client concurrency; returns when each was created, got its Deployment
/// and Service, and was Ready, and the operator's requests and every process's CPU per MyApp
/// until 5 s after the last was.
async fn operator_pass(
    admin: &Client,
    operator: &Operator,
    n: usize,
    namespace: &str,
    options: &Options,
) -> Result<OperatorPass> {
    ensure_namespace(admin, namespace).await?;
    let converging = MyAppsConverging::start(admin, namespace);
    let apps: Api<MyApp> = Api::namespaced(admin.clone(), namespace);
    let before = operator.requests();
    let (cpu_before, operator_cpu_before) = (cpu::sample(), operator.scrape().cpu_seconds());
    let created = create_myapps(&apps, n, options.concurrency, None, converging.since()).await?;
    let timeline = converging.wait(created, n, convergence_timeout(n)).await;
    // The last status writes land after the MyApps read Ready.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let mut cpu_ms_per_myapp = cpu::per_myapp_ms(&cpu_before, &cpu::sample(), n);
    let operator_cpu = operator.scrape().cpu_seconds() - operator_cpu_before;
    cpu_ms_per_myapp.insert(OPERATOR_CPU.to_owned(), operator_cpu * 1000.0 / n as f64);
    let after = operator.requests();
    let requests_per_myapp = after
        .iter()
        .map(|(method, count)| {
            let earlier = before.get(method).copied().unwrap_or(0);
            (
                method.clone(),
                count.saturating_sub(earlier) as f64 / n as f64,
            )
        })
        .collect();
    Ok(OperatorPass {
        timeline,
        requests_per_myapp,
        cpu_ms_per_myapp,
    })
}

/// Creates the MyApps `app-0` … `app-{n-1}` at the client concurrency, sending each one created
/// to `created`; returns when each create was answered, in seconds since `since`.
async fn create_myapps(
    apps: &Api<MyApp>,
    n: usize,
    concurrency: usize,
    created: Option<mpsc::UnboundedSender<MyApp>>,
    since: Instant,
) -> Result<Series> {
    let answered = stream::iter(0..n)
        .map(|i| {
            let (apps, created) = (apps.clone(), created.clone());
            async move {
                let app = apps
                    .create(&PostParams::default(), &new_myapp(&format!("app-{i}"))?)
                    .await?;
                let answered = since.elapsed().as_secs_f64();
                if let Some(created) = created {
                    created.unbounded_send(app)?;
                }
                anyhow::Ok(answered)
            }
        })
        .buffer_unordered(concurrency)
        .try_collect::<Vec<f64>>()
        .await?;
    Ok(Series::from_times(answered))
}

pub fn new_myapp(name: &str) -> Result<MyApp> {
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "example.com/v1", "kind": "MyApp",
        "metadata": { "name": name },
        "spec": { "replicas": 1, "image": "nginx:1.27" }
    }))?)
}

/// `churn_cycles` times: `churn_size` MyApps created, all Ready, all deleted and gone; the
/// operator's RSS 5 s after each cycle.
pub async fn churn_round(
    admin: &Client,
    operator: &Operator,
    options: &Options,
) -> Result<ChurnRound> {
    let namespace = "bench-churn";
    ensure_namespace(admin, namespace).await?;
    let apps: Api<MyApp> = Api::namespaced(admin.clone(), namespace);
    let mut after_cycle = Vec::with_capacity(options.churn_cycles);
    for cycle in 1..=options.churn_cycles {
        create_myapps(
            &apps,
            options.churn_size,
            options.concurrency,
            None,
            Instant::now(),
        )
        .await?;
        let ready = wait_for(convergence_timeout(options.churn_size), || async {
            let list = apps.list(&ListParams::default()).await.ok()?;
            (list.items.iter().filter(|a| myapp_ready(a)).count() >= options.churn_size)
                .then_some(())
        })
        .await;
        if ready.is_none() {
            bail!("churn cycle {cycle}: the MyApps did not all become Ready");
        }
        apps.delete_collection(&DeleteParams::default(), &ListParams::default())
            .await?;
        let gone = until_none(
            &apps,
            &ListParams::default(),
            convergence_timeout(options.churn_size),
        )
        .await;
        if gone.is_none() {
            bail!("churn cycle {cycle}: the MyApps were not all deleted");
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
        let rss = operator.rss_mib();
        eprintln!("bench: churn cycle {cycle}: RSS {rss:.1} MiB");
        after_cycle.push(rss);
    }
    delete_namespace(admin, namespace).await?;
    Ok(ChurnRound {
        size: options.churn_size,
        rss_mib: after_cycle,
    })
}

/// MyApps created and deleted again and again: the operator's memory after each cycle. State kept
/// per object (backoff, remembered statuses, expectations) must go with the object.
#[derive(Serialize)]
pub struct ChurnRound {
    pub size: usize,
    /// Settled RSS after each cycle's deletions, MiB.
    pub rss_mib: Vec<f64>,
}

impl ChurnRound {
    /// RSS after the last cycle over RSS after cycle 2 (the first cycles warm the allocator).
    pub fn growth(&self) -> Option<f64> {
        let second = *self.rss_mib.get(1)?;
        let last = *self.rss_mib.last()?;
        (second > 0.0).then(|| last / second)
    }
}

/// Nothing changes, so the operator should not write at all: its writes and reads over the
/// steady window, and its RSS at the end of it.
async fn steady_state(operator: &Operator, options: &Options) -> AtRest {
    let before = operator.requests();
    tokio::time::sleep(options.steady).await;
    let after = operator.requests();
    let delta: BTreeMap<String, u64> = after
        .iter()
        .map(|(method, count)| {
            let earlier = before.get(method).copied().unwrap_or(0);
            (method.clone(), count.saturating_sub(earlier))
        })
        .collect();
    AtRest {
        writes: writes(&delta),
        reads: delta.get("GET").copied().unwrap_or(0),
        rss_mib: operator.rss_mib(),
        rss_parts: operator.rss_parts(),
    }
}

/// Requests over the steady window and the RSS at its end.
#[derive(Default, Serialize)]
pub struct AtRest {
    pub writes: u64,
    pub reads: u64,
    pub rss_mib: f64,
    /// The same RSS split: allocated and file-backed pages (read from `/proc`).
    pub rss_parts: Option<RssParts>,
}

/// Restarts the converged operator and waits until it is idle.
async fn restart_round(operator: &mut Operator) -> Result<RestartRound> {
    eprintln!("bench: restarting the operator");
    operator.take_peak();
    let ready_seconds = operator.restart().await?;
    let started = Instant::now() - Duration::from_secs_f64(ready_seconds);
    let (last, last_change) = operator.until_idle(IDLE_WITHIN).await?;
    Ok(RestartRound {
        ready_seconds,
        idle_seconds: (last_change - started).as_secs_f64().max(ready_seconds),
        requests_by_method: last,
        peak_rss_mib: operator.take_peak(),
    })
}

/// The floor: the same Deployments and Services from a plain client with the operator's
/// identity; returns when each pair existed.
async fn floor_pass(
    admin: &Client,
    floor: &Client,
    n: usize,
    namespace: &str,
    options: &Options,
) -> Result<Series> {
    ensure_namespace(admin, namespace).await?;
    let children = ChildPairs::start(admin, namespace, Instant::now());
    stream::iter(0..n)
        .map(|i| async move {
            let app = new_myapp(&format!("app-{i}"))?;
            create_children(floor, namespace, &app, None).await
        })
        .buffer_unordered(options.concurrency)
        .try_collect::<Vec<()>>()
        .await?;
    wait_for(convergence_timeout(n), || async {
        (children.times().len() >= n).then_some(())
    })
    .await;
    Ok(Series::from_times(children.times()))
}

/// The fair floor: the user creates the MyApps as in the operator pass while, as each is created,
/// a plain client with the operator's identity creates its Deployment and Service (owned by it)
/// and writes its status once, at the same concurrency as the operator's workers, with field
/// validation off as the operator's applies have it. Returns the pass's timeline.
async fn fair_floor_pass(
    admin: &Client,
    floor: &Client,
    n: usize,
    namespace: &str,
    options: &Options,
) -> Result<Timeline> {
    ensure_namespace(admin, namespace).await?;
    let converging = MyAppsConverging::start(admin, namespace);
    let (created, to_build) = mpsc::unbounded();
    let status_api: Api<MyApp> = Api::namespaced(floor.clone(), namespace);
    let apps: Api<MyApp> = Api::namespaced(admin.clone(), namespace);
    let user = create_myapps(
        &apps,
        n,
        options.concurrency,
        Some(created),
        converging.since(),
    );
    let operator = to_build
        .map(|app: MyApp| {
            let status_api = status_api.clone();
            async move {
                create_children(floor, namespace, &app, controller_reference(&app)).await?;
                let status = serde_json::json!({
                    "apiVersion": "example.com/v1", "kind": "MyApp",
                    "status": {
                        "observedGeneration": app.metadata.generation,
                        "conditions": [{
                            "type": "Ready", "status": "True", "reason": "Available",
                            "message": "", "lastTransitionTime": k8s_openapi::jiff::Timestamp::now(),
                        }],
                    },
                });
                status_api
                    .patch_status(
                        &app.name_any(),
                        &PatchParams::apply("bench-fair-floor")
                            .force()
                            .validation_ignore(),
                        &Patch::Apply(&status),
                    )
                    .await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(options.concurrency)
        .try_collect::<Vec<()>>();
    let (created, _) = futures::try_join!(user, operator)?;
    Ok(converging.wait(created, n, convergence_timeout(n)).await)
}

/// Creates the Deployment and Service the operator would build for `app` (owned by `owner`,
/// when given).
async fn create_children(
    client: &Client,
    namespace: &str,
    app: &MyApp,
    owner: Option<OwnerReference>,
) -> Result<()> {
    let mut app = app.clone();
    app.metadata.namespace = Some(namespace.to_owned());
    let reference = owner.clone().unwrap_or_default();
    let mut deployment = myapp::deployment(&app, reference.clone());
    let mut service = myapp::service(&app, reference);
    if owner.is_none() {
        deployment.metadata.owner_references = None;
        service.metadata.owner_references = None;
    }
    Api::<Deployment>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &deployment)
        .await?;
    Api::<Service>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &service)
        .await?;
    Ok(())
}
