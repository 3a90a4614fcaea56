//! The EtcdCluster API as `kubectl apply` sees it: seed 004's manifests apply unchanged, and bad
//! input is refused with the schema's own message.

// Test code: a failed expectation is a failed test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use testkit::{TestNamespace, kubectl};

/// Seed 004's `etcd-cluster.yaml`, exactly as the tutorial writes it (size 1, etcd 3.2.13).
const SEED_MANIFEST: &str = r#"apiVersion: "etcd.database.coreos.com/v1beta2"
kind: "EtcdCluster"
metadata:
  name: "example-etcd-cluster"
  ## Adding this annotation make this cluster managed by clusterwide operators
  ## namespaced operators ignore it
  # annotations:
  #   etcd.database.coreos.com/scope: clusterwide
spec:
  size: 1
  version: "3.2.13"
"#;

/// `kubectl apply` of `manifest` in `ns`: (succeeded, stdout + stderr).
fn apply(ns: &TestNamespace, manifest: &str) -> (bool, String) {
    let dir = std::env::temp_dir().join(format!("etcd-schema-{}", ns.name));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("etcd-cluster.yaml");
    std::fs::write(&path, manifest).unwrap();
    let output = kubectl(&["apply", "-n", &ns.name, "-f", path.to_str().unwrap()]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

fn with_spec(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: etcd.database.coreos.com/v1beta2\nkind: EtcdCluster\nmetadata:\n  name: {name}\nspec:\n{spec}"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_manifests_apply_unchanged_and_kubectl_shows_the_columns() {
    support::install_crds().await;
    let ns = TestNamespace::new("etcd-schema-seed").await;
    let (ok, out) = apply(&ns, SEED_MANIFEST);
    assert!(ok, "{out}");
    assert!(
        out.contains("etcdcluster.etcd.database.coreos.com/example-etcd-cluster created"),
        "{out}"
    );
    // Step 8: the same file with size 2.
    let (ok, out) = apply(&ns, &SEED_MANIFEST.replace("size: 1", "size: 2"));
    assert!(ok && out.contains("configured"), "{out}");
    let table = testkit::kubectl_ok(&["get", "etcd", "-n", &ns.name, "-o", "wide"]);
    for column in [
        "SIZE",
        "READY MEMBERS",
        "VERSION",
        "READY",
        "STATUS",
        "PHASE",
        "AGE",
    ] {
        assert!(table.contains(column), "no {column} column: {table}");
    }
    let spec = testkit::kubectl_ok(&[
        "get",
        "etcdcluster",
        "example-etcd-cluster",
        "-n",
        &ns.name,
        "-o",
        "jsonpath={.spec.size} {.spec.repository}",
    ]);
    assert_eq!(spec, "2 gcr.io/etcd-development/etcd", "defaults filled in");
    // The scale subresource is `spec.size`.
    testkit::kubectl_ok(&[
        "scale",
        "etcd",
        "example-etcd-cluster",
        "--replicas=3",
        "-n",
        &ns.name,
    ]);
    let size = testkit::kubectl_ok(&[
        "get",
        "etcd",
        "example-etcd-cluster",
        "-n",
        &ns.name,
        "-o",
        "jsonpath={.spec.size}",
    ]);
    assert_eq!(size, "3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_at_apply_with_the_schemas_message() {
    support::install_crds().await;
    let ns = TestNamespace::new("etcd-schema-bad").await;
    let refused = [
        ("size: 0", "spec.size: Invalid value: 0"),
        ("size: 8", "spec.size: Invalid value: 8"),
        ("size: 1\n  version: \"3.6\"", "spec.version"),
        ("size: 1\n  version: latest", "spec.version"),
        (
            "size: 1\n  pod:\n    labels:\n      app: mine",
            "pod.labels must not set 'app' or labels starting with 'etcd_'",
        ),
        (
            "size: 1\n  pod:\n    labels:\n      etcd_node: x",
            "pod.labels must not set 'app' or labels starting with 'etcd_'",
        ),
        (
            "size: 1\n  restore:\n    backupName: b\n    s3: {path: backups/etcd.db, awsSecret: keys}",
            "spec.restore: set exactly one of backupName and s3",
        ),
        (
            "size: 1\n  restore:\n    snapshot: x.db\n    s3: {path: backups/etcd.db, awsSecret: keys}",
            "set it only with backupName",
        ),
        (
            "size: 1\n  restore:\n    s3: {path: no-key, awsSecret: keys}",
            "spec.restore.s3.path",
        ),
        (
            "size: 1\n  restore:\n    s3: {path: backups/etcd.db, awsSecret: keys, endpoint: 'ftp://x'}",
            "spec.restore.s3.endpoint",
        ),
    ];
    for (spec, message) in refused {
        let (ok, out) = apply(&ns, &with_spec("bad", &format!("  {spec}\n")));
        assert!(!ok, "accepted:\n{spec}");
        assert!(
            out.contains(message),
            "{spec}: expected {message:?} in {out}"
        );
    }
    let long_name = "e".repeat(53);
    let (ok, out) = apply(&ns, &with_spec(&long_name, "  size: 1\n"));
    assert!(
        !ok && out.contains("metadata.name must be at most 52 characters"),
        "{out}"
    );

    // Versions go up only.
    let (ok, out) = apply(
        &ns,
        &with_spec("versions", "  size: 1\n  version: v3.5.21\n"),
    );
    assert!(ok, "{out}");
    let (ok, out) = apply(
        &ns,
        &with_spec("versions", "  size: 1\n  version: 3.4.30\n"),
    );
    assert!(!ok && out.contains("version cannot go down"), "{out}");
    let (ok, out) = apply(
        &ns,
        &with_spec("versions", "  size: 1\n  version: 3.6.16\n"),
    );
    assert!(ok, "an upgrade is accepted: {out}");

    // TLS: the operator's certificate exactly when members serve clients TLS; set at creation.
    let tls = |fields: &str| format!("  size: 1\n  TLS:\n    static:\n{fields}");
    let operator_only = tls("      operatorSecret: op\n");
    let server_only = tls("      member:\n        serverSecret: srv\n");
    for spec in [&operator_only, &server_only] {
        let (ok, out) = apply(&ns, &with_spec("tls", spec));
        assert!(
            !ok && out.contains(
                "TLS.static.operatorSecret and TLS.static.member.serverSecret are set together"
            ),
            "{spec}: {out}"
        );
    }
    let full = tls(
        "      member:\n        peerSecret: peer\n        serverSecret: srv\n      operatorSecret: op\n",
    );
    let (ok, out) = apply(&ns, &with_spec("tls", &full));
    assert!(ok, "{out}");
    let (ok, out) = apply(&ns, &with_spec("tls", "  size: 1\n"));
    assert!(!ok && out.contains("spec.TLS is set at creation"), "{out}");
    let (ok, out) = apply(
        &ns,
        &with_spec(
            "versions",
            &full.replace("size: 1", "size: 1\n  version: 3.6.16"),
        ),
    );
    assert!(!ok && out.contains("spec.TLS is set at creation"), "{out}");
}
