//! The committed CRDs are exactly what the Rust types generate (`make manifests` regenerates them).

// Test code: a failed expectation is a failed test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::process::Command;

#[test]
fn config_crd_and_the_chart_match_the_generated_manifests() {
    let files = app_operator::manifests::crd_files().unwrap();
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../config/crd/bases");
    for (name, generated) in &files {
        let committed = std::fs::read_to_string(format!("{dir}/{name}")).unwrap_or_default();
        assert!(
            committed == *generated,
            "config/crd/bases/{name} is stale: run `make manifests`"
        );
    }
    let chart = concat!(env!("CARGO_MANIFEST_DIR"), "/../../charts/app-operator");
    for (name, generated) in &files {
        let committed = std::fs::read_to_string(format!("{chart}/crds/{name}")).unwrap_or_default();
        assert!(
            committed == *generated,
            "charts/app-operator/crds/{name} is stale: run `make manifests`"
        );
    }
    let role = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../config/rbac/role.yaml"
    ))
    .unwrap();
    let rules = std::fs::read_to_string(format!("{chart}/files/manager-role-rules.yaml"))
        .unwrap_or_default();
    assert_eq!(
        Some(rules),
        app_operator::manifests::chart_rules(&role),
        "the chart's ClusterRole rules are stale: run `make manifests`"
    );
    let output = Command::new(env!("CARGO_BIN_EXE_app-operator"))
        .arg("crds")
        .output()
        .unwrap();
    assert!(output.status.success());
    let printed = String::from_utf8(output.stdout).unwrap();
    assert_eq!(
        printed,
        files
            .iter()
            .map(|(_, yaml)| yaml.as_str())
            .collect::<String>()
    );
}
