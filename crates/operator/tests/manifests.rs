//! The committed CRDs are exactly what the Rust types generate (`make manifests` regenerates them).

// Test code: a failed expectation is a failed test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::process::Command;

fn repo_file(file: &str) -> String {
    format!("{}/../../{file}", env!("CARGO_MANIFEST_DIR"))
}

/// The committed `file` (relative to the repository) is what `make manifests` generates.
fn assert_current(file: &str, generated: &str) {
    let committed = std::fs::read_to_string(repo_file(file)).unwrap_or_default();
    assert!(
        committed == generated,
        "{file} is stale: run `make manifests`"
    );
}

#[test]
fn every_generated_file_is_current() {
    let repo = std::path::PathBuf::from(repo_file(""));
    for (file, generated) in app_operator::manifests::generated_files(&repo).unwrap() {
        assert_current(&file, &generated);
    }
    let files = app_operator::manifests::crd_files().unwrap();
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

/// What `kubectl get`, `kubectl get -o wide` and `kubectl explain` show for every kind: a root
/// description written for people, a short name, the `app-operator` category (`kubectl get
/// app-operator`), and for kinds with conditions the Ready condition's status and message.
#[test]
fn every_kind_reads_well_in_kubectl() {
    for crd in app_operator::api::crds() {
        let kind = &crd.spec.names.kind;
        let version = &crd.spec.versions[0];
        let schema = version
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .unwrap();
        let description = schema.description.as_deref().unwrap_or_default();
        assert!(
            description.starts_with(kind.as_str()) && description.len() > 60,
            "kubectl explain {kind} opens with {description:?}"
        );
        assert!(
            crd.spec
                .names
                .short_names
                .as_ref()
                .is_some_and(|s| !s.is_empty()),
            "{kind} has no short name"
        );
        assert!(
            crd.spec
                .names
                .categories
                .as_ref()
                .is_some_and(|c| c.iter().any(|c| c == "app-operator")),
            "{kind} is not in the app-operator category"
        );
        let columns = version
            .additional_printer_columns
            .clone()
            .unwrap_or_default();
        let has_conditions = schema
            .properties
            .as_ref()
            .and_then(|p| p.get("status"))
            .and_then(|status| status.properties.as_ref())
            .is_some_and(|p| p.contains_key("conditions"));
        if has_conditions {
            for (name, field) in [("Ready", "status"), ("Status", "message")] {
                let path = format!(".status.conditions[?(@.type==\"Ready\")].{field}");
                assert!(
                    columns
                        .iter()
                        .any(|c| c.name == name && c.json_path == path),
                    "{kind} has no {name} column showing {path}"
                );
            }
            assert!(
                columns.iter().any(|c| c.priority == Some(1)),
                "{kind} shows nothing more with -o wide"
            );
        }
        assert_eq!(
            columns.last().map(|c| c.name.as_str()),
            Some("Age"),
            "{kind}: Age is the last column, as kubectl's built-in kinds have it"
        );
    }
}
