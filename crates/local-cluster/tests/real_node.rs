//! The real node's life on this machine: it comes up Ready on containerd, a Pod from an image
//! built here runs (`kubectl logs`, `exec`), cluster DNS answers the cluster domain and nothing
//! else, a second real node is refused, `cluster-down` leaves no container, mount, network
//! namespace, bridge, iptables chain or cgroup behind, and it comes up again after that.
//!
//! One real node per machine: `cargo xtask test` runs this file on its own (it is `test = false`
//! in Cargo.toml, so `cargo test --workspace` leaves it out), before any other real-node suite.

// Test code: a failed expectation is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use local_cluster::node::{self, NODE_NAME};
use local_cluster::{Cluster, ClusterOptions, Layout, Tools};

fn layout(name: &str) -> Layout {
    Layout {
        state_dir: local_cluster::repo_root().join(format!("target/{name}-{}", std::process::id())),
    }
}

fn kubectl(tools: &Tools, kubeconfig: &Path, args: &[&str]) -> Output {
    Command::new(tools.bin("kubectl"))
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .unwrap()
}

fn kubectl_ok(tools: &Tools, kubeconfig: &Path, args: &[&str]) -> String {
    let out = kubectl(tools, kubeconfig, args);
    assert!(
        out.status.success(),
        "kubectl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `kubectl run` of the test image with `command`, waiting until the Pod is Ready.
fn run_toolbox(tools: &Tools, kubeconfig: &Path, name: &str) {
    kubectl_ok(
        tools,
        kubeconfig,
        &[
            "run",
            name,
            "--image=docker.io/app-operator/toolbox:1",
            "--restart=Never",
            "--command",
            "--",
            "sh",
            "-c",
            "echo started in a real container; exec sleep infinity",
        ],
    );
    kubectl_ok(
        tools,
        kubeconfig,
        &[
            "wait",
            "--for=condition=Ready",
            &format!("pod/{name}"),
            "--timeout=120s",
        ],
    );
}

#[tokio::main]
async fn main() {
    let started = Instant::now();
    let tools = Tools::ensure(&local_cluster::repo_root().join("hack/k8s-tools")).unwrap();
    let first = layout("real-node-a");
    let second = layout("real-node-b");

    let cluster = Cluster::up(&first, &tools, &ClusterOptions::real_node())
        .await
        .unwrap_or_else(|e| panic!("the real node did not come up: {e}"));
    println!(
        "real node up (cold or warm) in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    let kubeconfig = cluster.kubeconfig.clone();

    let nodes: Api<Node> = Api::all(cluster.client.clone());
    let real = nodes.get(NODE_NAME).await.unwrap();
    let runtime = real
        .status
        .and_then(|s| s.node_info)
        .map(|info| info.container_runtime_version)
        .unwrap_or_default();
    assert!(runtime.starts_with("containerd://"), "{runtime}");
    println!("ok: node {NODE_NAME} Ready on {runtime}");

    // A second real node on this machine is refused before anything starts.
    let refused = Cluster::up(&second, &tools, &ClusterOptions::real_node()).await;
    let message = refused.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        message.contains("a real node already runs on this machine"),
        "a second real node was not refused: {message:?}"
    );
    assert!(
        second.running().is_empty(),
        "the refused cluster left processes running"
    );
    println!(
        "ok: a second real node is refused: {}",
        message.lines().next().unwrap_or_default()
    );

    run_toolbox(&tools, &kubeconfig, "toolbox");
    let logs = kubectl_ok(&tools, &kubeconfig, &["logs", "toolbox"]);
    assert_eq!(logs.trim(), "started in a real container");
    let exec = kubectl_ok(
        &tools,
        &kubeconfig,
        &["exec", "toolbox", "--", "cat", "/etc/hostname"],
    );
    assert_eq!(exec.trim(), "toolbox");
    println!("ok: kubectl logs and exec reach the container");

    // Cluster DNS: the cluster domain resolves, anything else is refused (no forwarding).
    let service = kubectl_ok(
        &tools,
        &kubeconfig,
        &[
            "exec",
            "toolbox",
            "--",
            "dig",
            "+short",
            "kubernetes.default.svc.cluster.local",
        ],
    );
    assert_eq!(service.trim(), "10.96.0.1");
    let outside = kubectl(
        &tools,
        &kubeconfig,
        &[
            "exec",
            "toolbox",
            "--",
            "dig",
            "+tries=1",
            "+time=2",
            "example.com",
        ],
    );
    let outside = String::from_utf8_lossy(&outside.stdout);
    assert!(
        outside.contains("status: REFUSED") || outside.contains("status: SERVFAIL"),
        "a name outside the cluster domain was answered: {outside}"
    );
    // The API server through the `kubernetes` Service, from inside a Pod (its advertised address).
    let api = kubectl_ok(
        &tools,
        &kubeconfig,
        &[
            "exec",
            "toolbox",
            "--",
            "curl",
            "-sS",
            "--cacert",
            "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
            "https://kubernetes.default.svc/livez",
        ],
    );
    assert!(
        api.contains("ok") || api.contains("Unauthorized") || api.contains("Forbidden"),
        "{api}"
    );
    println!("ok: cluster DNS answers the cluster domain only; Pods reach the API server");

    // What a running node has on the machine is what the check below must find gone.
    let running = node::leftovers(&first);
    for kind in [
        "containerd shim",
        "mount",
        "network interface",
        "iptables chain",
        "cgroup",
    ] {
        assert!(
            running.iter().any(|thing| thing.starts_with(kind)),
            "the leftovers check sees no {kind} of a running node: {running:#?}"
        );
    }
    let stopped = Cluster::down(&first).unwrap();
    let left = node::leftovers(&first);
    assert!(left.is_empty(), "cluster-down left behind: {left:#?}");
    println!(
        "ok: cluster-down stopped {} and left nothing behind",
        stopped.join(", ")
    );

    // Up again after down, then down for good.
    let again = Instant::now();
    let cluster = Cluster::up(&second, &tools, &ClusterOptions::real_node())
        .await
        .unwrap_or_else(|e| panic!("the real node did not come up after cluster-down: {e}"));
    println!(
        "ok: up again after cluster-down, warm start in {:.1}s",
        again.elapsed().as_secs_f64()
    );
    run_toolbox(&tools, &cluster.kubeconfig, "again");
    Cluster::down(&second).unwrap();
    let left = node::leftovers(&second);
    assert!(left.is_empty(), "cluster-down left behind: {left:#?}");
    for dir in [&first.state_dir, &second.state_dir] {
        let _ = std::fs::remove_dir_all::<&PathBuf>(dir);
    }
    println!("real node lifecycle: ok");
}
