//! The operator through control-plane faults, on a control plane of its own (never the suite's
//! shared one): the API server and etcd are killed and restarted under it, and it keeps running
//! and converges what changed. The smoke subset of the fault suite.

// Test code: a failed expectation is a failed test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::path::Path;
use std::time::Duration;

use local_cluster::Stop;
use serde_json::json;
use support::cluster::{OwnCluster, repo_file};
use support::process::OperatorProcess;
use testkit::eventually;

/// The goal the issue sets: converged within this long after the control plane is back.
const CONVERGED_AFTER_RECOVERY: Duration = Duration::from_secs(60);

/// MyApp `myapp-sample` serves `image` and is Ready, and AppCluster `appcluster-sample` has
/// `size` Ready Pods.
async fn converged(cluster: &OwnCluster, image: &str, size: u32, within: Duration, what: &str) {
    eventually(within, what, || async {
        let app = cluster.kubectl(&[
            "get",
            "deploy",
            "myapp-sample",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image} {.status.readyReplicas}",
        ]);
        let ready = cluster.kubectl(&[
            "get",
            "myapp",
            "myapp-sample",
            "-o",
            r#"jsonpath={.status.conditions[?(@.type=="Ready")].status}"#,
        ]);
        let pods = cluster.kubectl(&[
            "get",
            "appcluster",
            "appcluster-sample",
            "-o",
            "jsonpath={.status.ready}",
        ]);
        (app == format!("{image} 3") && ready == "True" && pods == size.to_string()).then_some(())
    })
    .await;
}

/// Crashes `component` for `down_secs`, then sets the MyApp's image and the AppCluster's size:
/// how long after the component was back both converged (at most the goal).
async fn crash_then_edit(
    cluster: &OwnCluster,
    operator: &mut OperatorProcess,
    component: &str,
    down_secs: u64,
    image: &str,
    size: u32,
) -> Duration {
    let back = cluster
        .restart(component, Stop::Kill, Duration::from_secs(down_secs))
        .await;
    assert!(
        operator.exited().is_none(),
        "the operator exited with {component}"
    );
    let image_patch = json!({ "spec": { "image": image } }).to_string();
    let size_patch = json!({ "spec": { "size": size } }).to_string();
    for (kind, name, patch) in [
        ("myapp", "myapp-sample", &image_patch),
        ("appcluster", "appcluster-sample", &size_patch),
    ] {
        cluster.kubectl(&["patch", kind, name, "--type=merge", "-p", patch]);
    }
    converged(
        cluster,
        image,
        size,
        CONVERGED_AFTER_RECOVERY,
        &format!("the edits converged ≤ 60 s after {component} was back"),
    )
    .await;
    back.elapsed()
}

fn log_has_no_panic(operator: &OperatorProcess) {
    let log = operator.log();
    assert!(!log.contains("panicked"), "the operator panicked:\n{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_rides_out_an_api_server_and_an_etcd_crash() {
    let cluster = OwnCluster::up("faults-crash", false).await;
    let mut operator = OperatorProcess::spawn(
        Path::new(&cluster.kubeconfig),
        &[
            "--controllers=myapp,appcluster",
            "--watch-namespace=default",
        ],
    );
    operator.ready().await;
    for sample in ["example_v1_myapp.yaml", "demo_v1_appcluster.yaml"] {
        cluster.kubectl(&[
            "apply",
            "-f",
            &repo_file(&format!("config/samples/{sample}")),
        ]);
    }
    converged(
        &cluster,
        "nginxinc/nginx-unprivileged:1.22",
        2,
        support::TIMEOUT,
        "the samples to converge",
    )
    .await;

    // The API server is killed and down for 5 s, then etcd for 10 s (no object may be lost):
    // each time the operator stays up and converges the next edits.
    let after_api_server = crash_then_edit(
        &cluster,
        &mut operator,
        "kube-apiserver",
        5,
        "nginx:1.28",
        3,
    )
    .await;
    let after_etcd = crash_then_edit(&cluster, &mut operator, "etcd", 10, "nginx:1.29", 2).await;
    println!(
        "converged {after_api_server:?} after the API server was back, {after_etcd:?} after etcd was back"
    );
    log_has_no_panic(&operator);
}
