//! `kubectl app-operator` against the local control plane, run as kubectl runs it (the
//! `kubectl-app_operator` binary with the user's kubeconfig): `status` shows what the API server
//! holds for an EtcdCluster (its status, a member Pod it controls, its events), `retry` sets the
//! annotation the controllers honour, `report` bundles all of it without the Pod's literal env
//! value, `backup` and `clone` refuse what they cannot do before writing, and mistakes end in one
//! clear line and a failing exit.

// Test code: a failed expectation is a failed test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::process::Command;

use kube::api::{DynamicObject, PostParams};
use kubectl_app_operator::{KINDS, parse_reference};

const CRDS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../config/crd/bases");

/// The plugin's exit status, stdout and stderr.
fn plugin(args: &[&str]) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_kubectl-app_operator"))
        .args(args)
        .env("KUBECONFIG", testkit::kubeconfig())
        .output()
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test]
async fn status_retry_report_backup_and_clone_show_and_touch_an_etcd_cluster_as_kubectl_would() {
    testkit::kubectl_ok(&["apply", "--server-side", "--force-conflicts", "-f", CRDS]);
    testkit::kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        "crd/etcdclusters.etcd.database.coreos.com",
    ]);
    let ns = testkit::TestNamespace::new("plugin").await;
    let (kind, _) = parse_reference("etcd/x").unwrap();
    let clusters: kube::Api<DynamicObject> =
        kube::Api::namespaced_with(testkit::client().await, &ns.name, &kind.api_resource());
    let cluster = clusters
        .create(
            &PostParams::default(),
            &testkit::object(serde_json::json!({
                "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
                "metadata": { "name": "example" },
                "spec": { "size": 3, "version": "3.6.6" }
            })),
        )
        .await
        .unwrap();
    let uid = cluster.metadata.uid.clone().unwrap();
    // What the operator would have written: no operator runs here, the screen shows the API's.
    testkit::kubectl_ok(&[
        "patch",
        "etcdcluster",
        "example",
        "-n",
        &ns.name,
        "--subresource=status",
        "--type=merge",
        "-p",
        &serde_json::json!({ "status": {
            "observedGeneration": 1, "phase": "Running", "size": 3, "readyMembers": 2,
            "members": { "ready": ["example-a", "example-b"], "unready": ["example-c"] },
            "conditions": [{ "type": "Ready", "status": "False", "reason": "MembersNotReady",
                             "message": "2 of 3 members ready",
                             "lastTransitionTime": "2026-11-28T03:00:00Z" }]
        }})
        .to_string(),
    ]);
    let owner = serde_json::json!([{
        "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
        "name": "example", "uid": uid, "controller": true
    }]);
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = ns.api();
    pods.create(
        &PostParams::default(),
        &testkit::object(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": { "name": "example-a", "ownerReferences": owner },
            "spec": { "containers": [{ "name": "etcd", "image": "etcd:3.6.6",
                "env": [{ "name": "ETCD_ROOT_PASSWORD", "value": "s3cret" }] }] }
        })),
    )
    .await
    .unwrap();
    let events: kube::Api<k8s_openapi::api::core::v1::Event> = ns.api();
    events
        .create(
            &PostParams::default(),
            &testkit::object(serde_json::json!({
                "apiVersion": "v1", "kind": "Event",
                "metadata": { "name": "example.member-added" },
                "involvedObject": { "apiVersion": "etcd.database.coreos.com/v1beta2",
                    "kind": "EtcdCluster", "name": "example", "namespace": ns.name, "uid": uid },
                "type": "Normal", "reason": "MemberAdded",
                "message": "added member example-c",
                "lastTimestamp": "2026-11-28T03:00:01Z", "count": 1,
                "source": { "component": "app-operator" }
            })),
        )
        .await
        .unwrap();

    let (ok, screen, stderr) = plugin(&["status", "etcd/example", "-n", &ns.name]);
    assert!(ok, "{stderr}");
    for line in [
        format!("EtcdCluster {}/example", ns.name),
        "Ready: False".to_owned(),
        "Spec: generation 1, reconciled".to_owned(),
        "MembersNotReady          2 of 3 members ready".to_owned(),
        "  members: {\"ready\":[\"example-a\",\"example-b\"],\"unready\":[\"example-c\"]}"
            .to_owned(),
        "  Pod/example-a  ".to_owned(),
        "  2026-11-28T03:00:01Z  Normal  MemberAdded              added member example-c"
            .to_owned(),
    ] {
        assert!(screen.contains(&line), "no `{line}` in:\n{screen}");
    }

    let (ok, said, stderr) = plugin(&["retry", "etcdclusters/example", "-n", &ns.name]);
    assert!(ok, "{stderr}");
    assert!(said.contains("reconcile requested at"), "{said}");
    let annotated = clusters.get("example").await.unwrap();
    let requested = annotated.metadata.annotations.unwrap_or_default();
    assert!(
        requested.contains_key(app_operator_api::RECONCILE_REQUESTED_AT),
        "{requested:?}"
    );

    let bundle = std::env::temp_dir().join(format!("report-{}", ns.name));
    let (ok, said, stderr) = plugin(&[
        "report",
        "-n",
        &ns.name,
        "--output",
        bundle.to_str().unwrap(),
    ]);
    assert!(ok, "{stderr}");
    assert!(said.contains("1 objects, 1 children, "), "{said}");
    let read = |file: &str| std::fs::read_to_string(bundle.join(file)).unwrap();
    let objects: serde_json::Value = serde_json::from_str(&read("objects.json")).unwrap();
    assert_eq!(objects["items"][0]["kind"], "EtcdCluster");
    assert_eq!(objects["items"][0]["status"]["readyMembers"], 2);
    assert!(objects["items"][0]["metadata"]["managedFields"].is_null());
    let children = read("children.json");
    assert!(
        children.contains("\"example-a\"") && children.contains("<redacted>"),
        "{children}"
    );
    assert!(read("events.tsv").contains("MemberAdded"));
    assert!(
        read("operator.txt").contains("Kubernetes v1."),
        "{}",
        read("operator.txt")
    );
    for entry in std::fs::read_dir(&bundle).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        assert!(!text.contains("s3cret"), "a secret value in the report");
    }
    std::fs::remove_dir_all(&bundle).unwrap();

    let (ok, _, stderr) = plugin(&["status", "pods/example", "-n", &ns.name]);
    assert!(!ok);
    assert!(
        stderr.contains("`pods` is not one of app-operator's kinds"),
        "{stderr}"
    );
    let (ok, _, stderr) = plugin(&["status", "sdb/missing", "-n", &ns.name]);
    assert!(!ok);
    assert!(stderr.contains("not found"), "{stderr}");
    // backup and clone say what they cannot do before writing anything.
    let (ok, _, stderr) = plugin(&["backup", "etcd/missing", "-n", &ns.name]);
    assert!(!ok && stderr.contains("not found"), "{stderr}");
    let (ok, _, stderr) = plugin(&["clone", "etcd/example", "copy", "-n", &ns.name]);
    assert!(!ok, "a clone without a backup");
    assert!(
        stderr.contains("no EtcdBackup of example")
            && stderr.contains("kubectl app-operator backup etcd/example --wait"),
        "{stderr}"
    );
    assert!(clusters.get_opt("copy").await.unwrap().is_none());
    let (ok, _, stderr) = plugin(&["backup", "etcd/example", "--timeout", "soon"]);
    assert!(
        !ok && stderr.contains("is not a duration like 90s or 10m"),
        "{stderr}"
    );
    assert_eq!(
        KINDS.len(),
        app_operator_api::crds().len(),
        "every kind is known"
    );
}
