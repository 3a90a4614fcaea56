//! `EtcdBackup` (`etcd.database.coreos.com/v1beta2`): snapshots of an `EtcdCluster`, once or
//! periodically, written into a PersistentVolumeClaim in the cluster's namespace or uploaded to
//! an S3-compatible bucket (which outlives the namespace). The coreos backup operator's field
//! names where they fit (`storageType`, `s3{path, awsSecret, endpoint, forcePathStyle}`,
//! `backupPolicy`, `maxBackups`, status `succeeded`/`etcdRevision`/…).

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

/// CEL on the spec: `s3` says where exactly when the storage type is S3.
const S3_DESTINATION_RULE: &str = "(self.storageType == 'S3') == has(self.s3)";

/// `<bucket>/<key>`: an S3 bucket name (3–63 lowercase letters, digits, dots and dashes), then a
/// key without spaces.
pub const S3_PATH_PATTERN: &str = r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/[^\s]+$";

/// An `http` or `https` URL of a host (and port), as an S3-compatible store is reached.
pub const S3_ENDPOINT_PATTERN: &str = r"^https?://[^\s/]+/?$";

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
    doc = "EtcdBackup takes snapshots of an EtcdCluster into a PersistentVolumeClaim or an S3-compatible bucket: once, every `backupIntervalInSecond`, or on a cron `schedule`, keeping the newest `maxBackups`. An EtcdCluster created with `spec.restore` starts from one of them.",
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
#[x_kube(validation = Rule::new(S3_DESTINATION_RULE).message("spec.s3 is set exactly when spec.storageType is S3"))]
pub struct EtcdBackupSpec {
    /// EtcdCluster is the cluster to back up, in this namespace.
    pub etcd_cluster: EtcdClusterRef,

    /// StorageType is where snapshots are kept: `PersistentVolume` (a claim in this namespace)
    /// or `S3` (an S3-compatible bucket, see `s3`).
    #[serde(default)]
    pub storage_type: BackupStorageType,

    /// PV is the claim snapshots are written to.
    #[serde(default)]
    pub pv: PersistentVolumeDestination,

    /// S3 is the bucket snapshots are uploaded to, when `storageType` is `S3`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3Source>,

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
    /// An object in an S3-compatible bucket.
    S3,
}

/// S3Source is an object in an S3-compatible bucket and how to reach it (the coreos operator's
/// fields). The operator never reads the credentials: the Pods that upload and download mount
/// the Secret.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct S3Source {
    /// Path is `<bucket>/<key>`. A backup taken once is the object `<key>`; periodic backups
    /// are `<key>_<yyyymmdd-hhmmss>`, the newest `maxBackups` kept.
    #[schemars(length(min = 5, max = 1024), regex(pattern = S3_PATH_PATTERN))]
    pub path: String,

    /// AWSSecret is a Secret in this namespace with the AWS shared files `credentials` (the
    /// `default` profile's `aws_access_key_id` and `aws_secret_access_key`) and, optionally,
    /// `config` (its `region`).
    #[schemars(length(min = 1, max = 253))]
    pub aws_secret: String,

    /// Endpoint of an S3-compatible store, e.g. `https://minio.storage:9000`; AWS S3 when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 8, max = 512), regex(pattern = S3_ENDPOINT_PATTERN))]
    pub endpoint: Option<String>,

    /// ForcePathStyle addresses the bucket in the path (`<endpoint>/<bucket>/<key>`) instead of
    /// the host name, as most S3-compatible stores need.
    #[serde(default)]
    pub force_path_style: bool,
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

/// One snapshot kept in the claim or the bucket.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotRecord {
    /// File is the snapshot's file name in the claim, or its `<bucket>/<key>` in the bucket.
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
    /// ClaimName is the claim the snapshots are in (none when they are in a bucket).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_name: Option<String>,
    /// Snapshots kept in the claim or the bucket, newest first.
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
