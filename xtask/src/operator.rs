//! `make run`: the operator in the foreground on the local cluster, samples applied.

use std::process::{Command, ExitCode};

use anyhow::{Context, Result, bail};
use local_cluster::install::Target;
use local_cluster::{Cluster, ClusterOptions, Layout, Tools};

use crate::deliver::install;
use crate::{repo, tool_sources};

/// The local control plane of `layout` with a real node: started if none runs (true), refused if
/// one runs without a real node, where Pods would run nowhere.
pub(crate) async fn real_node_cluster(layout: &Layout, tools: &Tools) -> Result<bool> {
    if layout.running().is_empty() {
        Cluster::up(layout, tools, &ClusterOptions::real_node()).await?;
        return Ok(true);
    }
    if !local_cluster::node::NodeLayout::of(layout).exists() {
        bail!(
            "a local control plane without a real node runs (state in {}): its Pods would run \
             nowhere. Stop it with `make cluster-down`, then run this again to start one with a \
             real node",
            layout.state_dir.display()
        );
    }
    Ok(false)
}

/// `make run`: what a newcomer runs first. The cluster has a real node: every sample's Pods run.
pub(crate) async fn run_operator() -> Result<ExitCode> {
    let tools = Tools::ensure(&tool_sources())?;
    let layout = Layout::default();
    if real_node_cluster(&layout, &tools).await? {
        println!(
            "started the local control plane with a real node; stop it with `make cluster-down`"
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
pub(crate) async fn stop(
    pid: nix::unistd::Pid,
    exited: tokio::task::JoinHandle<std::io::Result<std::process::ExitStatus>>,
) -> Result<std::process::ExitStatus> {
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    Ok(exited.await??)
}

/// A bare HTTP/1.0 GET on a local port (no client library needed): the body of a 200 response.
pub(crate) fn http_get(address: &str, path: &str) -> Option<String> {
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

pub(crate) fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    if status.success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
