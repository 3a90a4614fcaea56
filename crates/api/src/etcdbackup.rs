//! `EtcdBackup` (`etcd.database.coreos.com/v1beta2`): snapshots of an `EtcdCluster`, once or
//! periodically, written into a PersistentVolumeClaim. The coreos backup operator's field names
//! where they fit (`backupPolicy`, `maxBackups`, status `succeeded`/`etcdRevision`/…); the
//! destination is a claim in the cluster's namespace instead of a cloud store.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::conditions::{Condition, conditions_schema};
use crate::validation::QUANTITY_PATTERN;

/// Backup Jobs are `<name>-<yyyymmdd>-<hhmmss>` and their name is a label value on their Pods.
const NAME_RULE: &str =
    "self.metadata.name.size() <= 47 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')";

/// CEL: one way of repeating, not two.
const ONE_PERIOD_RULE: &str =
    "!has(self.schedule) || !has(self.backupIntervalInSecond) || self.backupIntervalInSecond == 0";

/// A file name in the claim, without directories.
pub const FILE_PATTERN: &str = r"^[A-Za-z0-9][A-Za-z0-9._-]*$";

/// EtcdBackupSpec defines which cluster is backed up, where to, and how often.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "etcd.database.coreos.com",
    version = "v1beta2",
    kind = "EtcdBackup",
    namespaced,
    status = "EtcdBackupStatus",
    shortname = "etcdbackup",
    category = "app-operator",
    doc = "EtcdBackup takes snapshots of an EtcdCluster into a PersistentVolumeClaim: once, every `backupIntervalInSecond`, or on a cron `schedule`, keeping the newest `maxBackups`. An EtcdCluster created with `spec.restore` starts from one of them.",
    printcolumn(name = "Cluster", type_ = "string", json_path = ".spec.etcdCluster.name"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].message"
    ),
    printcolumn(name = "Revision", type_ = "integer", json_path = ".status.etcdRevision"),
    printcolumn(
        name = "Last Success",
        type_ = "date",
        json_path = ".status.lastSuccessDate"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        priority = 1,
        json_path = ".status.reason"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    validation = Rule::new(NAME_RULE).message(
        "metadata.name must be at most 47 characters of lowercase letters, digits and '-', start with a letter and end with a letter or digit: backup Jobs are named <name>-<date>-<time>"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct EtcdBackupSpec {
    /// EtcdCluster is the cluster to back up, in this namespace.
    pub etcd_cluster: EtcdClusterRef,

    /// StorageType is where snapshots are kept: `PersistentVolume` (a claim in this namespace).
    #[serde(default)]
    pub storage_type: BackupStorageType,

    /// PV is the claim snapshots are written to.
    #[serde(default)]
    pub pv: PersistentVolumeDestination,

    /// BackupPolicy repeats the backup, bounds each attempt and limits how many snapshots are
    /// kept. Without it, one snapshot is taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_policy: Option<BackupPolicy>,
}

/// EtcdClusterRef names an EtcdCluster in the same namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct EtcdClusterRef {
    /// Name of the EtcdCluster.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// Where snapshots are kept.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub enum BackupStorageType {
    /// A PersistentVolumeClaim in the backup's namespace.
    #[default]
    PersistentVolume,
}

/// PersistentVolumeDestination is the claim snapshots go to.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PersistentVolumeDestination {
    /// ClaimName is an existing claim to write to. When unset, the operator creates
    /// `<name>-snapshots`, which it keeps when the EtcdBackup is deleted (snapshots outlive it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub claim_name: Option<String>,

    /// VolumeSize of the claim the operator creates, e.g. `1Gi`.
    #[serde(default = "default_volume_size")]
    #[schemars(regex(pattern = QUANTITY_PATTERN))]
    pub volume_size: String,

    /// StorageClassName of the claim the operator creates (the default class when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
}

impl Default for PersistentVolumeDestination {
    fn default() -> PersistentVolumeDestination {
        PersistentVolumeDestination {
            claim_name: None,
            volume_size: default_volume_size(),
            storage_class_name: None,
        }
    }
}

fn default_volume_size() -> String {
    "1Gi".to_owned()
}

/// BackupPolicy defines when backups run, how long one may take and how many are kept.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(ONE_PERIOD_RULE).message("backupPolicy: set either backupIntervalInSecond or schedule, not both"))]
pub struct BackupPolicy {
    /// TimeoutInSecond bounds one backup (its Job's activeDeadlineSeconds): a backup that hangs
    /// fails then, and the next one still runs.
    #[serde(default = "default_timeout")]
    #[schemars(range(min = 1, max = 86_400))]
    pub timeout_in_second: i64,

    /// BackupIntervalInSecond takes a backup every so many seconds; 0 takes one only.
    #[serde(default)]
    #[schemars(range(min = 0, max = 31_536_000))]
    pub backup_interval_in_second: i64,

    /// Schedule in cron format instead of an interval: 5 fields (`0 3 * * *`) or 6 with seconds
    /// first. After the operator was down, one backup catches up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub schedule: Option<String>,

    /// MaxBackups is how many snapshots are kept; a new one replaces the oldest once there are
    /// this many.
    #[serde(default = "default_max_backups")]
    #[schemars(range(min = 1, max = 100))]
    pub max_backups: i32,
}

impl Default for BackupPolicy {
    fn default() -> BackupPolicy {
        BackupPolicy {
            timeout_in_second: default_timeout(),
            backup_interval_in_second: 0,
            schedule: None,
            max_backups: default_max_backups(),
        }
    }
}

fn default_timeout() -> i64 {
    300
}

fn default_max_backups() -> i32 {
    5
}

/// One snapshot kept in the claim.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotRecord {
    /// File is the snapshot's file name in the claim.
    pub file: String,
    /// Time the backup finished.
    pub time: Time,
    /// EtcdRevision of the member the snapshot was taken from, when it started (the snapshot
    /// holds at least this revision).
    pub etcd_revision: i64,
    /// EtcdVersion of that member.
    pub etcd_version: String,
    /// SizeBytes of that member's database, which the snapshot copies.
    pub size_bytes: i64,
    /// Job that took it.
    pub job: String,
}

/// EtcdBackupStatus reports the latest backup and the snapshots kept.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EtcdBackupStatus {
    /// Succeeded is whether the latest backup succeeded.
    #[serde(default)]
    pub succeeded: bool,
    /// Reason the latest backup failed or could not start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// EtcdVersion of the latest snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_version: Option<String>,
    /// EtcdRevision of the latest snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_revision: Option<i64>,
    /// LastSuccessDate is when the latest successful backup finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_success_date: Option<Time>,
    /// LastFailureDate is when the latest failed backup failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failure_date: Option<Time>,
    /// ClaimName is the claim the snapshots are in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_name: Option<String>,
    /// Snapshots kept in the claim, newest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub snapshots: Vec<SnapshotRecord>,
    /// LastScheduleTime is the tick the latest backup Job was started for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_schedule_time: Option<Time>,
    /// NextScheduleTime is the next tick, for periodic backups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_schedule_time: Option<Time>,
    /// SkippedSchedules counts ticks that passed without a backup (the operator was down, or a
    /// backup was still running): after a gap one backup catches up, not one per missed tick.
    #[serde(default)]
    pub skipped_schedules: i64,
    /// Conditions: Ready (the latest backup succeeded and nothing stands in the way),
    /// Progressing (a backup runs), Degraded (why backups fail or cannot start).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// ObservedGeneration is the most recent generation observed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}
