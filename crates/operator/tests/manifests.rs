//! `app-operator crds` prints the committed CRDs, and every kind reads well in kubectl.

// Test code: a failed expectation is a failed test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::process::Command;

/// `app-operator crds` prints exactly the committed CRDs (which `make manifests` keeps current:
/// see `crates/manifests/tests/current.rs`), in the order `crds()` lists them.
#[test]
fn the_crds_subcommand_prints_the_committed_crds() {
    let committed: String = app_operator::api::crds()
        .iter()
        .map(|crd| {
            let file = format!(
                "{}/../../config/crd/bases/{}_{}.yaml",
                env!("CARGO_MANIFEST_DIR"),
                crd.spec.group,
                crd.spec.names.plural
            );
            std::fs::read_to_string(&file).unwrap()
        })
        .collect();
    let output = Command::new(env!("CARGO_BIN_EXE_app-operator"))
        .arg("crds")
        .output()
        .unwrap();
    assert!(output.status.success());
    assert_eq!(String::from_utf8(output.stdout).unwrap(), committed);
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
            // `kubectl explain <kind>.status.conditions` names the condition `kubectl wait` reads.
            let conditions = schema
                .properties
                .as_ref()
                .and_then(|p| p.get("status"))
                .and_then(|status| status.properties.as_ref())
                .and_then(|p| p.get("conditions"))
                .and_then(|c| c.description.clone())
                .unwrap_or_default();
            assert!(
                conditions.contains("Ready"),
                "{kind}'s conditions doc: {conditions:?}"
            );
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
