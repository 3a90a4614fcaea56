//! `make bench`: how fast the operator converges and what it costs, against the floor of a plain
//! client doing the same writes, on the local control plane. The operator runs as a user would
//! deploy it: its own process, under its ServiceAccount and ClusterRole (not `system:masters`,
//! which API Priority and Fairness exempts), with its default settings.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use app_operator::api::{AppCluster, MyApp};
use app_operator::manager::served_port;
use app_operator::telemetry::metrics::requests_by_method;
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;

/// The operator's own defaults, stated in the report.
const OPERATOR_CONCURRENCY: &str =
    "10 reconciles per controller (--max-concurrent-reconciles default)";

pub struct Options {
    pub sizes: Vec<usize>,
    pub concurrency: usize,
    /// Operator/floor pairs per N.
    pub repeat: usize,
    pub appcluster_size: i32,
    pub steady: Duration,
    /// Create/delete cycles of the churn round (0 skips it), of `churn_size` MyApps each.
    pub churn_cycles: usize,
    pub churn_size: usize,
    pub output: PathBuf,
    pub kubeconfig: PathBuf,
    pub operator_binary: PathBuf,
}

/// Convergence over time: seconds since the first create, and how many objects had converged.
#[derive(Serialize, Clone, Default)]
pub struct Series {
    pub points: Vec<(f64, usize)>,
}

impl Series {
    fn from_times(mut times: Vec<f64>) -> Series {
        times.sort_by(f64::total_cmp);
        Series {
            points: times
                .into_iter()
                .enumerate()
                .map(|(i, t)| (t, i + 1))
                .collect(),
        }
    }

    /// When the last object converged (None: not all did).
    fn total(&self, expected: usize) -> Option<f64> {
        (self.points.len() >= expected).then(|| self.points.last().map_or(0.0, |p| p.0))
    }
}

/// One operator pass and one floor pass at the same N, back to back.
#[derive(Serialize)]
pub struct Pass {
    /// MyApps whose Deployment and Service exist.
    pub operator_children: Series,
    /// MyApps with observedGeneration == generation and Ready=True.
    pub operator_ready: Series,
    /// The plain client's Deployment + Service pairs.
    pub floor_children: Series,
    pub children_seconds: Option<f64>,
    pub ready_seconds: Option<f64>,
    pub floor_seconds: Option<f64>,
    pub ratio_to_floor: Option<f64>,
    pub all_ready: bool,
    /// The operator's requests from the first create until 5 s after all were Ready, by method,
    /// divided by N.
    pub requests_per_myapp: BTreeMap<String, f64>,
}

impl Pass {
    fn new(
        n: usize,
        operator_children: Series,
        operator_ready: Series,
        floor_children: Series,
        requests_per_myapp: BTreeMap<String, f64>,
    ) -> Pass {
        let children_seconds = operator_children.total(n);
        let floor_seconds = floor_children.total(n);
        Pass {
            ready_seconds: operator_ready.total(n),
            all_ready: operator_ready.points.len() >= n,
            ratio_to_floor: children_seconds
                .zip(floor_seconds)
                .map(|(a, f)| a / f.max(0.001)),
            children_seconds,
            floor_seconds,
            operator_children,
            operator_ready,
            floor_children,
            requests_per_myapp,
        }
    }
}

#[derive(Serialize)]
pub struct MyAppRound {
    pub n: usize,
    /// Operator and floor alternate `--repeat` times: on a few shared cores one pair is noisy.
    pub passes: Vec<Pass>,
    /// The pass with the median (a) / floor (of two middle ones, the higher); a pass that did
    /// not converge counts as the highest.
    pub median: usize,
    pub steady_writes: u64,
    pub steady_reads: u64,
    pub settled_rss_mib: f64,
}

impl MyAppRound {
    fn new(
        n: usize,
        passes: Vec<Pass>,
        steady_writes: u64,
        steady_reads: u64,
        settled_rss_mib: f64,
    ) -> MyAppRound {
        let mut order: Vec<usize> = (0..passes.len()).collect();
        let ratio = |i: &usize| {
            passes
                .get(*i)
                .and_then(|p| p.ratio_to_floor)
                .unwrap_or(f64::INFINITY)
        };
        order.sort_by(|a, b| ratio(a).total_cmp(&ratio(b)));
        MyAppRound {
            n,
            median: order.get(passes.len() / 2).copied().unwrap_or(0),
            passes,
            steady_writes,
            steady_reads,
            settled_rss_mib,
        }
    }

    /// The pass with the median ratio, the one reported.
    pub fn median(&self) -> Option<&Pass> {
        self.passes.get(self.median)
    }

    pub fn all_ready(&self) -> bool {
        self.passes.iter().all(|p| p.all_ready)
    }

    pub fn floor_converged(&self) -> bool {
        self.passes.iter().all(|p| p.floor_seconds.is_some())
    }
}

#[derive(Serialize)]
pub struct AppClusterRound {
    pub size: i32,
    pub operator_ready: Series,
    pub floor_ready: Series,
    pub operator_seconds: Option<f64>,
    pub floor_seconds: Option<f64>,
    pub ratio_to_floor: Option<f64>,
    pub most_pods_at_once: usize,
}

#[derive(Serialize)]
pub struct Report {
    pub machine: String,
    pub command: String,
    pub operator_settings: String,
    pub client_concurrency: usize,
    pub repeat: usize,
    pub myapp: Vec<MyAppRound>,
    pub appcluster: Option<AppClusterRound>,
    pub churn: Option<ChurnRound>,
    pub peak_rss_mib: f64,
    pub cpu_seconds: f64,
    pub requests_by_method: BTreeMap<String, u64>,
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

/// The operator under test, stopped (SIGTERM via kill) when dropped.
struct Operator {
    child: Child,
    metrics: u16,
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Operator {
    /// Every sample of the metrics endpoint, as `series -> value`.
    fn metrics(&self) -> HashMap<String, f64> {
        let Some(text) = crate::http_get(&format!("127.0.0.1:{}", self.metrics), "/metrics") else {
            return HashMap::new();
        };
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let (series, value) = l.rsplit_once(' ')?;
                Some((series.to_owned(), value.parse().ok()?))
            })
            .collect()
    }

    fn requests(&self) -> BTreeMap<String, u64> {
        let text = crate::http_get(&format!("127.0.0.1:{}", self.metrics), "/metrics");
        requests_by_method(&text.unwrap_or_default())
    }
}

pub async fn run(options: &Options, tools: &local_cluster::Tools) -> Result<Report> {
    std::fs::create_dir_all(&options.output)?;
    let admin = local_cluster::admin_client(&options.kubeconfig).await?;
    install_crds(&admin).await?;
    let identity = operator_identity(&admin, tools, options).await?;
    let operator = start_operator(options, &identity)?;
    let floor = client_from(&identity).await?;

    // Peak RSS, sampled through the whole run.
    let peak = Arc::new(Mutex::new(0.0_f64));
    let sampler = {
        let (peak, port) = (peak.clone(), operator.metrics);
        tokio::spawn(async move {
            loop {
                let rss = tokio::task::spawn_blocking(move || rss_mib(port))
                    .await
                    .unwrap_or(0.0);
                {
                    let mut max = peak.lock().unwrap_or_else(|p| p.into_inner());
                    *max = max.max(rss);
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
    };

    let mut myapp = Vec::new();
    for &n in &options.sizes {
        eprintln!("bench: {n} MyApps (operator), then {n} Deployments + Services (floor)");
        myapp.push(myapp_round(&admin, &floor, &operator, n, options).await?);
    }
    let appcluster = if options.appcluster_size > 0 {
        eprintln!(
            "bench: AppCluster 0 -> {} (operator), then {} Pods (floor)",
            options.appcluster_size, options.appcluster_size
        );
        Some(appcluster_round(&admin, &floor, options).await?)
    } else {
        None
    };
    let churn = if options.churn_cycles > 0 {
        eprintln!(
            "bench: churn, {} cycles of {} MyApps created and deleted",
            options.churn_cycles, options.churn_size
        );
        Some(churn_round(&admin, &operator, options).await?)
    } else {
        None
    };
    sampler.abort();
    let cpu_seconds = operator
        .metrics()
        .get("process_cpu_seconds_total")
        .copied()
        .unwrap_or(0.0);
    let requests_by_method = operator.requests();
    let peak_rss_mib = *peak.lock().unwrap_or_else(|p| p.into_inner());
    Ok(Report {
        machine: machine(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        operator_settings: OPERATOR_CONCURRENCY.to_owned(),
        client_concurrency: options.concurrency,
        repeat: options.repeat,
        myapp,
        appcluster,
        churn,
        peak_rss_mib,
        cpu_seconds,
        requests_by_method,
    })
}

/// The operator's resident memory, from its metrics endpoint.
fn rss_mib(port: u16) -> f64 {
    let text = crate::http_get(&format!("127.0.0.1:{port}"), "/metrics").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("process_resident_memory_bytes "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0.0, |bytes| bytes / 1024.0 / 1024.0)
}

fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .next()
                .map(|l| l.split_whitespace().nth(1).unwrap_or("0").to_owned())
        })
        .and_then(|kib| kib.parse::<u64>().ok())
        .map_or(0, |kib| kib / 1024 / 1024);
    format!("{cpus} cores, {memory} GiB RAM, Linux")
}

async fn install_crds(admin: &Client) -> Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(admin.clone());
    for crd in app_operator::api::crds() {
        let name = crd.name_any();
        crds.patch(
            &name,
            &PatchParams::apply("app-operator-bench").force(),
            &Patch::Apply(&crd),
        )
        .await?;
        wait_for(Duration::from_secs(60), || async {
            let status = crds.get(&name).await.ok()?.status?;
            status
                .conditions?
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
                .then_some(())
        })
        .await
        .context("CRDs not Established")?;
    }
    Ok(())
}

/// The operator's ServiceAccount with the ClusterRole of config/rbac, and a kubeconfig for it.
async fn operator_identity(
    admin: &Client,
    tools: &local_cluster::Tools,
    options: &Options,
) -> Result<PathBuf> {
    let namespace = "app-operator-bench";
    ensure_namespace(admin, namespace).await?;
    let kubectl = |args: &[&str]| -> Result<()> {
        let status = Command::new(tools.bin("kubectl"))
            .args(args)
            .env("KUBECONFIG", &options.kubeconfig)
            .stdout(Stdio::null())
            .status()?;
        if !status.success() {
            bail!("kubectl {} failed", args.join(" "));
        }
        Ok(())
    };
    kubectl(&[
        "apply",
        "-f",
        &crate::repo()
            .join("config/rbac/role.yaml")
            .display()
            .to_string(),
    ])?;
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), namespace);
    let account: ServiceAccount =
        serde_json::from_value(serde_json::json!({ "metadata": { "name": "app-operator" } }))?;
    accounts
        .patch(
            "app-operator",
            &PatchParams::apply("app-operator-bench").force(),
            &Patch::Apply(&account),
        )
        .await?;
    let _ = Command::new(tools.bin("kubectl"))
        .args([
            "delete",
            "clusterrolebinding",
            "app-operator-bench",
            "--ignore-not-found",
        ])
        .env("KUBECONFIG", &options.kubeconfig)
        .stdout(Stdio::null())
        .status();
    kubectl(&[
        "create",
        "clusterrolebinding",
        "app-operator-bench",
        "--clusterrole=manager-role",
        "--serviceaccount=app-operator-bench:app-operator",
    ])?;
    let request = serde_json::json!({ "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": { "expirationSeconds": 86400 } });
    let token: k8s_openapi::api::authentication::v1::TokenRequest = accounts
        .create_subresource("token", "app-operator", &PostParams::default(), &request)
        .await?;
    let token = token.status.map(|s| s.token).unwrap_or_default();
    let admin_config = kube::config::Kubeconfig::read_from(&options.kubeconfig)?;
    let cluster = admin_config
        .clusters
        .first()
        .and_then(|c| c.cluster.clone())
        .context("no cluster in the kubeconfig")?;
    let path = options.output.join("operator.kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority-data: {}\nusers:\n- name: app-operator\n  user:\n    token: {token}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: app-operator\ncurrent-context: c\n",
            cluster.server.unwrap_or_default(),
            cluster.certificate_authority_data.unwrap_or_default(),
        ),
    )?;
    Ok(path)
}

async fn client_from(kubeconfig: &Path) -> Result<Client> {
    Ok(local_cluster::admin_client(kubeconfig).await?)
}

fn start_operator(options: &Options, kubeconfig: &Path) -> Result<Operator> {
    let log_path = options.output.join("operator.log");
    let child = Command::new(&options.operator_binary)
        .args([
            "run",
            "--log-format=json",
            "--log-level=warn,app_operator::manager::server=info",
        ])
        .args([
            "--metrics-bind-address=127.0.0.1:0",
            "--health-probe-bind-address=127.0.0.1:0",
        ])
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path)?)
        .spawn()
        .with_context(|| format!("starting {}", options.operator_binary.display()))?;
    let mut operator = Operator { child, metrics: 0 };
    // The operator picks free ports itself and logs them: ports chosen here could be taken twice.
    let served = |server: &str| -> Option<u16> {
        served_port(&std::fs::read_to_string(&log_path).ok()?, server)
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let (Some(health), Some(metrics)) = (served("health probes"), served("metrics"))
            && crate::http_get(&format!("127.0.0.1:{health}"), "/readyz").is_some()
        {
            operator.metrics = metrics;
            return Ok(operator);
        }
        if operator.child.try_wait()?.is_some() || Instant::now() > deadline {
            bail!(
                "the operator did not become ready; see {}",
                log_path.display()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

async fn ensure_namespace(admin: &Client, name: &str) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    let namespace: Namespace =
        serde_json::from_value(serde_json::json!({ "metadata": { "name": name } }))?;
    namespaces
        .patch(
            name,
            &PatchParams::apply("app-operator-bench").force(),
            &Patch::Apply(&namespace),
        )
        .await?;
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), name);
    wait_for(Duration::from_secs(60), || async {
        accounts.get_opt("default").await.ok().flatten()
    })
    .await
    .context("default ServiceAccount")?;
    Ok(())
}

async fn delete_namespace(admin: &Client, name: &str) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    let _ = namespaces.delete(name, &DeleteParams::background()).await;
    wait_for(Duration::from_secs(600), || async {
        namespaces.get_opt(name).await.ok()?.is_none().then_some(())
    })
    .await
    .with_context(|| format!("namespace {name} was not deleted"))
}

async fn wait_for<T, F, Fut>(timeout: Duration, mut probe: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = probe().await {
            return Some(value);
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Records, per object name, the first time `converged` holds for it (seconds since `start`).
fn record<K>(
    api: Api<K>,
    start: Instant,
    converged: fn(&K) -> bool,
) -> (
    Arc<Mutex<HashMap<String, f64>>>,
    tokio::task::JoinHandle<()>,
)
where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let seen = Arc::new(Mutex::new(HashMap::new()));
    let task = {
        let seen = seen.clone();
        tokio::spawn(async move {
            let events = watcher(api, watcher::Config::default())
                .default_backoff()
                .applied_objects();
            futures::pin_mut!(events);
            while let Some(Ok(object)) = events.next().await {
                if converged(&object) {
                    let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
                    seen.entry(object.name_any())
                        .or_insert_with(|| start.elapsed().as_secs_f64());
                }
            }
        })
    };
    (seen, task)
}

fn times(seen: &Mutex<HashMap<String, f64>>) -> HashMap<String, f64> {
    seen.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

fn myapp_ready(app: &MyApp) -> bool {
    app.status.as_ref().is_some_and(|s| {
        s.observed_generation == app.metadata.generation
            && s.conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
    })
}

/// For each name present in both maps, the later of the two times.
fn both(a: &HashMap<String, f64>, b: &HashMap<String, f64>) -> Vec<f64> {
    a.iter()
        .filter_map(|(name, t)| Some(t.max(*b.get(name)?)))
        .collect()
}

async fn myapp_round(
    admin: &Client,
    floor: &Client,
    operator: &Operator,
    n: usize,
    options: &Options,
) -> Result<MyAppRound> {
    let mut passes = Vec::new();
    let mut steady = None;
    for pass in 0..options.repeat {
        let namespace = format!("bench-myapp-{n}-{pass}");
        let (operator_children, operator_ready, requests_per_myapp) =
            operator_pass(admin, operator, n, &namespace, options).await?;
        if steady.is_none() {
            steady = Some(steady_state(operator, options).await);
        }
        delete_namespace(admin, &namespace).await?;
        let namespace = format!("bench-floor-{n}-{pass}");
        let floor_children = floor_pass(admin, floor, n, &namespace, options).await?;
        delete_namespace(admin, &namespace).await?;
        passes.push(Pass::new(
            n,
            operator_children,
            operator_ready,
            floor_children,
            requests_per_myapp,
        ));
    }
    let (steady_writes, steady_reads, settled_rss_mib) = steady.unwrap_or_default();
    Ok(MyAppRound::new(
        n,
        passes,
        steady_writes,
        steady_reads,
        settled_rss_mib,
    ))
}

fn convergence_timeout(n: usize) -> Duration {
    Duration::from_secs(120 + u64::try_from(n).unwrap_or(u64::MAX) / 2)
}

/// N MyApps created at the client concurrency; returns when each got its Deployment and Service,
/// when each was Ready, and the operator's requests per MyApp until 5 s after the last was.
async fn operator_pass(
    admin: &Client,
    operator: &Operator,
    n: usize,
    namespace: &str,
    options: &Options,
) -> Result<(Series, Series, BTreeMap<String, f64>)> {
    ensure_namespace(admin, namespace).await?;
    let start = Instant::now();
    let (deployments, d_task) = record(
        Api::<Deployment>::namespaced(admin.clone(), namespace),
        start,
        |_| true,
    );
    let (services, s_task) = record(
        Api::<Service>::namespaced(admin.clone(), namespace),
        start,
        |_| true,
    );
    let (ready, r_task) = record(
        Api::<MyApp>::namespaced(admin.clone(), namespace),
        start,
        myapp_ready,
    );
    let apps: Api<MyApp> = Api::namespaced(admin.clone(), namespace);
    let before = operator.requests();
    create_myapps(&apps, n, options.concurrency).await?;
    wait_for(convergence_timeout(n), || async {
        (times(&ready).len() >= n).then_some(())
    })
    .await;
    let (d, s, r) = (times(&deployments), times(&services), times(&ready));
    for task in [d_task, s_task, r_task] {
        task.abort();
    }
    // The last status writes land after the MyApps read Ready.
    tokio::time::sleep(Duration::from_secs(5)).await;
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
    Ok((
        Series::from_times(both(&d, &s)),
        Series::from_times(r.values().copied().collect()),
        requests_per_myapp,
    ))
}

/// Creates the MyApps `app-0` … `app-{n-1}` at the client concurrency.
async fn create_myapps(apps: &Api<MyApp>, n: usize, concurrency: usize) -> Result<()> {
    stream::iter(0..n)
        .map(|i| {
            let apps = apps.clone();
            async move {
                let app: MyApp = serde_json::from_value(serde_json::json!({
                    "apiVersion": "example.com/v1", "kind": "MyApp",
                    "metadata": { "name": format!("app-{i}") },
                    "spec": { "replicas": 1, "image": "nginx:1.27" }
                }))?;
                apps.create(&PostParams::default(), &app).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(concurrency)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// `churn_cycles` times: `churn_size` MyApps created, all Ready, all deleted and gone; the
/// operator's RSS 5 s after each cycle.
async fn churn_round(admin: &Client, operator: &Operator, options: &Options) -> Result<ChurnRound> {
    let namespace = "bench-churn";
    ensure_namespace(admin, namespace).await?;
    let apps: Api<MyApp> = Api::namespaced(admin.clone(), namespace);
    let mut after_cycle = Vec::with_capacity(options.churn_cycles);
    for cycle in 1..=options.churn_cycles {
        create_myapps(&apps, options.churn_size, options.concurrency).await?;
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
        let gone = wait_for(convergence_timeout(options.churn_size), || async {
            apps.list(&ListParams::default())
                .await
                .ok()?
                .items
                .is_empty()
                .then_some(())
        })
        .await;
        if gone.is_none() {
            bail!("churn cycle {cycle}: the MyApps were not all deleted");
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
        let rss = rss_mib(operator.metrics);
        eprintln!("bench: churn cycle {cycle}: RSS {rss:.1} MiB");
        after_cycle.push(rss);
    }
    delete_namespace(admin, namespace).await?;
    Ok(ChurnRound {
        size: options.churn_size,
        rss_mib: after_cycle,
    })
}

/// Nothing changes, so the operator should not write at all: its writes and reads over the
/// steady window, and its RSS at the end of it.
async fn steady_state(operator: &Operator, options: &Options) -> (u64, u64, f64) {
    let before = operator.requests();
    tokio::time::sleep(options.steady).await;
    let after = operator.requests();
    let delta = |methods: &[&str]| -> u64 {
        methods
            .iter()
            .map(|m| {
                let earlier = before.get(*m).copied().unwrap_or(0);
                after.get(*m).copied().unwrap_or(0).saturating_sub(earlier)
            })
            .sum()
    };
    (
        delta(&["POST", "PUT", "PATCH", "DELETE"]),
        delta(&["GET"]),
        rss_mib(operator.metrics),
    )
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
    let start = Instant::now();
    let (deployments, d_task) = record(
        Api::<Deployment>::namespaced(admin.clone(), namespace),
        start,
        |_| true,
    );
    let (services, s_task) = record(
        Api::<Service>::namespaced(admin.clone(), namespace),
        start,
        |_| true,
    );
    let deployment_api: Api<Deployment> = Api::namespaced(floor.clone(), namespace);
    let service_api: Api<Service> = Api::namespaced(floor.clone(), namespace);
    stream::iter(0..n)
        .map(|i| {
            let (deployment_api, service_api) = (deployment_api.clone(), service_api.clone());
            async move {
                let app = floor_app(&format!("app-{i}"), namespace)?;
                let owner = OwnerReference::default();
                let mut deployment =
                    app_operator::controllers::myapp::deployment(&app, owner.clone());
                let mut service = app_operator::controllers::myapp::service(&app, owner);
                deployment.metadata.owner_references = None;
                service.metadata.owner_references = None;
                deployment_api
                    .create(&PostParams::default(), &deployment)
                    .await?;
                service_api.create(&PostParams::default(), &service).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(options.concurrency)
        .try_collect::<Vec<()>>()
        .await?;
    wait_for(convergence_timeout(n), || async {
        (both(&times(&deployments), &times(&services)).len() >= n).then_some(())
    })
    .await;
    let floor_children = Series::from_times(both(&times(&deployments), &times(&services)));
    d_task.abort();
    s_task.abort();
    Ok(floor_children)
}

/// A MyApp object (never created) for the pure builders the floor shares with the operator.
fn floor_app(name: &str, namespace: &str) -> Result<MyApp> {
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "example.com/v1", "kind": "MyApp",
        "metadata": { "name": name, "namespace": namespace },
        "spec": { "replicas": 1, "image": "nginx:1.27" }
    }))?)
}

fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

async fn appcluster_round(
    admin: &Client,
    floor: &Client,
    options: &Options,
) -> Result<AppClusterRound> {
    let size = options.appcluster_size;
    let count = usize::try_from(size)?;
    let timeout = Duration::from_secs(300);
    let namespace = "bench-appcluster";
    ensure_namespace(admin, namespace).await?;
    let clusters: Api<AppCluster> = Api::namespaced(admin.clone(), namespace);
    let cluster: AppCluster = serde_json::from_value(serde_json::json!({
        "apiVersion": "demo.demo.io/v1", "kind": "AppCluster", "metadata": { "name": "big" }, "spec": { "size": 0 }
    }))?;
    clusters.create(&PostParams::default(), &cluster).await?;
    let start = Instant::now();
    let (ready, r_task) = record(
        Api::<Pod>::namespaced(admin.clone(), namespace),
        start,
        pod_ready,
    );
    let most = Arc::new(Mutex::new(0_usize));
    let counter = {
        let (pods, most) = (
            Api::<Pod>::namespaced(admin.clone(), namespace),
            most.clone(),
        );
        tokio::spawn(async move {
            let mut names = std::collections::HashSet::new();
            let events = watcher(pods, watcher::Config::default()).default_backoff();
            futures::pin_mut!(events);
            while let Some(Ok(event)) = events.next().await {
                match event {
                    watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
                        names.insert(p.name_any());
                    }
                    watcher::Event::Delete(p) => {
                        names.remove(&p.name_any());
                    }
                    _ => {}
                }
                let mut most = most.lock().unwrap_or_else(|p| p.into_inner());
                *most = (*most).max(names.len());
            }
        })
    };
    let patch = serde_json::json!({ "spec": { "size": size } });
    clusters
        .patch("big", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    wait_for(timeout, || async {
        (clusters.get("big").await.ok()?.status?.ready >= size).then_some(())
    })
    .await;
    let operator_ready = Series::from_times(times(&ready).into_values().collect());
    let most_pods_at_once = *most.lock().unwrap_or_else(|p| p.into_inner());
    for task in [r_task, counter] {
        task.abort();
    }
    // The AppCluster first (its Pods go with it), so the operator is not left replacing Pods
    // that the namespace's deletion removes.
    clusters.delete("big", &DeleteParams::foreground()).await?;
    wait_for(timeout, || async {
        clusters.get_opt("big").await.ok()?.is_none().then_some(())
    })
    .await;
    delete_namespace(admin, namespace).await?;

    let namespace = "bench-pods-floor";
    ensure_namespace(admin, namespace).await?;
    let start = Instant::now();
    let (ready, r_task) = record(
        Api::<Pod>::namespaced(admin.clone(), namespace),
        start,
        pod_ready,
    );
    let pods: Api<Pod> = Api::namespaced(floor.clone(), namespace);
    let template = {
        let cluster: AppCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "demo.demo.io/v1", "kind": "AppCluster", "metadata": { "name": "big", "namespace": namespace }, "spec": { "size": size }
        }))?;
        let mut pod =
            app_operator::controllers::appcluster::pod(&cluster, OwnerReference::default());
        pod.metadata.owner_references = None;
        pod
    };
    stream::iter(0..count)
        .map(|_| {
            let (pods, template) = (pods.clone(), template.clone());
            async move {
                pods.create(&PostParams::default(), &template).await?;
                anyhow::Ok(())
            }
        })
        // The operator's own number of Pod writes in flight.
        .buffer_unordered(32)
        .try_collect::<Vec<()>>()
        .await?;
    wait_for(timeout, || async {
        (times(&ready).len() >= count).then_some(())
    })
    .await;
    let floor_ready = Series::from_times(times(&ready).into_values().collect());
    r_task.abort();
    delete_namespace(admin, namespace).await?;

    let operator_seconds = operator_ready.total(count);
    let floor_seconds = floor_ready.total(count);
    Ok(AppClusterRound {
        size,
        ratio_to_floor: operator_seconds
            .zip(floor_seconds)
            .map(|(o, f)| o / f.max(0.001)),
        operator_seconds,
        floor_seconds,
        operator_ready,
        floor_ready,
        most_pods_at_once,
    })
}

fn seconds(value: Option<f64>) -> String {
    value.map_or_else(|| "did not converge".to_owned(), |s| format!("{s:.2} s"))
}

pub fn markdown(report: &Report) -> String {
    let mut text = format!(
        "Machine: {}. Operator: its own process, as its ServiceAccount (ClusterRole of config/rbac), {}. Client concurrency: {}.\n\n",
        report.machine, report.operator_settings, report.client_concurrency
    );
    text.push_str(&format!(
        "Each N: {} operator/floor pair(s); the row shows the pair with the median (a) / floor, and the ratios column every pair.\n\n",
        report.repeat
    ));
    text.push_str("| N MyApps | children (a) | floor | (a) / floor | ratios | all Ready (b) | all Ready | requests per MyApp | steady writes | steady reads | settled RSS |\n");
    text.push_str("|---:|---:|---:|---:|---|---:|:--:|---|---:|---:|---:|\n");
    let ratio = |r: Option<f64>| r.map_or("-".into(), |r| format!("{r:.2}"));
    for round in &report.myapp {
        let Some(pass) = round.median() else {
            continue;
        };
        text.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1} MiB |\n",
            round.n,
            seconds(pass.children_seconds),
            seconds(pass.floor_seconds),
            ratio(pass.ratio_to_floor),
            round
                .passes
                .iter()
                .map(|p| ratio(p.ratio_to_floor))
                .collect::<Vec<_>>()
                .join(", "),
            seconds(pass.ready_seconds),
            if round.all_ready() { "yes" } else { "no" },
            pass.requests_per_myapp
                .iter()
                .map(|(method, count)| format!("{method} {count:.2}"))
                .collect::<Vec<_>>()
                .join(", "),
            round.steady_writes,
            round.steady_reads,
            round.settled_rss_mib,
        ));
    }
    if let Some(round) = &report.appcluster {
        text.push_str(&format!(
            "\nAppCluster 0 -> {}: {} to all Ready vs {} for the same Pods from a plain client (ratio {}); most Pods at once: {}.\n",
            round.size,
            seconds(round.operator_seconds),
            seconds(round.floor_seconds),
            ratio(round.ratio_to_floor),
            round.most_pods_at_once
        ));
    }
    if let Some(churn) = &report.churn {
        text.push_str(&format!(
            "\nChurn: {} cycles of {} MyApps created, Ready and deleted; RSS after each cycle: {} MiB; last / cycle 2 = {}.\n",
            churn.rss_mib.len(),
            churn.size,
            churn.rss_mib.iter().map(|r| format!("{r:.1}")).collect::<Vec<_>>().join(", "),
            ratio(churn.growth()),
        ));
    }
    text.push_str(&format!(
        "\nOperator peak RSS {:.1} MiB; CPU {:.2} s for the whole run; API requests by method: {}.\n",
        report.peak_rss_mib,
        report.cpu_seconds,
        report.requests_by_method.iter().map(|(m, n)| format!("{m} {n}")).collect::<Vec<_>>().join(", ")
    ));
    text
}

/// Converged objects over time, operator vs floor, one line pair per N, as SVG: the viewer's
/// browser draws the text, so no font has to be installed to write it.
pub fn chart(report: &Report, path: &Path) -> Result<()> {
    use plotters::prelude::*;
    let medians: Vec<(usize, &Pass)> = report
        .myapp
        .iter()
        .filter_map(|round| Some((round.n, round.median()?)))
        .collect();
    let max_t = medians
        .iter()
        .flat_map(|(_, r)| {
            r.operator_children
                .points
                .iter()
                .chain(&r.floor_children.points)
                .chain(&r.operator_ready.points)
        })
        .map(|p| p.0)
        .fold(1.0, f64::max);
    let max_n = report.myapp.iter().map(|r| r.n).max().unwrap_or(1);
    let root = SVGBackend::new(path, (1000, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "MyApps converged over time: operator vs plain-client floor",
            ("sans-serif", 22),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..max_t * 1.05, 0usize..max_n + max_n / 20)
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    chart
        .configure_mesh()
        .x_desc("seconds since the first create")
        .y_desc("objects converged")
        .draw()
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    for (index, (n, pass)) in medians.iter().enumerate() {
        let color = Palette99::pick(index);
        let lines = [
            (
                &pass.operator_children,
                format!("N={n} operator: Deployment+Service"),
                color.stroke_width(2),
            ),
            (
                &pass.operator_ready,
                format!("N={n} operator: Ready"),
                color.stroke_width(1),
            ),
            (
                &pass.floor_children,
                format!("N={n} floor"),
                BLACK.mix(0.5).stroke_width(1),
            ),
        ];
        for (series, label, style) in lines {
            chart
                .draw_series(LineSeries::new(series.points.iter().copied(), style))
                .map_err(|e| anyhow::anyhow!("{e:?}"))?
                .label(label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    root.present().map_err(|e| anyhow::anyhow!("{e:?}"))?;
    Ok(())
}
