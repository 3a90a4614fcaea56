//! The two ways to deploy the operator, kustomize and Helm, render objects the API server
//! accepts (server-side dry run), with the security posture the issue asks for.

// Test code: a failed expectation is a failed test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::io::Write;
use std::process::{Command, Stdio};

use testkit::{kubectl_ok, tools};

const POSTURE: [&str; 9] = [
    "runAsNonRoot: true",
    "readOnlyRootFilesystem: true",
    "allowPrivilegeEscalation: false",
    "type: RuntimeDefault",
    "- ALL",
    "--leader-elect",
    "--metrics-secure",
    "terminationGracePeriodSeconds: 10",
    "podAntiAffinity",
];

/// Server-side dry runs need the target namespace to exist.
fn ensure_namespace(name: &str) {
    if !testkit::kubectl(&["get", "namespace", name])
        .status
        .success()
    {
        kubectl_ok(&["create", "namespace", name]);
    }
}

#[test]
fn the_kustomize_deployment_passes_a_server_side_dry_run() {
    ensure_namespace("app-operator-system");
    let default = concat!(env!("CARGO_MANIFEST_DIR"), "/../../config/default");
    let output = kubectl_ok(&["apply", "-k", default, "--dry-run=server"]);
    for object in [
        "deployment.apps/app-operator-controller-manager",
        "clusterrole.rbac.authorization.k8s.io/app-operator-manager-role",
        "serviceaccount/app-operator-controller-manager",
    ] {
        assert!(output.contains(object), "{object} missing from:\n{output}");
    }
    let rendered = kubectl_ok(&["kustomize", default]);
    for posture in [
        "runAsNonRoot: true",
        "readOnlyRootFilesystem: true",
        "allowPrivilegeEscalation: false",
        "type: RuntimeDefault",
        "- ALL",
        "--leader-elect",
        "--metrics-secure",
        "terminationGracePeriodSeconds: 10",
        "podAntiAffinity",
    ] {
        assert!(rendered.contains(posture), "config/default lacks {posture}");
    }
}

fn helm(args: &[&str]) -> String {
    let output = Command::new(tools().bin("helm"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "helm {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn the_helm_chart_lints_and_its_render_passes_a_server_side_dry_run() {
    let chart = concat!(env!("CARGO_MANIFEST_DIR"), "/../../charts/app-operator");
    helm(&["lint", "--strict", chart]);
    ensure_namespace("app-operator-helm");
    let rendered = helm(&[
        "template",
        "demo",
        chart,
        "--namespace",
        "app-operator-helm",
        "--include-crds",
        "--set",
        "watchNamespace=apps",
    ]);
    for posture in POSTURE {
        assert!(rendered.contains(posture), "the chart lacks {posture}");
    }
    assert!(
        rendered.contains("--watch-namespace=apps"),
        "values are not applied"
    );
    let mut apply = Command::new(tools().bin("kubectl"))
        .args(["apply", "--dry-run=server", "-f", "-"])
        .env("KUBECONFIG", testkit::kubeconfig())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    apply
        .stdin
        .take()
        .unwrap()
        .write_all(rendered.as_bytes())
        .unwrap();
    let output = apply.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let applied = String::from_utf8_lossy(&output.stdout);
    assert!(
        applied.contains("deployment.apps/demo-app-operator created (server dry run)"),
        "{applied}"
    );
}
