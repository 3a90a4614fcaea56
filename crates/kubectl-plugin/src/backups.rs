//! `backup` and `clone`: the objects they write and the backups they pick, from what the API
//! server returned (pure).

use serde_json::{Value, json};

/// EtcdBackup names are at most this long (their Jobs and claims add suffixes).
const ETCD_BACKUP_NAME_MAX: usize = 47;

/// The string at `pointer`, else "".
fn str_at<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The API server's random suffix of a generated name.
const GENERATED_SUFFIX: usize = 5;

/// A one-off EtcdBackup of `cluster` into a claim the operator creates, named by the API server
/// after the cluster (`<cluster>-x7k2p`; its Jobs add the time).
pub fn etcd_backup(cluster: &str) -> Value {
    let room = ETCD_BACKUP_NAME_MAX - GENERATED_SUFFIX - 1;
    let prefix: String = cluster.chars().take(room).collect();
    json!({
        "apiVersion": "etcd.database.coreos.com/v1beta2",
        "kind": "EtcdBackup",
        "metadata": { "generateName": format!("{}-", prefix.trim_end_matches('-')) },
        "spec": { "etcdCluster": { "name": cluster } },
    })
}

/// Where an EtcdBackup's latest run stands.
#[derive(Debug, PartialEq, Eq)]
pub enum EtcdBackupState {
    Running,
    /// The snapshot file and the claim it is in.
    Succeeded {
        snapshot: String,
        claim: String,
    },
    /// Why it failed.
    Failed(String),
}

/// Reads an EtcdBackup's status.
pub fn etcd_backup_state(backup: &Value) -> EtcdBackupState {
    let text = |pointer: &str| str_at(backup, pointer).to_owned();
    if backup.pointer("/status/succeeded") == Some(&Value::Bool(true)) {
        return EtcdBackupState::Succeeded {
            snapshot: text("/status/snapshots/0/file"),
            claim: text("/status/claimName"),
        };
    }
    if backup.pointer("/status/lastFailureDate").is_some() {
        return EtcdBackupState::Failed(text("/status/reason"));
    }
    EtcdBackupState::Running
}

/// The newest EtcdBackup of `cluster` that holds a snapshot, by its latest success.
pub fn newest_etcd_backup<'a>(backups: &'a [Value], cluster: &str) -> Option<&'a str> {
    backups
        .iter()
        .filter(|backup| str_at(backup, "/spec/etcdCluster/name") == cluster)
        .filter(|backup| backup.pointer("/status/snapshots/0").is_some())
        .max_by_key(|backup| str_at(backup, "/status/lastSuccessDate"))
        .and_then(|backup| backup.pointer("/metadata/name")?.as_str())
}

/// The dump of a SampleDB's latest successful backup (`<job>.dump`).
pub fn latest_sampledb_backup(db: &Value) -> Option<String> {
    let job = db.pointer("/status/backup/lastSuccessfulJob")?.as_str()?;
    Some(format!("{job}.dump"))
}

/// How a clone starts: an etcd cluster from an EtcdBackup (a snapshot of it, else its newest),
/// a database from a backup file of its source's backups volume.
#[derive(Debug, PartialEq, Eq)]
pub enum CloneFrom {
    EtcdBackup {
        name: String,
        snapshot: Option<String>,
    },
    SampleDBBackup {
        file: String,
    },
}

impl std::fmt::Display for CloneFrom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CloneFrom::EtcdBackup {
                name,
                snapshot: Some(snapshot),
            } => write!(f, "snapshot {snapshot} of EtcdBackup {name}"),
            CloneFrom::EtcdBackup { name, .. } => {
                write!(f, "the newest snapshot of EtcdBackup {name}")
            }
            CloneFrom::SampleDBBackup { file } => write!(f, "backup {file}"),
        }
    }
}

/// `source` (an EtcdCluster or a SampleDB, as the API server returned it) under a new name: the
/// same spec, started from `from`. Refused, with why, for what cannot start that way.
pub fn clone_of(source: &Value, name: &str, from: &CloneFrom) -> Result<Value, String> {
    let kind = str_at(source, "/kind");
    let source_name = str_at(source, "/metadata/name");
    let mut spec = source.pointer("/spec").cloned().unwrap_or_default();
    let Some(fields) = spec.as_object_mut() else {
        return Err(format!("{kind} {source_name} has no spec"));
    };
    let restore = match (kind, from) {
        ("EtcdCluster", _) if fields.contains_key("TLS") => {
            return Err(format!(
                "{source_name} serves TLS with certificates for its own name: create the clone from a manifest with its own certificates and spec.restore"
            ));
        }
        ("EtcdCluster", CloneFrom::EtcdBackup { name, snapshot }) => match snapshot {
            Some(snapshot) => json!({ "backupName": name, "snapshot": snapshot }),
            None => json!({ "backupName": name }),
        },
        ("SampleDB", CloneFrom::SampleDBBackup { file }) => {
            json!({ "backupFile": file, "source": source_name })
        }
        _ => return Err(format!("a {kind} cannot be cloned from {from}")),
    };
    fields.insert("restore".to_owned(), restore);
    Ok(json!({
        "apiVersion": str_at(source, "/apiVersion"),
        "kind": kind,
        "metadata": { "name": name },
        "spec": spec,
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use super::*;

    #[test]
    fn an_etcd_backup_is_named_after_its_cluster_within_47_characters() {
        let backup = etcd_backup("example-etcd-cluster");
        assert_eq!(backup["metadata"]["generateName"], "example-etcd-cluster-");
        assert_eq!(
            backup["spec"],
            json!({ "etcdCluster": { "name": "example-etcd-cluster" } })
        );
        let long = etcd_backup(&"a".repeat(52))["metadata"]["generateName"].clone();
        assert_eq!(long, format!("{}-", "a".repeat(41)));
        // Never a generated name ending in two dashes.
        let dashed =
            etcd_backup(&format!("{}-b", "a".repeat(40)))["metadata"]["generateName"].clone();
        assert_eq!(dashed, format!("{}-", "a".repeat(40)));
    }

    #[test]
    fn the_newest_backup_holding_a_snapshot_of_the_cluster_is_picked() {
        let backup = |name: &str, cluster: &str, success: Option<&str>| {
            json!({
                "metadata": { "name": name },
                "spec": { "etcdCluster": { "name": cluster } },
                "status": success.map_or(json!({}), |at| json!({
                    "lastSuccessDate": at, "snapshots": [{ "file": "s" }]
                })),
            })
        };
        let backups = [
            backup("old", "etcd", Some("2026-11-27T00:00:00Z")),
            backup("new", "etcd", Some("2026-11-28T00:00:00Z")),
            backup("newest-failed", "etcd", None),
            backup("other", "other", Some("2026-11-29T00:00:00Z")),
        ];
        assert_eq!(newest_etcd_backup(&backups, "etcd"), Some("new"));
        assert_eq!(newest_etcd_backup(&backups, "none"), None);
    }

    #[test]
    fn a_backups_state_is_read_from_its_status() {
        let running = json!({ "status": {} });
        let succeeded = json!({ "status": {
            "succeeded": true, "claimName": "c",
            "snapshots": [{ "file": "new.db" }, { "file": "old.db" }],
        } });
        let failed = json!({ "status": {
            "lastFailureDate": "2026-11-28T00:00:00Z", "reason": "no quorum",
        } });
        assert_eq!(etcd_backup_state(&running), EtcdBackupState::Running);
        assert_eq!(
            etcd_backup_state(&succeeded),
            EtcdBackupState::Succeeded {
                snapshot: "new.db".into(),
                claim: "c".into()
            }
        );
        assert_eq!(
            etcd_backup_state(&failed),
            EtcdBackupState::Failed("no quorum".into())
        );
    }

    #[test]
    fn a_clone_has_its_sources_spec_and_starts_from_a_backup() {
        let db = json!({
            "apiVersion": "db.example.com/v1alpha1", "kind": "SampleDB",
            "metadata": { "name": "db", "uid": "u", "resourceVersion": "7" },
            "spec": { "version": "16", "backup": { "schedule": "0 3 * * *" },
                      "restore": { "backupFile": "earlier.dump" } },
            "status": { "backup": { "lastSuccessfulJob": "db-backup-20261128-061500" } },
        });
        let file = latest_sampledb_backup(&db).unwrap();
        assert_eq!(file, "db-backup-20261128-061500.dump");
        let clone = clone_of(&db, "copy", &CloneFrom::SampleDBBackup { file }).unwrap();
        assert_eq!(
            clone,
            json!({
                "apiVersion": "db.example.com/v1alpha1", "kind": "SampleDB",
                "metadata": { "name": "copy" },
                "spec": { "version": "16", "backup": { "schedule": "0 3 * * *" },
                          "restore": { "backupFile": "db-backup-20261128-061500.dump", "source": "db" } },
            })
        );

        let etcd = json!({
            "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
            "metadata": { "name": "etcd" }, "spec": { "size": 3, "version": "3.6.16" },
        });
        let from = CloneFrom::EtcdBackup {
            name: "etcd-20261128-061500".into(),
            snapshot: None,
        };
        let clone = clone_of(&etcd, "etcd-copy", &from).unwrap();
        assert_eq!(
            clone["spec"],
            json!({ "size": 3, "version": "3.6.16",
                    "restore": { "backupName": "etcd-20261128-061500" } })
        );
        let mut tls = etcd.clone();
        tls["spec"]["TLS"] = json!({ "static": {} });
        assert!(
            clone_of(&tls, "etcd-copy", &from)
                .unwrap_err()
                .contains("TLS")
        );
        let wrong = CloneFrom::SampleDBBackup { file: "f".into() };
        assert!(clone_of(&etcd, "etcd-copy", &wrong).is_err());
    }
}
