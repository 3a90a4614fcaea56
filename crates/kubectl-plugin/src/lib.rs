//! `kubectl app-operator`: the kinds it knows, `KIND/NAME` as kubectl spells it, the status
//! screen and what a report leaves out, from what the API server returned (pure: tested without
//! a cluster).

pub mod backups;

use std::fmt::Write as _;

use kube::discovery::ApiResource;
use serde_json::Value;

/// One of the operator's kinds and the names kubectl accepts for it (kind, singular, plural,
/// short names), lowercase.
#[derive(Debug)]
pub struct Kind {
    pub kind: &'static str,
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    names: &'static [&'static str],
}

pub const KINDS: [Kind; 6] = [
    Kind {
        kind: "MyApp",
        group: "example.com",
        version: "v1",
        plural: "myapps",
        names: &["myapp", "mya"],
    },
    Kind {
        kind: "AppCluster",
        group: "demo.demo.io",
        version: "v1",
        plural: "appclusters",
        names: &["appcluster", "appc"],
    },
    Kind {
        kind: "Sample",
        group: "example.com",
        version: "v1alpha1",
        plural: "samples",
        names: &["sample", "smpl"],
    },
    Kind {
        kind: "EtcdCluster",
        group: "etcd.database.coreos.com",
        version: "v1beta2",
        plural: "etcdclusters",
        names: &["etcdcluster", "etcd"],
    },
    Kind {
        kind: "EtcdBackup",
        group: "etcd.database.coreos.com",
        version: "v1beta2",
        plural: "etcdbackups",
        names: &["etcdbackup"],
    },
    Kind {
        kind: "SampleDB",
        group: "db.example.com",
        version: "v1alpha1",
        plural: "sampledbs",
        names: &["sampledb", "sdb"],
    },
];

impl Kind {
    pub fn api_resource(&self) -> ApiResource {
        ApiResource {
            group: self.group.to_owned(),
            version: self.version.to_owned(),
            api_version: format!("{}/{}", self.group, self.version),
            kind: self.kind.to_owned(),
            plural: self.plural.to_owned(),
        }
    }

    /// Whether kubectl would take `name` for this kind: its names, its plural, or either with
    /// the group (`etcdclusters.etcd.database.coreos.com`).
    fn is_named(&self, name: &str) -> bool {
        let name = name.to_ascii_lowercase();
        let (short, group) = name.split_once('.').unwrap_or((&name, ""));
        (group.is_empty() || group == self.group)
            && (short == self.plural || self.names.contains(&short))
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ReferenceError {
    #[error("`{0}` is not KIND/NAME (e.g. etcd/example-etcd-cluster, sampledb/db)")]
    NotKindSlashName(String),
    #[error("`{0}` is not one of app-operator's kinds: {kinds}", kinds = kind_names())]
    UnknownKind(String),
}

fn kind_names() -> String {
    KINDS
        .iter()
        .map(|kind| kind.names.join("|"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `KIND/NAME` (as `kubectl get` takes it) → the kind and the name.
pub fn parse_reference(reference: &str) -> Result<(&'static Kind, &str), ReferenceError> {
    let (kind, name) = reference
        .split_once('/')
        .filter(|(kind, name)| !kind.is_empty() && !name.is_empty() && !name.contains('/'))
        .ok_or_else(|| ReferenceError::NotKindSlashName(reference.to_owned()))?;
    let kind = KINDS
        .iter()
        .find(|known| known.is_named(kind))
        .ok_or_else(|| ReferenceError::UnknownKind(kind.to_owned()))?;
    Ok((kind, name))
}

/// A value as one short line: strings bare, the rest as compact JSON.
fn inline(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Null => "-".to_owned(),
        other => other.to_string(),
    }
}

/// `value`'s `key`, or null: JSON from the API server may lack any field.
fn field<'a>(value: &'a Value, key: &str) -> &'a Value {
    value.get(key).unwrap_or(&Value::Null)
}

fn text<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// The status screen of `object` (one of the operator's kinds, as the API server returned it),
/// its `children` (objects it controls) and its `events` (oldest first):
/// - whether the status is for the current spec (`observedGeneration`), and Ready;
/// - the conditions, one line each;
/// - every other status field (members, backups, versions, phase);
/// - the children with their phase or readiness, and the last events.
pub fn render_status(object: &Value, children: &[Value], events: &[Value]) -> String {
    let mut out = String::new();
    let generation = object
        .pointer("/metadata/generation")
        .and_then(Value::as_i64);
    // 0 is the CRDs' default status: none written yet.
    let observed = object
        .pointer("/status/observedGeneration")
        .and_then(Value::as_i64)
        .filter(|observed| *observed > 0);
    let _ = writeln!(
        out,
        "{} {}/{}",
        text(object, "/kind"),
        text(object, "/metadata/namespace"),
        text(object, "/metadata/name"),
    );
    let conditions: Vec<&Value> = object
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .map(|all| all.iter().collect())
        .unwrap_or_default();
    let ready = conditions
        .iter()
        .find(|condition| field(condition, "type") == "Ready")
        .map_or(
            "Unknown (no Ready condition yet)",
            |condition| match field(condition, "status").as_str() {
                Some("True") => "True",
                Some("False") => "False",
                _ => "Unknown",
            },
        );
    let _ = writeln!(out, "Ready: {ready}");
    let _ = match (generation, observed) {
        (Some(generation), Some(observed)) if generation == observed => {
            writeln!(out, "Spec: generation {generation}, reconciled")
        }
        (Some(generation), Some(observed)) => writeln!(
            out,
            "Spec: generation {generation}, status is of generation {observed}: not reconciled yet"
        ),
        (Some(generation), None) => writeln!(
            out,
            "Spec: generation {generation}, never reconciled (is the operator running?)"
        ),
        _ => Ok(()),
    };

    if !conditions.is_empty() {
        let _ = writeln!(out, "\nConditions:");
        for condition in &conditions {
            let _ = writeln!(
                out,
                "  {:<12} {:<7} {:<24} {}",
                inline(field(condition, "type")),
                inline(field(condition, "status")),
                inline(field(condition, "reason")),
                field(condition, "message").as_str().unwrap_or("")
            );
        }
    }

    let other_fields: Vec<(&String, &Value)> = object
        .pointer("/status")
        .and_then(Value::as_object)
        .map(|status| {
            status
                .iter()
                .filter(|(key, _)| !matches!(key.as_str(), "conditions" | "observedGeneration"))
                .collect()
        })
        .unwrap_or_default();
    if !other_fields.is_empty() {
        let _ = writeln!(out, "\nStatus:");
        for (key, value) in other_fields {
            let _ = writeln!(out, "  {key}: {}", inline(value));
        }
    }

    let _ = writeln!(out, "\nChildren:");
    if children.is_empty() {
        let _ = writeln!(out, "  none");
    }
    for child in children {
        let _ = writeln!(
            out,
            "  {}/{}  {}",
            text(child, "/kind"),
            text(child, "/metadata/name"),
            child_state(child)
        );
    }

    const SHOWN_EVENTS: usize = 10;
    let _ = writeln!(out, "\nEvents:");
    if events.is_empty() {
        let _ = writeln!(out, "  none");
    }
    for event in events
        .iter()
        .skip(events.len().saturating_sub(SHOWN_EVENTS))
    {
        let when = [
            "/lastTimestamp",
            "/eventTime",
            "/metadata/creationTimestamp",
        ]
        .iter()
        .map(|pointer| text(event, pointer))
        .find(|time| !time.is_empty())
        .unwrap_or("");
        let count = field(event, "count").as_i64().filter(|count| *count > 1);
        let _ = writeln!(
            out,
            "  {when}  {:<7} {:<24} {}{}",
            text(event, "/type"),
            text(event, "/reason"),
            text(event, "/message"),
            count
                .map(|count| format!(" (x{count})"))
                .unwrap_or_default()
        );
    }
    out
}

/// Whether a Pod (as JSON) has its `Ready` condition `True`.
pub fn pod_ready(pod: &Value) -> bool {
    field(field(pod, "status"), "conditions")
        .as_array()
        .and_then(|conditions| conditions.iter().find(|c| field(c, "type") == "Ready"))
        .is_some_and(|c| field(c, "status") == "True")
}

/// A child's state in a few words: a Pod's phase and readiness, a workload's ready replicas, a
/// Job's outcome, a claim's phase.
fn child_state(child: &Value) -> String {
    let status = field(child, "status");
    match text(child, "/kind") {
        "Pod" => format!(
            "{} {}",
            inline(field(status, "phase")),
            if pod_ready(child) {
                "ready"
            } else {
                "not ready"
            }
        ),
        "Deployment" | "StatefulSet" => format!(
            "{}/{} ready",
            field(status, "readyReplicas").as_i64().unwrap_or(0),
            field(field(child, "spec"), "replicas")
                .as_i64()
                .unwrap_or(0)
        ),
        "Job" => {
            if field(status, "succeeded").as_i64().unwrap_or(0) > 0 {
                "succeeded".to_owned()
            } else if field(status, "failed").as_i64().unwrap_or(0) > 0 {
                format!("failed {} times", field(status, "failed"))
            } else {
                "running".to_owned()
            }
        }
        "PersistentVolumeClaim" => inline(field(status, "phase")),
        _ => String::new(),
    }
}

/// `object` as a support bundle may show it: no `managedFields`, no last-applied copy (it may hold
/// what the user applied, values included), and every container's literal environment values
/// replaced (a password may be one); references to Secrets stay, as names.
pub fn redacted(mut object: Value) -> Value {
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("managedFields");
        if let Some(annotations) = metadata
            .get_mut("annotations")
            .and_then(Value::as_object_mut)
        {
            annotations.remove("kubectl.kubernetes.io/last-applied-configuration");
        }
    }
    redact_env(&mut object);
    object
}

/// Replaces the `value` of every `env` entry anywhere in `value` (Pod specs, templates, our
/// kinds' `spec.env`).
fn redact_env(value: &mut Value) {
    match value {
        Value::Object(fields) => {
            for (key, field) in fields.iter_mut() {
                if key == "env"
                    && let Value::Array(entries) = field
                {
                    for entry in entries.iter_mut() {
                        if let Some(literal) = entry.get_mut("value") {
                            *literal = Value::String("<redacted>".to_owned());
                        }
                    }
                } else {
                    redact_env(field);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact_env),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_report_drops_managed_fields_the_last_applied_copy_and_literal_env_values() {
        let pod = json!({
            "kind": "Pod",
            "metadata": { "name": "db-0", "managedFields": [{ "manager": "kubectl" }],
                "annotations": { "kubectl.kubernetes.io/last-applied-configuration": "{s3cret}",
                                 "kept": "yes" } },
            "spec": { "containers": [{ "name": "postgres", "env": [
                { "name": "POSTGRES_PASSWORD", "value": "s3cret" },
                { "name": "FROM_SECRET", "valueFrom": { "secretKeyRef": { "name": "db", "key": "password" } } }
            ] }] }
        });
        let shown = redacted(pod).to_string();
        assert!(
            !shown.contains("s3cret") && !shown.contains("managedFields"),
            "{shown}"
        );
        assert!(
            shown.contains("\"kept\":\"yes\"") && shown.contains("\"secretKeyRef\""),
            "{shown}"
        );
        assert!(shown.contains("\"value\":\"<redacted>\""), "{shown}");
    }

    #[test]
    fn references_are_read_as_kubectl_reads_them() {
        for reference in [
            "etcd/example",
            "EtcdCluster/example",
            "etcdclusters/example",
            "etcdclusters.etcd.database.coreos.com/example",
        ] {
            let (kind, name) = parse_reference(reference).unwrap();
            assert_eq!((kind.kind, name), ("EtcdCluster", "example"), "{reference}");
        }
        assert_eq!(parse_reference("sdb/db").unwrap().0.kind, "SampleDB");
        assert_eq!(
            parse_reference("pods/web").unwrap_err(),
            ReferenceError::UnknownKind("pods".to_owned())
        );
        assert!(matches!(
            parse_reference("etcd.example.com/x"),
            Err(ReferenceError::UnknownKind(_))
        ));
        for malformed in ["etcd", "etcd/", "/x", "etcd/a/b"] {
            assert_eq!(
                parse_reference(malformed).unwrap_err(),
                ReferenceError::NotKindSlashName(malformed.to_owned())
            );
        }
    }

    fn etcd(generation: i64, observed: Option<i64>) -> Value {
        json!({
            "kind": "EtcdCluster",
            "metadata": { "name": "example", "namespace": "db", "generation": generation },
            "status": {
                "observedGeneration": observed,
                "phase": "Running",
                "members": { "ready": ["example-a", "example-b"], "unready": ["example-c"] },
                "conditions": [
                    { "type": "Ready", "status": "False", "reason": "MembersNotReady",
                      "message": "2 of 3 members ready" },
                    { "type": "Degraded", "status": "False", "reason": "AsExpected", "message": "" }
                ]
            }
        })
    }

    #[test]
    fn the_status_screen_says_ready_for_which_generation_with_members_children_and_events() {
        let children = [
            json!({ "kind": "Pod", "metadata": { "name": "example-a" },
                    "status": { "phase": "Running",
                                "conditions": [{ "type": "Ready", "status": "True" }] } }),
            json!({ "kind": "Pod", "metadata": { "name": "example-c" },
                    "status": { "phase": "Pending" } }),
        ];
        let events: Vec<Value> = (0..12)
            .map(|i| {
                json!({ "type": "Normal", "reason": format!("Step{i}"), "message": "m",
                        "lastTimestamp": format!("2026-11-28T03:00:{i:02}Z"), "count": 1 })
            })
            .collect();
        let screen = render_status(&etcd(4, Some(4)), &children, &events);
        for line in [
            "EtcdCluster db/example",
            "Ready: False",
            "Spec: generation 4, reconciled",
            "  Ready        False   MembersNotReady          2 of 3 members ready",
            "  members: {\"ready\":[\"example-a\",\"example-b\"],\"unready\":[\"example-c\"]}",
            "  phase: Running",
            "  Pod/example-a  Running ready",
            "  Pod/example-c  Pending not ready",
            "  2026-11-28T03:00:11Z  Normal  Step11",
        ] {
            assert!(screen.contains(line), "no `{line}` in:\n{screen}");
        }
        assert!(
            !screen.contains("Step1 "),
            "only the last ten events:\n{screen}"
        );
        assert!(!screen.contains("observedGeneration"), "{screen}");
    }

    #[test]
    fn a_status_of_an_older_generation_or_none_is_said() {
        assert!(
            render_status(&etcd(5, Some(4)), &[], &[])
                .contains("generation 5, status is of generation 4: not reconciled yet")
        );
        let fresh = json!({ "kind": "MyApp", "metadata": { "name": "web", "generation": 1 },
                            "status": { "observedGeneration": 0 } });
        let screen = render_status(&fresh, &[], &[]);
        assert!(
            screen.contains("Ready: Unknown (no Ready condition yet)"),
            "{screen}"
        );
        assert!(
            screen.contains("never reconciled (is the operator running?)"),
            "{screen}"
        );
        assert!(screen.contains("Children:\n  none\n"), "{screen}");
    }
}
