//! `SampleDB` (`db.example.com/v1alpha1`, seed 003): a PostgreSQL database the operator runs from
//! creation to deletion: its volumes, a StatefulSet, an init (or restore) Job once it is up,
//! scheduled backups, offline upgrades, and a snapshot before it goes.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::conditions::{Condition, conditions_schema};
use crate::etcdbackup::S3Source;
use crate::validation::{DNS_1035_NAME_RULE, IMAGE_PATTERN, QUANTITY_PATTERN};

/// The official PostgreSQL image (Docker Hub's `library/postgres`).
pub const DEFAULT_IMAGE: &str = "postgres";

/// The finalizer that holds a deleted SampleDB until its final snapshot is taken.
pub const FINALIZER: &str = "db.example.com/final-snapshot";

/// A PostgreSQL release as its image is tagged: `16`, `16.4` (or `9.6.24`).
const VERSION_PATTERN: &str = r"^[0-9]+(\.[0-9]+){0,2}$";

/// CEL on the whole object (so it can read the status): the version never goes down, except back
/// to the version the data is at (`status.currentVersion`), which is how a failed upgrade is
/// undone. The semver library normalises `16.4` to `16.4.0`.
const NO_DOWNGRADE_RULE: &str = "self.spec.version == oldSelf.spec.version || semver(self.spec.version, true).compareTo(semver(oldSelf.spec.version, true)) >= 0 || (has(self.status) && has(self.status.currentVersion) && self.spec.version == self.status.currentVersion)";

/// CEL: a volume only grows.
const NO_SHRINK_RULE: &str =
    "!isQuantity(self) || !isQuantity(oldSelf) || quantity(self).compareTo(quantity(oldSelf)) >= 0";

/// CEL on the whole object: a restore is neither added nor removed after creation (the
/// field's own rule keeps its value).
const RESTORE_AT_CREATION_RULE: &str = "has(self.spec.restore) == has(oldSelf.spec.restore)";

/// CEL: what the database was created from cannot change afterwards.
const IMMUTABLE_RULE: &str = "self == oldSelf";

/// SampleDBSpec defines the desired state of a PostgreSQL database.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "db.example.com",
    version = "v1alpha1",
    kind = "SampleDB",
    plural = "sampledbs",
    namespaced,
    status = "SampleDBStatus",
    shortname = "sdb",
    category = "app-operator",
    doc = "SampleDB is a PostgreSQL database: a StatefulSet with its volume, an init Job, scheduled backups kept in a claim, restore from a backup at creation, offline upgrades to a newer version, and a final snapshot before it is deleted.",
    printcolumn(name = "Version", type_ = "string", json_path = ".status.currentVersion"),
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
    printcolumn(
        name = "Phase",
        type_ = "string",
        priority = 1,
        json_path = ".status.phase"
    ),
    printcolumn(
        name = "Last Backup",
        type_ = "date",
        json_path = ".status.backup.lastSuccessfulTime"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    validation = Rule::new(DNS_1035_NAME_RULE).message(
        "metadata.name must be at most 63 characters of lowercase letters, digits and '-', start with a letter and end with a letter or digit: it names the database's Service"
    ),
    validation = Rule::new(RESTORE_AT_CREATION_RULE).message("spec.restore is set at creation and cannot change"),
    validation = Rule::new(NO_DOWNGRADE_RULE).message(
        "spec.version cannot go down: PostgreSQL data files cannot be downgraded (only going back to status.currentVersion, after a failed upgrade, is allowed)"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct SampleDBSpec {
    /// Version is the PostgreSQL release, the image tag: `16`, `16.4`. Raising it upgrades the
    /// database offline (stopped, converted by a Job, started on the new version).
    #[schemars(regex(pattern = VERSION_PATTERN))]
    pub version: String,

    /// Image is the image repository; the image is `<image>:<version>`.
    #[serde(default = "default_image")]
    #[schemars(length(min = 1, max = 512), regex(pattern = IMAGE_PATTERN))]
    pub image: String,

    /// Storage of the data and backups volumes.
    #[serde(default)]
    pub storage: Storage,

    /// Credentials of the database superuser.
    #[serde(default)]
    pub credentials: Credentials,

    /// InitSql names a ConfigMap whose `*.sql` keys are run, in name order, once the database first
    /// runs (not when it is restored from a backup).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_sql: Option<InitSql>,

    /// Restore creates the database from a backup in its backups volume instead of running the
    /// init SQL. Set at creation only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(IMMUTABLE_RULE).message("spec.restore is set at creation and cannot change"))]
    pub restore: Option<Restore>,

    /// Backup schedules the backups.
    #[serde(default)]
    pub backup: BackupPolicy,

    /// JobTimeoutSeconds bounds the init, restore and upgrade Jobs (their activeDeadlineSeconds).
    #[serde(default = "default_job_timeout")]
    #[schemars(range(min = 1))]
    pub job_timeout_seconds: i64,

    /// JobPodMetadata is added to the Pods of every Job (backups, init, upgrade, snapshot): for
    /// NetworkPolicies, cost labels, sidecar injection.
    #[serde(default)]
    pub job_pod_metadata: PodMetadata,

    /// Deletion says what happens to the data when the SampleDB is deleted.
    #[serde(default)]
    pub deletion: Deletion,
}

fn default_image() -> String {
    DEFAULT_IMAGE.to_owned()
}

fn default_job_timeout() -> i64 {
    3600
}

/// Storage defines the database's volumes.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Storage {
    /// Size of the data volume, e.g. `10Gi`. It may grow, never shrink.
    #[serde(default = "default_size")]
    #[schemars(regex(pattern = QUANTITY_PATTERN))]
    #[x_kube(validation = Rule::new(NO_SHRINK_RULE).message("storage.size cannot shrink: a volume only grows"))]
    pub size: String,

    /// BackupsSize is the size of the backups volume, where backups and final snapshots are kept.
    /// It may grow, never shrink.
    #[serde(default = "default_size")]
    #[schemars(regex(pattern = QUANTITY_PATTERN))]
    #[x_kube(validation = Rule::new(NO_SHRINK_RULE).message("storage.backupsSize cannot shrink: a volume only grows"))]
    pub backups_size: String,

    /// StorageClassName of both volumes; the cluster's default class when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(IMMUTABLE_RULE).message("storage.storageClassName cannot change: a volume keeps its class"))]
    pub storage_class_name: Option<String>,
}

impl Default for Storage {
    fn default() -> Storage {
        Storage {
            size: default_size(),
            backups_size: default_size(),
            storage_class_name: None,
        }
    }
}

fn default_size() -> String {
    "1Gi".to_owned()
}

/// Credentials names the Secret with the superuser's `username` and `password`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Credentials {
    /// SecretName is a Secret of yours with the keys `username` and `password`. When unset, the
    /// operator creates `<name>-credentials` once, with a random password, and never changes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub secret_name: Option<String>,
}

/// InitSql names the ConfigMap with the initial SQL.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InitSql {
    /// ConfigMapName is the ConfigMap whose `*.sql` keys are run.
    #[schemars(length(min = 1, max = 253))]
    pub config_map_name: String,
}

/// Restore names the backup a new database starts from: a file in a backups volume, or a dump
/// in a bucket (which needs nothing else in this namespace).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("[has(self.backupFile), has(self.s3), has(self.pointInTime)].filter(set, set).size() == 1").message("spec.restore: set exactly one of backupFile, s3 and pointInTime"),
    validation = Rule::new("!has(self.source) || has(self.backupFile)").message("spec.restore.source names the SampleDB whose backups volume holds backupFile: set it only with backupFile"),
)]
pub struct Restore {
    /// BackupFile is a file in the source's backups volume: a backup (`<name>-backup-<time>.dump`)
    /// or a final snapshot (`<name>-final-snapshot-<first 8 characters of its uid>.dump`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    )]
    pub backup_file: Option<String>,

    /// S3 is a dump in a bucket (`path` is `<bucket>/<key>`), as `backup.s3` uploads them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3Source>,

    /// PointInTime recovers the database as it was at a given time, from the base backups and
    /// write-ahead log that a SampleDB with `backup.archiveWal` keeps in a bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub point_in_time: Option<PointInTime>,

    /// Source is the SampleDB in this namespace whose backups volume holds the file: another
    /// one for a clone (it may be deleted, its backups volume is kept). Unset: an earlier
    /// SampleDB of this name, whose backups volume outlives it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub source: Option<String>,
}

/// PointInTime is where a SampleDB archived its write-ahead log, and the time to recover to.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PointInTime {
    /// S3 is the archive: `path` is the `backup.s3.path` of the SampleDB that archived it
    /// (`<bucket>/<key>`, holding `<key>/base/` and `<key>/wal/`).
    pub s3: S3Source,

    /// TargetTime (RFC 3339) is the moment recovered to: every transaction committed at or
    /// before it, none after. A base backup must have been uploaded before it.
    pub target_time: Time,
}

/// BackupPolicy defines when backups run, how many finished Jobs are kept, and whether dumps
/// go to a bucket too.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!has(self.bucketRetention) || has(self.s3)").message("backup.bucketRetention applies to the dumps in backup.s3: set it only with s3"),
    validation = Rule::new("!has(self.archiveWal) || !self.archiveWal || has(self.s3)").message("backup.archiveWal archives to backup.s3: set s3 too"),
)]
pub struct BackupPolicy {
    /// Schedule in cron format: 5 fields (`0 3 * * *`, as a CronJob) or 6 with seconds first
    /// (`*/30 * * * * *`). No backups when unset. After the operator was down, one backup catches
    /// up and the missed ones are counted in `status.backup.skippedSchedules`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 256))]
    pub schedule: Option<String>,

    /// Suspend stops new scheduled backups (a running one finishes; an on-demand one, asked for
    /// with the `app-operator.example.com/backup-requested-at` annotation, still runs).
    #[serde(default)]
    pub suspend: bool,

    /// TimeoutSeconds bounds one backup (its Job's activeDeadlineSeconds): a hung backup fails
    /// instead of holding back the next ones.
    #[serde(default = "default_job_timeout")]
    #[schemars(range(min = 1))]
    pub timeout_seconds: i64,

    /// SuccessfulJobsHistoryLimit is how many succeeded backup Jobs are kept.
    #[serde(default = "default_successful_history")]
    #[schemars(range(min = 0, max = 100))]
    pub successful_jobs_history_limit: i32,

    /// FailedJobsHistoryLimit is how many failed backup Jobs are kept.
    #[serde(default = "default_failed_history")]
    #[schemars(range(min = 0, max = 100))]
    pub failed_jobs_history_limit: i32,

    /// S3 uploads every backup's dump to a bucket as well: `<key>/<job>.dump` of `path`
    /// (`<bucket>/<key>`), so the dumps outlive the namespace. The backups volume keeps its copy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3Source>,

    /// BucketRetention is how many dumps (and base backups) the bucket keeps, and for how long;
    /// all when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket_retention: Option<BucketRetention>,

    /// ArchiveWal archives PostgreSQL's write-ahead log to `s3` continuously (`<key>/wal/`,
    /// each segment once it is full or `archive_timeout`, 5 minutes, has passed) and makes every
    /// backup a base backup there too (`<key>/base/<job>.tar.gz`), so that `restore.pointInTime`
    /// can recover any moment since the first base backup.
    #[serde(default)]
    pub archive_wal: bool,
}

/// BucketRetention bounds the dumps kept in the bucket: after each upload, older ones beyond
/// either limit are deleted (the newest is always kept).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.maxBackups) || has(self.maxAgeHours)").message("bucketRetention: set maxBackups, maxAgeHours or both"))]
pub struct BucketRetention {
    /// MaxBackups is how many dumps are kept, the newest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000))]
    pub max_backups: Option<i32>,

    /// MaxAgeHours deletes dumps older than this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 876_000))]
    pub max_age_hours: Option<i64>,
}

impl Default for BackupPolicy {
    fn default() -> BackupPolicy {
        BackupPolicy {
            schedule: None,
            suspend: false,
            timeout_seconds: default_job_timeout(),
            successful_jobs_history_limit: default_successful_history(),
            failed_jobs_history_limit: default_failed_history(),
            s3: None,
            bucket_retention: None,
            archive_wal: false,
        }
    }
}

fn default_successful_history() -> i32 {
    3
}

fn default_failed_history() -> i32 {
    1
}

/// PodMetadata is the labels and annotations added to Pods.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct PodMetadata {
    /// Labels added to the Pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations added to the Pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// What deleting the SampleDB does to its data.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub enum DeletionPolicy {
    /// Stop the database, snapshot its data into the backups volume, then delete the data.
    #[default]
    Snapshot,
    /// Delete the data without a snapshot.
    Delete,
    /// Keep the data volume (the backups volume is always kept).
    Retain,
}

/// Deletion defines what happens to the data on deletion.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Deletion {
    /// Policy: `Snapshot` (default), `Delete` or `Retain`. The backups volume is always kept.
    #[serde(default)]
    pub policy: DeletionPolicy,

    /// SnapshotTimeoutSeconds bounds the final snapshot; a snapshot that fails or times out keeps
    /// the SampleDB (and its data) until the policy is changed to `Delete` or `Retain`.
    #[serde(default = "default_snapshot_timeout")]
    #[schemars(range(min = 1))]
    pub snapshot_timeout_seconds: i64,
}

impl Default for Deletion {
    fn default() -> Deletion {
        Deletion {
            policy: DeletionPolicy::default(),
            snapshot_timeout_seconds: default_snapshot_timeout(),
        }
    }
}

fn default_snapshot_timeout() -> i64 {
    600
}

/// Phase is the database's life stage.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub enum SampleDBPhase {
    /// The volumes and the database are being made.
    #[default]
    Pending,
    /// The database runs; its init (or restore) Job is under way.
    Initializing,
    /// The database is initialized and serving.
    Ready,
    /// The database is stopped for an upgrade.
    Upgrading,
    /// The SampleDB is being deleted (the final snapshot is under way).
    Deleting,
    /// Initialization failed: see the Degraded condition.
    Failed,
}

/// BackupStatus reports the scheduled and on-demand backups.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BackupStatus {
    /// LastScheduleTime is the schedule tick the latest backup Job was started for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_schedule_time: Option<Time>,
    /// NextScheduleTime is the next tick of the schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_schedule_time: Option<Time>,
    /// LastSuccessfulTime is when the latest successful backup finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_time: Option<Time>,
    /// LastSuccessfulJob is the Job of that backup; its file is `<job>.dump` in the backups volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_job: Option<String>,
    /// LastFailedTime is when the latest failed backup failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failed_time: Option<Time>,
    /// LastFailedJob is the Job of that backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failed_job: Option<String>,
    /// LastHandledRequest is the value of the `app-operator.example.com/backup-requested-at`
    /// annotation the latest on-demand backup was started for (its Job carries the same
    /// annotation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_request: Option<String>,
    /// SkippedSchedules counts the ticks that passed without a backup (the operator was down, or a
    /// backup was still running); after a gap one backup catches up, not one per missed tick.
    #[serde(default)]
    pub skipped_schedules: i64,
}

/// UpgradeStatus reports an upgrade under way, or the last one that failed.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeStatus {
    /// From is the version the data was at.
    pub from: String,
    /// To is the version being upgraded to.
    pub to: String,
    /// Job is the upgrade Job, once it exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
}

/// FinalSnapshotStatus reports the snapshot taken before deletion.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FinalSnapshotStatus {
    /// Job is the snapshot Job; the snapshot is `<job>.dump` in the backups volume.
    pub job: String,
    /// StartTime is when the Job was created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// CompletionTime is when the snapshot was complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
}

/// SampleDBStatus defines the observed state of a SampleDB.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SampleDBStatus {
    /// Phase: Pending, Initializing, Ready, Upgrading, Deleting or Failed.
    #[serde(default)]
    pub phase: SampleDBPhase,
    /// CurrentVersion is the version the data is at (set once initialized, and by upgrades).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_version: Option<String>,
    /// CredentialsSecret is the Secret with the superuser's credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret: Option<String>,
    /// Backup reports the scheduled backups.
    #[serde(default)]
    pub backup: BackupStatus,
    /// Upgrade is the upgrade under way, or the last one that failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade: Option<UpgradeStatus>,
    /// FinalSnapshot is the snapshot taken before deletion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_snapshot: Option<FinalSnapshotStatus>,
    /// Conditions: Ready, Progressing, Degraded, Initialized, LastBackupSucceeded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// ObservedGeneration is the most recent generation observed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}
