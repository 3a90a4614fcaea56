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

/// Every metric the alert rules use is one the operator exports (a renamed metric would leave
/// an alert that can never fire).
#[test]
fn the_alert_rules_name_only_exported_metrics() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../config/prometheus/alerts.yaml"
    );
    let rules: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    // A family is exposed once it has a series: record one of each the alerts could use.
    let metrics = app_operator::telemetry::metrics::Metrics::default();
    metrics.reconcile_finished("sampledb", Some("Conflict"));
    for backups in [&metrics.sampledb_backups, &metrics.etcd_backups] {
        backups.finished("ns", "db", "failed");
        backups.set_last_success("ns", "db", 1);
    }
    metrics.set_etcd_snapshot_size("ns", "etcd", 1);
    metrics.set_etcd_cluster("ns", "etcd", [1, 1, 0, 0], true);
    metrics.cleanup_skipped("sampledb", "NamespaceTerminating");
    let exposition = metrics.encode().unwrap();
    // `# TYPE <family> <kind>`: counters are sampled as `<family>_total`.
    let exported: Vec<String> = exposition
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .flat_map(|rest| {
            let mut words = rest.split(' ');
            let family = words.next().unwrap_or_default().to_owned();
            match words.next() {
                Some("counter") => vec![format!("{family}_total")],
                Some("histogram") => ["_bucket", "_sum", "_count"]
                    .map(|suffix| format!("{family}{suffix}"))
                    .to_vec(),
                _ => vec![family],
            }
        })
        .collect();
    let mut checked = 0;
    for group in rules["spec"]["groups"].as_sequence().unwrap() {
        for rule in group["rules"].as_sequence().unwrap() {
            let expr = rule["expr"].as_str().unwrap();
            let names = expr
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|word| {
                    word.starts_with("app_operator_") || word.starts_with("controller_runtime_")
                });
            for name in names {
                assert!(
                    exported.iter().any(|e| e == name),
                    "alert {} uses {name}, which the operator does not export",
                    rule["alert"].as_str().unwrap_or_default()
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 5, "only {checked} metric references found");
}
