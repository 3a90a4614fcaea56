//! `cargo xtask <task>`: what the Makefile targets run.

mod bench;
mod image;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use local_cluster::install::{self, Target, UserEnv};
use local_cluster::{Cluster, ClusterOptions, Layout, Tools};

#[derive(Parser)]
#[command(about = "app-operator developer tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Build (or find in the cache) the pinned upstream binaries; prints their directory.
    Tools,
    /// Start the local control plane (etcd, kube-apiserver, controller-manager, scheduler) with
    /// a simulated (kwok) node or a real one (kubelet, containerd, kube-proxy, CoreDNS).
    ClusterUp {
        /// `kwok`: simulated nodes, Pods reported Running and nothing runs (cheap: the bench and
        /// scale tests); `real`: one kubelet node whose Pods run.
        #[arg(long, value_enum, default_value_t = NodeKind::Kwok)]
        node: NodeKind,
        /// How many kwok Nodes to register (`--node kwok`).
        #[arg(long, default_value_t = 1)]
        nodes: u32,
    },
    /// Stop every process of the local control plane and remove its state.
    ClusterDown,
    /// Run the whole test suite against a local control plane (started and stopped here if none runs).
    Test {
        /// Extra arguments for `cargo test`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        cargo_args: Vec<String>,
    },
    /// Run only the real-node suites (the node's lifecycle, then the samples with the operator
    /// deployed on a real node); `test` runs them after the rest.
    TestRealNode,
    /// Run the fault suite (crates/operator/tests/chaos.rs) serially, each row on a control plane
    /// of its own.
    Chaos {
        /// Extra arguments for the test binary (a row's name to run only it).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        test_args: Vec<String>,
    },
    /// Regenerate the CRD manifests under config/crd/bases from the Rust types.
    Manifests,
    /// Install the CRDs with $KUBECTL into the cluster of $KUBECONFIG (else ~/.kube/config, else
    /// the local control plane).
    Install,
    /// Remove the CRDs (and with them every custom resource) from that cluster.
    Uninstall,
    /// Deploy the operator (config/default, image $IMG) to that cluster.
    Deploy,
    /// Remove what `deploy` created (the CRDs and every custom resource too).
    Undeploy,
    /// Write dist/install.yaml: config/default with image $IMG, one file to `kubectl apply -f`.
    BuildInstaller,
    /// Local control plane up (if none), CRDs installed, the operator in the foreground, samples applied.
    Run,
    /// Build a static app-operator and write it as a one-layer OCI image archive (no Docker needed).
    Image {
        /// Where to write the archive.
        #[arg(long, default_value = "target/app-operator-image.tar")]
        output: PathBuf,
    },
    /// Push an image archive (`make image`'s) into the running local cluster's registry, where
    /// its real node pulls from, as `kind load image-archive` does for kind.
    Load {
        #[arg(long, default_value = "target/app-operator-image.tar")]
        archive: PathBuf,
    },
    /// Benchmark convergence and cost against the floor; writes target/bench/{results.json,results.md,chart.svg}.
    Bench {
        /// Numbers of MyApps, one round each.
        #[arg(long, value_delimiter = ',', default_values_t = [100, 300, 1000])]
        sizes: Vec<usize>,
        /// Client concurrency for creating objects (operator and floor alike).
        #[arg(long, default_value_t = 10)]
        concurrency: usize,
        /// Operator/floor pairs per N; the pair with the median ratio is reported.
        #[arg(long, default_value_t = 3)]
        repeat: usize,
        /// AppCluster size to scale to from 0 (0 skips the round).
        #[arg(long, default_value_t = 500)]
        appcluster_size: i32,
        /// How long to watch the converged operator for writes.
        #[arg(long, default_value_t = 60)]
        steady_seconds: u64,
        /// Create/delete cycles of the churn round (0 skips it): per-object state must not grow.
        #[arg(long, default_value_t = 20)]
        churn_cycles: usize,
        /// MyApps created and deleted in each churn cycle.
        #[arg(long, default_value_t = 500)]
        churn_size: usize,
        #[arg(long, default_value = "target/bench")]
        output: PathBuf,
        /// Another operator to run through the MyApp rounds after ours, as `NAME=COMMAND`: a
        /// command line (run by `sh -c`, with `KUBECONFIG` set to the benchmark identity) that
        /// serves controller-runtime's metrics on `{metrics}` and `/readyz` on `{health}`, which
        /// are replaced by free local addresses. Repeatable.
        #[arg(long, value_parser = parse_compare)]
        compare: Vec<bench::Launch>,
        /// A YAML file of ClusterRoles the compared operators need besides ours (bound to the
        /// same ServiceAccount). Repeatable.
        #[arg(long)]
        compare_rbac: Vec<PathBuf>,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum NodeKind {
    Kwok,
    Real,
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// `NAME=COMMAND` of `--compare`.
fn parse_compare(value: &str) -> Result<bench::Launch, String> {
    match value.split_once('=') {
        Some((name, line)) if !name.is_empty() && !line.trim().is_empty() => {
            Ok(bench::Launch::Command {
                name: name.to_owned(),
                line: line.to_owned(),
            })
        }
        _ => Err(format!("expected NAME=COMMAND, got {value:?}")),
    }
}

fn tool_sources() -> PathBuf {
    local_cluster::repo_root().join("hack/k8s-tools")
}

fn run(cli: Cli) -> Result<ExitCode> {
    let runtime = tokio::runtime::Runtime::new()?;
    match cli.task {
        Task::Tools => {
            let tools = Tools::ensure(&tool_sources())?;
            println!("{}", tools.dir.join("bin").display());
        }
        Task::ClusterUp { node, nodes } => {
            let tools = Tools::ensure(&tool_sources())?;
            let layout = Layout::default();
            let options = match node {
                NodeKind::Kwok => ClusterOptions {
                    nodes,
                    ..ClusterOptions::default()
                },
                NodeKind::Real => ClusterOptions::real_node(),
            };
            let cluster = runtime.block_on(Cluster::up(&layout, &tools, &options))?;
            println!(
                "local control plane is up (logs: {})",
                layout.logs().display()
            );
            println!("export KUBECONFIG={}", cluster.kubeconfig.display());
            println!("export PATH={}:$PATH", tools.dir.join("bin").display());
        }
        Task::ClusterDown => {
            let layout = Layout::default();
            let stopped = Cluster::down(&layout)?;
            if stopped.is_empty() {
                println!("no local control plane was running");
            } else {
                println!("stopped {}", stopped.join(", "));
            }
        }
        Task::Manifests => manifests()?,
        Task::Install => install(&acting_on_cluster(user_target()?)?)?,
        Task::Uninstall => {
            let target = acting_on_cluster(user_target()?)?;
            let crds = repo().join("config/crd");
            print!(
                "{}",
                target.run(&["delete", "--ignore-not-found", "-k", path(&crds)?])?
            );
        }
        Task::Deploy => {
            let target = acting_on_cluster(user_target()?)?;
            println!("deploying image {}", target.img);
            print!("{}", install::deploy(&target, &repo(), &overlay_dir())?);
        }
        Task::Undeploy => {
            let target = acting_on_cluster(user_target()?)?;
            print!("{}", install::undeploy(&target, &repo(), &overlay_dir())?);
        }
        Task::BuildInstaller => {
            let target = user_target()?;
            let rendered = install::installer(&target, &repo(), &overlay_dir())?;
            let out = repo().join("dist/install.yaml");
            std::fs::create_dir_all(repo().join("dist"))?;
            std::fs::write(&out, rendered)?;
            println!("wrote {} (image {})", out.display(), target.img);
        }
        Task::Run => return runtime.block_on(run_operator()),
        Task::Image { output } => build_image(&output)?,
        Task::Load { archive } => load(&archive)?,
        Task::Bench {
            sizes,
            concurrency,
            repeat,
            appcluster_size,
            steady_seconds,
            churn_cycles,
            churn_size,
            output,
            compare,
            compare_rbac,
        } => {
            let output = if output.is_relative() {
                repo().join(output)
            } else {
                output
            };
            runtime.block_on(bench_on_own_cluster(bench::Options {
                sizes,
                concurrency,
                repeat,
                appcluster_size,
                steady: std::time::Duration::from_secs(steady_seconds),
                churn_cycles,
                churn_size,
                output,
                kubeconfig: PathBuf::new(),
                operators: compare,
                extra_roles: compare_rbac,
            }))?;
        }
        Task::Test { cargo_args } => return runtime.block_on(test(&cargo_args)),
        Task::TestRealNode => {
            let tools = Tools::ensure(&tool_sources())?;
            runtime.block_on(test_real_node(&tools))?;
        }
        Task::Chaos { test_args } => return runtime.block_on(chaos(&test_args)),
    }
    Ok(ExitCode::SUCCESS)
}

pub fn repo() -> PathBuf {
    local_cluster::repo_root()
}

/// The user's kubectl and cluster (`KUBECTL`, `KUBECONFIG`, `IMG`), as kubebuilder's targets.
fn user_target() -> Result<Target> {
    Ok(Target::resolve(
        &UserEnv::from_process(),
        &Layout::default(),
        || Tools::ensure(&tool_sources()),
    )?)
}

/// Says which cluster `target` acts on (and fails clearly when there is none).
fn acting_on_cluster(target: Target) -> Result<Target> {
    println!("acting on {}", target.describe()?);
    Ok(target)
}

/// Where deploy, undeploy and build-installer write their overlay of config/default.
fn overlay_dir() -> PathBuf {
    repo().join("target/deploy")
}

fn path(path: &Path) -> Result<&str> {
    path.to_str()
        .with_context(|| format!("{} is not UTF-8", path.display()))
}

/// `make bench`: a release operator on a control plane of its own (started and stopped here).
async fn bench_on_own_cluster(mut options: bench::Options) -> Result<()> {
    let tools = Tools::ensure(&tool_sources())?;
    let built = Command::new(env!("CARGO"))
        .args(["build", "--release", "--locked", "-p", "app-operator"])
        .status()?;
    if !built.success() {
        bail!("building the release operator failed");
    }
    options.operators.insert(
        0,
        bench::Launch::Ours {
            binary: repo().join("target/release/app-operator"),
        },
    );
    let layout = Layout {
        state_dir: repo().join(".local/bench-cluster"),
    };
    let cluster = Cluster::up(&layout, &tools, &ClusterOptions::default()).await?;
    options.kubeconfig = cluster.kubeconfig.clone();
    let result = run_bench(&options, &tools).await;
    Cluster::down(&layout)?;
    let report = result?;
    print!("{}", bench::markdown(&report));
    Ok(())
}

/// Runs the benchmark and writes its results (JSON, markdown, SVG chart) into `options.output`.
async fn run_bench(options: &bench::Options, tools: &Tools) -> Result<bench::Report> {
    let report = bench::run(options, tools).await?;
    std::fs::write(
        options.output.join("results.json"),
        serde_json::to_vec_pretty(&report)?,
    )?;
    std::fs::write(options.output.join("results.md"), bench::markdown(&report))?;
    bench::chart(&report, &options.output.join("chart.svg"))?;
    Ok(report)
}

/// The benchmark at N = 20 on the test control plane, so it cannot rot; fails on a result no
/// build should produce (not converged, writes at rest, overshoot).
async fn bench_smoke(kubeconfig: &Path, tools: &Tools) -> Result<()> {
    let options = bench::Options {
        sizes: vec![20],
        concurrency: 10,
        repeat: 1,
        appcluster_size: 20,
        steady: std::time::Duration::from_secs(5),
        churn_cycles: 2,
        churn_size: 10,
        output: repo().join("target/bench-smoke"),
        kubeconfig: kubeconfig.to_owned(),
        operators: vec![bench::Launch::Ours {
            binary: repo().join("target/debug/app-operator"),
        }],
        extra_roles: Vec::new(),
    };
    let report = run_bench(&options, tools).await?;
    let round = report
        .ours()
        .and_then(|run| run.myapp.first())
        .context("no MyApp round")?;
    let cluster = report.appcluster.as_ref().context("no AppCluster round")?;
    let checks = [
        ("all 20 MyApps Ready", round.all_ready()),
        ("no operator writes at rest", round.steady_writes == 0),
        ("both floors converged", round.floors_converged()),
        (
            "restarted without writes",
            round.restart.as_ref().is_some_and(|r| r.writes() == 0),
        ),
        (
            "AppCluster reached 20 Ready Pods",
            cluster.operator_seconds.is_some(),
        ),
        ("never more than 20 Pods", cluster.most_pods_at_once <= 20),
        (
            "churn: 2 create/delete cycles measured",
            report.churn.as_ref().is_some_and(|c| c.rss_mib.len() == 2),
        ),
        ("chart written", options.output.join("chart.svg").exists()),
    ];
    let failed: Vec<&str> = checks
        .iter()
        .filter(|(_, ok)| !ok)
        .map(|(name, _)| *name)
        .collect();
    println!(
        "bench smoke: {} passed, {} failed",
        checks.len() - failed.len(),
        failed.len()
    );
    if !failed.is_empty() {
        bail!("bench smoke failed: {}", failed.join(", "));
    }
    Ok(())
}

/// A fully static release binary (glibc with `crt-static`: the machine has no musl Rust target)
/// in its own target directory, so it can be built while another cargo holds the workspace's.
/// The image and the benchmark both use it.
fn build_static_binary() -> Result<PathBuf> {
    let target_dir = repo().join("target/image");
    let triple = "x86_64-unknown-linux-gnu";
    let built = Command::new(env!("CARGO"))
        .args([
            "build",
            "--release",
            "--locked",
            "-p",
            "app-operator",
            "--target",
            triple,
        ])
        .env("CARGO_TARGET_DIR", &target_dir)
        .env("RUSTFLAGS", "-C target-feature=+crt-static")
        .status()?;
    if !built.success() {
        bail!("building the static binary failed");
    }
    Ok(target_dir.join(triple).join("release/app-operator"))
}

fn build_image(output: &Path) -> Result<()> {
    let binary = build_static_binary()?;
    let output = if output.is_relative() {
        repo().join(output)
    } else {
        output.to_owned()
    };
    image::write_archive(&binary, env!("CARGO_PKG_VERSION"), &output)?;
    println!(
        "wrote {} ({}, entrypoint /app-operator, user {})",
        output.display(),
        image::REFERENCE,
        image::USER
    );
    Ok(())
}

/// `make load`: the archive's images into the local cluster's registry, where its real node pulls.
fn load(archive: &Path) -> Result<()> {
    let layout = Layout::default();
    let node = local_cluster::node::NodeLayout::of(&layout);
    if layout.running().is_empty() || !node.exists() {
        bail!(
            "no local cluster with a real node runs (state in {}): start one with `make cluster-up NODE=real` or `make run`",
            layout.state_dir.display()
        );
    }
    let archive = if archive.is_relative() {
        repo().join(archive)
    } else {
        archive.to_owned()
    };
    let registry = node.registry_address()?;
    local_cluster::registry::push_archive(&archive, &registry)
        .with_context(|| format!("pushing {}", archive.display()))?;
    println!(
        "loaded {} into the local cluster's registry ({registry})",
        archive.display()
    );
    Ok(())
}

fn manifests() -> Result<()> {
    for (file, content) in app_operator_manifests::generated_files(&repo())? {
        let path = repo().join(&file);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, content)?;
        println!("wrote {file}");
    }
    Ok(())
}

/// Applies the CRDs and waits until the API server serves them.
fn install(target: &Target) -> Result<()> {
    let crds = repo().join("config/crd");
    print!(
        "{}",
        target.run(&["apply", "--server-side", "-k", path(&crds)?])?
    );
    target.run(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "-f",
        path(&crds.join("bases"))?,
    ])?;
    Ok(())
}

/// `make run`: what a newcomer runs first. The cluster has a real node: every sample's Pods run.
async fn run_operator() -> Result<ExitCode> {
    let tools = Tools::ensure(&tool_sources())?;
    let layout = Layout::default();
    if layout.running().is_empty() {
        Cluster::up(&layout, &tools, &ClusterOptions::real_node()).await?;
        println!(
            "started the local control plane with a real node; stop it with `make cluster-down`"
        );
    } else if !local_cluster::node::NodeLayout::of(&layout).exists() {
        bail!(
            "a local control plane without a real node runs (state in {}): its Pods would run \
             nowhere. Stop it with `make cluster-down`, then `make run` starts one with a real node",
            layout.state_dir.display()
        );
    }
    let kubeconfig = layout.kubeconfig();
    let local = Target {
        kubectl: tools.bin("kubectl"),
        kubeconfig: Some(kubeconfig.clone().into_os_string()),
        img: local_cluster::install::DEFAULT_IMG.to_owned(),
    };
    install(&local)?;
    let built = Command::new(env!("CARGO"))
        .args(["build", "--quiet", "-p", "app-operator"])
        .status()?;
    if !built.success() {
        bail!("building app-operator failed");
    }
    let health = "127.0.0.1:8081";
    let mut operator = Command::new(repo().join("target/debug/app-operator"))
        .args([
            "run",
            "--metrics-bind-address",
            "127.0.0.1:8080",
            "--health-probe-bind-address",
            health,
            // Outside the cluster, etcd members' cluster-DNS names are resolved by asking the
            // cluster's DNS, as a Pod's resolver would.
            "--etcd-dns-server",
            local_cluster::node::CLUSTER_DNS,
        ])
        .env("APP_OPERATOR_KUBECONFIG", &kubeconfig)
        .spawn()
        .context("starting app-operator")?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while http_get(health, "/readyz").is_none() {
        if let Some(status) = operator.try_wait()? {
            bail!("app-operator exited before it was ready ({status})");
        }
        if std::time::Instant::now() > deadline {
            let _ = operator.kill();
            bail!("app-operator was not ready within 60s");
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    local
        .kubectl()
        .args(["apply", "-k"])
        .arg(repo().join("config/samples"))
        .status()?;
    // The samples run for real: images pulled, nginx, etcd and PostgreSQL started. Wait until
    // each says Ready (what does not within the time is shown as it is below).
    local
        .kubectl()
        .args([
            "wait",
            "--for=condition=Ready",
            "--timeout=240s",
            "myapps,appclusters,etcdclusters,etcdbackups,sampledbs",
            "--all",
        ])
        .status()?;
    local
        .kubectl()
        .args([
            "get",
            "myapps,appclusters,samples,etcdclusters,etcdbackups,sampledbs,deployments,statefulsets,services,horizontalpodautoscalers,persistentvolumeclaims,jobs,pods",
            "-o",
            "wide",
        ])
        .status()?;
    println!("\nThe operator runs in the foreground (Ctrl-C stops it). In another terminal:");
    println!(
        "  export KUBECONFIG={} PATH={}:$PATH",
        kubeconfig.display(),
        tools.dir.join("bin").display()
    );
    println!("  kubectl get myapps,appclusters,samples,etcdclusters,etcdbackups,sampledbs,pods");
    println!("  kubectl get pods -l app=etcd   # seed 004: then set size: 2 in the EtcdCluster");
    // On SIGINT or SIGTERM the operator is stopped; the cluster and its Pods stay.
    let pid = nix::unistd::Pid::from_raw(i32::try_from(operator.id())?);
    let mut exited = tokio::task::spawn_blocking(move || operator.wait());
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let status = tokio::select! {
        status = &mut exited => status??,
        _ = tokio::signal::ctrl_c() => stop(pid, exited).await?,
        _ = terminate.recv() => stop(pid, exited).await?,
    };
    Ok(exit_code(status))
}

/// Sends the operator SIGTERM and waits for it to exit.
async fn stop(
    pid: nix::unistd::Pid,
    exited: tokio::task::JoinHandle<std::io::Result<std::process::ExitStatus>>,
) -> Result<std::process::ExitStatus> {
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    Ok(exited.await??)
}

/// A bare HTTP/1.0 GET on a local port (no client library needed): the body of a 200 response.
pub fn http_get(address: &str, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let ok = response.starts_with("HTTP/1.0 200") || response.starts_with("HTTP/1.1 200");
    ok.then(|| {
        response
            .split_once("\r\n\r\n")
            .map(|(_, body)| body.to_owned())
            .unwrap_or_default()
    })
}

fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    if status.success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Debian's PostgreSQL server, which the SampleDB script tests run (`testkit::postgres`):
/// installed with apt-get unless some `/usr/lib/postgresql/<major>/bin/initdb` is there already.
fn ensure_postgres() -> Result<()> {
    if testkit::postgres::Binaries::find().is_some() {
        return Ok(());
    }
    eprintln!(
        "installing Debian's PostgreSQL server (no {}/<major>/bin/initdb) for the SampleDB script tests",
        testkit::postgres::ROOT
    );
    for args in [
        &["update"][..],
        &["install", "-y", "--no-install-recommends", "postgresql"],
    ] {
        let status = Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .context("running apt-get (the SampleDB script tests need Debian's `postgresql`)")?;
        if !status.success() {
            bail!(
                "apt-get {} failed ({status}): install Debian's `postgresql` package by hand \
                 (apt-get install --no-install-recommends postgresql), the SampleDB script tests need it",
                args.join(" ")
            );
        }
    }
    testkit::postgres::Binaries::get().context("after installing `postgresql`")?;
    Ok(())
}

/// `PATH` with the pinned tools first (the tests run kubectl and etcd).
fn path_with(tools: &Tools) -> Result<std::ffi::OsString> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut paths = vec![tools.dir.join("bin")];
    paths.extend(std::env::split_paths(&path));
    std::env::join_paths(paths).context("PATH")
}

/// The control plane tests share: an explicit one (`APP_OPERATOR_TEST_KUBECONFIG`), the running
/// local one, or one started for this run and stopped by [`TestCluster::release`].
struct TestCluster {
    kubeconfig: PathBuf,
    started_here: Option<Layout>,
}

impl TestCluster {
    async fn acquire(tools: &Tools) -> Result<TestCluster> {
        let layout = Layout::default();
        Ok(match std::env::var_os("APP_OPERATOR_TEST_KUBECONFIG") {
            Some(path) => TestCluster {
                kubeconfig: PathBuf::from(path),
                started_here: None,
            },
            None if !layout.running().is_empty() => TestCluster {
                kubeconfig: layout.kubeconfig(),
                started_here: None,
            },
            None => {
                eprintln!("starting a local control plane for the test run");
                let cluster = Cluster::up(&layout, tools, &ClusterOptions::default()).await?;
                TestCluster {
                    kubeconfig: cluster.kubeconfig,
                    started_here: Some(layout),
                }
            }
        })
    }

    fn release(self) -> Result<()> {
        if let Some(layout) = self.started_here {
            let stopped = Cluster::down(&layout)?;
            eprintln!("stopped the test control plane ({})", stopped.join(", "));
        }
        Ok(())
    }
}

/// `cargo test` with `args`, the pinned tools on `PATH` and `env` set.
fn cargo_test(
    tools: &Tools,
    args: &[&str],
    extra: &[String],
    env: &[(&str, &OsStr)],
) -> Result<ExitStatus> {
    Command::new(env!("CARGO"))
        .arg("test")
        .args(args)
        .args(extra)
        .envs(env.iter().copied())
        .env("PATH", path_with(tools)?)
        .status()
        .context("running cargo test")
}

/// The fault suite, one row at a time (two would share two cores and miss their deadlines; each
/// row starts and stops a control plane of its own; its harness overlaps only a row's idle
/// quiet check with the next row), then, unless `test_args` picked rows, the
/// spec fuzzer with more cases than `make test` runs (`FUZZ_CASES`, 2000 unless set).
async fn chaos(test_args: &[String]) -> Result<ExitCode> {
    let tools = Tools::ensure(&tool_sources())?;
    let rows = cargo_test(
        &tools,
        &["--locked", "-p", "app-operator", "--test", "chaos", "--"],
        test_args,
        &[],
    )?;
    let fuzz = if test_args.is_empty() {
        let cases = std::env::var_os("FUZZ_CASES").unwrap_or_else(|| "2000".into());
        let cluster = TestCluster::acquire(&tools).await?;
        let status = cargo_test(
            &tools,
            &["--locked", "-p", "app-operator", "--test", "fuzz", "--"],
            &["--nocapture".to_owned()],
            &[
                ("FUZZ_CASES", &cases),
                (
                    "APP_OPERATOR_TEST_KUBECONFIG",
                    cluster.kubeconfig.as_os_str(),
                ),
            ],
        );
        cluster.release()?;
        Some(status?)
    } else {
        None
    };
    if !rows.success() {
        bail!("the fault suite failed ({rows})");
    }
    if let Some(fuzz) = fuzz.filter(|status| !status.success()) {
        bail!("the fuzzer failed ({fuzz})");
    }
    Ok(ExitCode::SUCCESS)
}

/// The whole suite on the shared control plane (kwok), then the bench smoke on it; then the real
/// node: its own life on this machine, and the samples with the operator deployed on it.
async fn test(cargo_args: &[String]) -> Result<ExitCode> {
    ensure_postgres()?;
    let tools = Tools::ensure(&tool_sources())?;
    let cluster = TestCluster::acquire(&tools).await?;
    let status = cargo_test(
        &tools,
        &["--workspace", "--locked"],
        cargo_args,
        &[(
            "APP_OPERATOR_TEST_KUBECONFIG",
            cluster.kubeconfig.as_os_str(),
        )],
    );
    let smoke = match &status {
        Ok(status) if status.success() => bench_smoke(&cluster.kubeconfig, &tools).await,
        _ => Ok(()),
    };
    cluster.release()?;
    let status = status?;
    if !status.success() {
        bail!("cargo test failed ({status})");
    }
    smoke?;
    test_real_node(&tools).await?;
    Ok(ExitCode::SUCCESS)
}

/// The real-node suites, one real node at a time: the node's own life (`local-cluster`'s
/// `real_node`: up, Pods run, down leaves nothing, up again), then a cluster with a real node on
/// which the operator is deployed as users deploy it (`make image`, `make load`, `make deploy`)
/// and the operator's `real_node` tests run.
async fn test_real_node(tools: &Tools) -> Result<()> {
    let started = std::time::Instant::now();
    let lifecycle = cargo_test(
        tools,
        &["--locked", "-p", "local-cluster", "--test", "real_node"],
        &[],
        &[],
    )?;
    if !lifecycle.success() {
        bail!("the real node's lifecycle test failed ({lifecycle})");
    }
    let archive = repo().join("target/app-operator-image.tar");
    build_image(&archive)?;
    let layout = Layout {
        state_dir: repo().join("target/test-real-node"),
    };
    eprintln!("starting a local control plane with a real node for the real-node suite");
    let cluster = Cluster::up(&layout, tools, &ClusterOptions::real_node()).await?;
    let suite = async {
        local_cluster::registry::push_archive(
            &archive,
            &local_cluster::node::NodeLayout::of(&layout).registry_address()?,
        )?;
        let target = Target {
            kubectl: tools.bin("kubectl"),
            kubeconfig: Some(cluster.kubeconfig.clone().into_os_string()),
            img: install::DEFAULT_IMG.to_owned(),
        };
        print!("{}", install::deploy(&target, &repo(), &overlay_dir())?);
        let status = cargo_test(
            tools,
            &["--locked", "-p", "app-operator", "--test", "real_node"],
            // What the tests measure (the leader handover) is printed.
            &["--".to_owned(), "--nocapture".to_owned()],
            &[(
                "APP_OPERATOR_TEST_KUBECONFIG",
                cluster.kubeconfig.as_os_str(),
            )],
        )?;
        if !status.success() {
            bail!("the real-node suite failed ({status})");
        }
        // The chart, as Helm users install it, in place of `make deploy`'s operator: the same
        // image; its test Pod on the toolbox (the chart's default busybox:1.37 is not built here,
        // the toolbox has GNU wget, which takes the same arguments).
        print!("{}", install::undeploy(&target, &repo(), &overlay_dir())?);
        let helm = |args: &[&str]| -> Result<()> {
            let status = Command::new(tools.bin("helm"))
                .args(args)
                .env("KUBECONFIG", &cluster.kubeconfig)
                .status()?;
            if !status.success() {
                bail!("helm {} failed ({status})", args.join(" "));
            }
            Ok(())
        };
        let chart = repo().join("charts/app-operator");
        let release = ["app-operator", "-n", "app-operator-helm"];
        helm(
            &[
                &["install", release[0], path(&chart)?],
                &release[1..],
                &[
                    "--create-namespace",
                    "--set=image.repository=app-operator",
                    "--set=image.tag=latest",
                    "--set=test.image=docker.io/app-operator/toolbox:1",
                    "--wait",
                    "--timeout=180s",
                ],
            ]
            .concat(),
        )?;
        helm(&[&["test"][..], &release, &["--timeout=120s"]].concat())?;
        helm(&[&["uninstall"][..], &release, &["--wait"]].concat())?;
        Ok(())
    }
    .await;
    Cluster::down(&layout)?;
    eprintln!(
        "real-node suites done in {:.0}s",
        started.elapsed().as_secs_f64()
    );
    suite
}
