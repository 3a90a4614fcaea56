//! `cargo xtask <task>`: what the Makefile targets run.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
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
    /// Start the local control plane (etcd, kube-apiserver, controller-manager, scheduler, kwok).
    ClusterUp {
        /// How many fake (kwok) Nodes to register.
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
    /// Regenerate the CRD manifests under config/crd/bases from the Rust types.
    Manifests,
    /// Install the CRDs into the cluster of $KUBECONFIG (default: the local control plane).
    Install,
    /// Remove the CRDs (and with them every custom resource) from that cluster.
    Uninstall,
    /// Local control plane up (if none), CRDs installed, the operator in the foreground, samples applied.
    Run,
    /// Run `kubectl` (the pinned one) against $KUBECONFIG, else the local control plane.
    Kubectl {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
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
        Task::ClusterUp { nodes } => {
            let tools = Tools::ensure(&tool_sources())?;
            let layout = Layout::default();
            let options = ClusterOptions {
                nodes,
                ..ClusterOptions::default()
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
        Task::Install => {
            let tools = Tools::ensure(&tool_sources())?;
            install(&tools, &target_kubeconfig())?;
        }
        Task::Uninstall => {
            let tools = Tools::ensure(&tool_sources())?;
            let status = kubectl(&tools, &target_kubeconfig())
                .args(["delete", "--ignore-not-found", "-k"])
                .arg(repo().join("config/crd"))
                .status()?;
            return Ok(exit_code(status));
        }
        Task::Run => return runtime.block_on(run_operator()),
        Task::Test { cargo_args } => return runtime.block_on(test(&cargo_args)),
        Task::Kubectl { args } => {
            let tools = Tools::ensure(&tool_sources())?;
            let status = kubectl(&tools, &Layout::default().kubeconfig())
                .args(args)
                .status()?;
            return Ok(exit_code(status));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn repo() -> PathBuf {
    local_cluster::repo_root()
}

/// $KUBECONFIG when set (a user's own cluster), else the local control plane.
fn target_kubeconfig() -> PathBuf {
    std::env::var_os("KUBECONFIG").map_or_else(|| Layout::default().kubeconfig(), PathBuf::from)
}

fn manifests() -> Result<()> {
    let dir = repo().join("config/crd/bases");
    std::fs::create_dir_all(&dir)?;
    for (name, yaml) in app_operator::manifests::crd_files()? {
        std::fs::write(dir.join(&name), yaml)?;
        println!("wrote config/crd/bases/{name}");
    }
    Ok(())
}

fn install(tools: &Tools, kubeconfig: &Path) -> Result<()> {
    let crds = repo().join("config/crd");
    let applied = kubectl(tools, kubeconfig)
        .args(["apply", "--server-side", "-k"])
        .arg(&crds)
        .status()?;
    if !applied.success() {
        bail!("installing the CRDs failed");
    }
    let established = kubectl(tools, kubeconfig)
        .args(["wait", "--for=condition=Established", "--timeout=60s", "-f"])
        .arg(crds.join("bases"))
        .status()?;
    if !established.success() {
        bail!("the CRDs did not become Established");
    }
    Ok(())
}

/// `make run`: what a newcomer runs first.
async fn run_operator() -> Result<ExitCode> {
    let tools = Tools::ensure(&tool_sources())?;
    let layout = Layout::default();
    if layout.running().is_empty() {
        Cluster::up(&layout, &tools, &ClusterOptions::default()).await?;
        println!("started the local control plane; stop it with `make cluster-down`");
    }
    let kubeconfig = layout.kubeconfig();
    install(&tools, &kubeconfig)?;
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
        ])
        .env("APP_OPERATOR_KUBECONFIG", &kubeconfig)
        .spawn()
        .context("starting app-operator")?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !http_ok(health, "/readyz") {
        if let Some(status) = operator.try_wait()? {
            bail!("app-operator exited before it was ready ({status})");
        }
        if std::time::Instant::now() > deadline {
            let _ = operator.kill();
            bail!("app-operator was not ready within 60s");
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    kubectl(&tools, &kubeconfig)
        .args(["apply", "-k"])
        .arg(repo().join("config/samples"))
        .status()?;
    std::thread::sleep(std::time::Duration::from_secs(5));
    kubectl(&tools, &kubeconfig)
        .args([
            "get",
            "myapps,appclusters,samples,deployments,services,horizontalpodautoscalers,pods",
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
    println!("  kubectl get myapps,appclusters,samples,pods");
    Ok(exit_code(operator.wait()?))
}

/// A bare HTTP/1.0 GET (no client library needed for a local probe).
fn http_ok(address: &str, path: &str) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(address) else {
        return false;
    };
    if write!(stream, "GET {path} HTTP/1.0\r\n\r\n").is_err() {
        return false;
    }
    let mut response = String::new();
    stream.read_to_string(&mut response).is_ok()
        && (response.starts_with("HTTP/1.0 200") || response.starts_with("HTTP/1.1 200"))
}

fn kubectl(tools: &Tools, kubeconfig: &Path) -> Command {
    let mut command = Command::new(tools.bin("kubectl"));
    command.env("KUBECONFIG", kubeconfig);
    command
}

fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    if status.success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The suite's one control plane: an explicit one (`APP_OPERATOR_TEST_KUBECONFIG`), the running
/// local one, or one started here for this run and stopped at its end.
async fn test(cargo_args: &[String]) -> Result<ExitCode> {
    let tools = Tools::ensure(&tool_sources())?;
    let layout = Layout::default();
    let mut started_here = false;
    let kubeconfig = match std::env::var_os("APP_OPERATOR_TEST_KUBECONFIG") {
        Some(path) => PathBuf::from(path),
        None if !layout.running().is_empty() => layout.kubeconfig(),
        None => {
            eprintln!("starting a local control plane for the test run");
            let cluster = Cluster::up(&layout, &tools, &ClusterOptions::default()).await?;
            started_here = true;
            cluster.kubeconfig
        }
    };
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut paths = vec![tools.dir.join("bin")];
    paths.extend(std::env::split_paths(&path));
    let status = Command::new(env!("CARGO"))
        .args(["test", "--workspace", "--locked"])
        .args(cargo_args)
        .env("APP_OPERATOR_TEST_KUBECONFIG", &kubeconfig)
        .env("PATH", std::env::join_paths(paths).context("PATH")?)
        .status()
        .context("running cargo test")?;
    if started_here {
        let stopped = Cluster::down(&layout)?;
        eprintln!("stopped the test control plane ({})", stopped.join(", "));
    }
    if !status.success() {
        bail!("cargo test failed ({status})");
    }
    Ok(ExitCode::SUCCESS)
}
