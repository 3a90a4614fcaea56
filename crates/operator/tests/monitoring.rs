//! The monitoring that ships with the operator holds together: the alerts pass `promtool check
//! rules` and their unit tests (`promtool test rules`), each alert has what an on-call person
//! needs (severity, summary, description, a runbook that exists), and the Grafana dashboard is
//! valid with a query in every panel. No control plane needed.

// Test code: a failed expectation is a failed test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_norway::Value;

const RUNBOOKS_URL: &str =
    "https://github.com/app-operator/app-operator/blob/main/docs/runbooks.md#";

fn repo_file(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

fn read(path: &str) -> String {
    let path = repo_file(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// The PrometheusRule's `spec`: a plain Prometheus rule file (`groups:`).
fn rule_file() -> Value {
    let rule: Value = serde_norway::from_str(&read("config/prometheus/alerts.yaml")).unwrap();
    assert_eq!(rule["kind"].as_str(), Some("PrometheusRule"));
    rule["spec"].clone()
}

/// Every alerting rule of the rule file.
fn alerts(rules: &Value) -> Vec<Value> {
    let groups = rules["groups"].as_sequence().expect("spec.groups");
    groups
        .iter()
        .flat_map(|group| group["rules"].as_sequence().expect("rules").clone())
        .filter(|rule| rule.get("alert").is_some())
        .collect()
}

fn alert_name(alert: &Value) -> &str {
    alert["alert"].as_str().expect("alert name")
}

/// Runs promtool in `dir`, failing the test with its output unless it succeeds.
fn promtool(dir: &Path, args: &[&str]) -> String {
    let output = Command::new(testkit::tools().bin("promtool"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("running promtool: {e}"));
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "promtool {} failed:\n{printed}",
        args.join(" ")
    );
    printed
}

#[test]
fn the_alerts_pass_promtool_check_and_their_unit_tests() {
    let rules = rule_file();
    let dir = std::env::temp_dir().join(format!("app-operator-monitoring-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("alerts.rules.yaml"),
        serde_norway::to_string(&rules).unwrap(),
    )
    .unwrap();
    let tests = read("config/prometheus/alerts_test.yaml");
    std::fs::write(dir.join("alerts_test.yaml"), &tests).unwrap();

    let checked = promtool(&dir, &["check", "rules", "alerts.rules.yaml"]);
    let count = alerts(&rules).len();
    assert!(
        checked.contains(&format!("SUCCESS: {count} rules found")),
        "{checked}"
    );
    promtool(&dir, &["test", "rules", "alerts_test.yaml"]);
    std::fs::remove_dir_all(&dir).unwrap();

    // Every alert has a unit test in which it fires.
    let tests: Value = serde_norway::from_str(&tests).unwrap();
    assert_eq!(
        tests["rule_files"].as_sequence().unwrap()[0].as_str(),
        Some("alerts.rules.yaml")
    );
    let fired: BTreeSet<&str> = tests["tests"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|test| test["alert_rule_test"].as_sequence().unwrap())
        .filter(|case| {
            case["exp_alerts"]
                .as_sequence()
                .is_some_and(|alerts| !alerts.is_empty())
        })
        .map(|case| case["alertname"].as_str().unwrap())
        .collect();
    for alert in alerts(&rules) {
        assert!(
            fired.contains(alert_name(&alert)),
            "alerts_test.yaml has no case in which {} fires",
            alert_name(&alert)
        );
    }
}

/// GitHub's anchor for a Markdown heading: lower case, punctuation dropped, spaces as dashes.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

#[test]
fn every_alert_has_a_severity_a_summary_a_description_and_a_runbook() {
    let runbooks = read("docs/runbooks.md");
    let anchors: BTreeSet<String> = runbooks
        .lines()
        .filter_map(|line| line.strip_prefix("## "))
        .map(anchor)
        .collect();
    let alerts = alerts(&rule_file());
    assert!(alerts.len() >= 11, "only {} alerts", alerts.len());
    for alert in &alerts {
        let name = alert_name(alert);
        let severity = alert["labels"]["severity"].as_str().unwrap_or_default();
        assert!(
            ["critical", "warning", "info"].contains(&severity),
            "{name}: severity {severity:?}"
        );
        for annotation in ["summary", "description"] {
            assert!(
                alert["annotations"][annotation]
                    .as_str()
                    .is_some_and(|text| !text.trim().is_empty()),
                "{name} has no {annotation}"
            );
        }
        let url = alert["annotations"]["runbook_url"]
            .as_str()
            .unwrap_or_else(|| panic!("{name} has no runbook_url"));
        let target = url
            .strip_prefix(RUNBOOKS_URL)
            .unwrap_or_else(|| panic!("{name}: runbook_url {url} is not in {RUNBOOKS_URL}…"));
        assert_eq!(target, name.to_lowercase(), "{name}: runbook_url {url}");
        assert!(
            anchors.contains(target),
            "{name}: docs/runbooks.md has no section `## {name}`"
        );
    }
}

/// Every panel of the dashboard, rows' collapsed panels included.
fn panels(dashboard: &serde_json::Value) -> Vec<&serde_json::Value> {
    let mut all = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        all.push(panel);
        if let Some(nested) = panel["panels"].as_array() {
            all.extend(nested);
        }
    }
    all
}

#[test]
fn the_dashboard_is_valid_json_with_a_query_in_every_panel() {
    let text = read("config/grafana/dashboard.json");
    let dashboard: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("dashboard.json: {e}"));
    assert!(dashboard["title"].as_str().is_some_and(|t| !t.is_empty()));
    let variables = dashboard["templating"]["list"].as_array().unwrap();
    assert!(
        variables.iter().any(|v| v["name"] == "datasource"
            && v["type"] == "datasource"
            && v["query"] == "prometheus"),
        "no ${{datasource}} variable of type prometheus"
    );
    let panels = panels(&dashboard);
    assert!(panels.len() >= 10, "only {} panels", panels.len());
    let mut ids = BTreeSet::new();
    for panel in panels {
        let title = panel["title"].as_str().unwrap_or_default();
        assert!(ids.insert(panel["id"].as_u64()), "{title}: duplicate id");
        if panel["type"] == "row" {
            continue;
        }
        assert_eq!(
            panel["datasource"]["uid"], "${datasource}",
            "{title}: not on the ${{datasource}} variable"
        );
        let targets = panel["targets"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        assert!(
            targets
                .iter()
                .any(|t| t["expr"].as_str().is_some_and(|e| !e.trim().is_empty())),
            "panel {title:?} has no query"
        );
    }
}

/// The metric names a PromQL expression uses, histograms' and counters' series by their family.
fn metric_families(expr: &str) -> impl Iterator<Item = String> + '_ {
    const PREFIXES: [&str; 6] = [
        "controller_runtime_",
        "workqueue_",
        "rest_client_",
        "leader_election_",
        "process_",
        "app_operator_",
    ];
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|word| PREFIXES.iter().any(|prefix| word.starts_with(prefix)))
        .map(|word| {
            ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| word.strip_suffix(suffix))
                .unwrap_or(word)
                .to_owned()
        })
}

/// Every metric family the alerts and the dashboard query.
fn used_metrics() -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    for alert in alerts(&rule_file()) {
        used.extend(metric_families(alert["expr"].as_str().unwrap()));
    }
    let dashboard: serde_json::Value =
        serde_json::from_str(&read("config/grafana/dashboard.json")).unwrap();
    for panel in panels(&dashboard) {
        for target in panel["targets"].as_array().into_iter().flatten() {
            used.extend(metric_families(target["expr"].as_str().unwrap_or_default()));
        }
    }
    assert!(used.len() >= 15, "only {used:?}");
    used
}

/// Every metric the alerts and the dashboard use is one the operator exports (a renamed metric
/// would leave an alert that can never fire and an empty panel).
#[test]
fn every_metric_the_alerts_and_the_dashboard_use_is_exported() {
    // A family is exposed once it has a series: record one of each.
    let metrics = app_operator::telemetry::metrics::Metrics::default();
    metrics.reconcile_finished("sampledb", Some("Conflict"));
    for backups in [&metrics.sampledb_backups, &metrics.etcd_backups] {
        backups.finished("ns", "db", "failed");
        backups.set_last_success("ns", "db", 1);
    }
    metrics.set_etcd_snapshot_size("ns", "etcd", 1);
    metrics.set_etcd_cluster("ns", "etcd", [1, 1, 0, 0], true);
    metrics.cleanup_skipped("sampledb", "NamespaceTerminating");
    metrics.set_degraded("myapp", "ns", "app", Some("ApplyFailed"));
    metrics.set_leader("app-operator", true);
    metrics.api_request(&http::Method::GET, None);
    metrics.controller_started("myapp", 1);
    metrics.workqueue.retried("myapp");
    drop(metrics.reconcile_started("myapp", "ns/app"));
    let exposition = metrics.encode().unwrap();
    // `# TYPE <family> <kind>`: counters are sampled as `<family>_total`.
    let exported: BTreeSet<String> = exposition
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .map(|rest| match rest.split_once(' ') {
            Some((family, "counter")) => format!("{family}_total"),
            Some((family, _)) => family.to_owned(),
            None => rest.to_owned(),
        })
        .collect();
    for name in used_metrics() {
        assert!(
            exported.contains(&name),
            "{name} is used by the alerts or the dashboard, but the operator does not export it"
        );
    }
}

#[test]
fn every_metric_the_alerts_and_the_dashboard_use_is_in_the_metrics_reference() {
    let runbooks = read("docs/runbooks.md");
    let documented: BTreeSet<&str> = runbooks
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split_once('`').map(|(name, _)| name))
        .collect();
    for name in &used_metrics() {
        assert!(
            documented.contains(name.as_str()),
            "{name} is used but not in docs/runbooks.md's metrics reference"
        );
    }
}
