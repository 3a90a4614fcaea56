//! What a SampleDB is made of, built by pure functions: the connection ConfigMap, the generated
//! credentials Secret, the data and backups claims, the headless Service, the StatefulSet, and
//! the Jobs (init, restore, backup, upgrade, final snapshot) that run [`super::scripts`].

use std::collections::BTreeMap;

use app_operator_api::{BACKUP_REQUESTED_AT, SampleDB};
use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
use k8s_openapi::api::batch::v1::{
    Job, JobSpec, PodFailurePolicy, PodFailurePolicyOnExitCodesRequirement, PodFailurePolicyRule,
};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapEnvSource, ConfigMapVolumeSource, Container, ContainerPort, EnvFromSource,
    EnvVar, EnvVarSource, ExecAction, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    PersistentVolumeClaimVolumeSource, PodSpec, PodTemplateSpec, Probe, Secret, SecretKeySelector,
    Service, ServicePort, ServiceSpec, Volume, VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use super::scripts;
use crate::controllers::bucket::{
    self, Retention, Transfer, Wal, fetch_container, transfer_container,
};
use crate::controllers::restricted::{pod_security_context, restrict, scratch};
use crate::reconcile::{MANAGED_BY, MANAGED_BY_LABEL};

/// Every child carries it: the SampleDB it belongs to. The claims and the final-snapshot Job have
/// no ownerReference (the garbage collector must not delete them first), so this label is how
/// they are found and told apart from a stranger's.
pub const INSTANCE_LABEL: &str = "db.example.com/sampledb";
/// What a Pod or Job does: `database`, or the Job's kind.
pub const ROLE_LABEL: &str = "db.example.com/role";

pub const PORT: i32 = 5432;
/// The database the image creates (`POSTGRES_DB`) and the Jobs work on.
pub const DATABASE: &str = "app";
/// The official image's `postgres` user; Jobs run as it too, so files they write are the server's.
const POSTGRES_UID: i64 = 999;
const DATA_MOUNT: &str = "/var/lib/postgresql/data";
/// A directory below the mount, as the official image recommends (a volume's root may hold
/// `lost+found`, which initdb refuses).
const PGDATA: &str = "/var/lib/postgresql/data/pgdata";
const BACKUPS_MOUNT: &str = "/backups";
/// A base backup on its way to or from a bucket: an emptyDir, so none stays on a volume.
const STAGING_VOLUME: &str = "staging";
const STAGING_MOUNT: &str = "/staging";
const BASE_BACKUP: &str = "/staging/base.tar.gz";
const ACCESS_RULES_MOUNT: &str = "/etc/app-operator/access-rules";
const HBA_FILE: &str = "pg_hba.conf";
const INIT_SQL_MOUNT: &str = "/init-sql";
/// The server's Unix socket directory, as the image has it.
const SOCKETS_MOUNT: &str = "/var/run/postgresql";
/// A finished final-snapshot Job (no owner, so not garbage collected) goes after a day.
const SNAPSHOT_JOB_TTL_SECONDS: i32 = 86_400;

/// The Jobs a SampleDB runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "kebab-case")]
pub enum JobKind {
    Init,
    Restore,
    Backup,
    Upgrade,
    FinalSnapshot,
}

impl JobKind {
    pub fn label(self) -> &'static str {
        self.into()
    }
}

pub fn data_claim(db: &str) -> String {
    format!("{db}-data")
}

pub fn backups_claim(db: &str) -> String {
    format!("{db}-backups")
}

pub fn generated_secret(db: &str) -> String {
    format!("{db}-credentials")
}

fn connection_config_map(db: &str) -> String {
    format!("{db}-connection")
}

pub fn init_job_name(db: &str, kind: JobKind) -> String {
    format!("{db}-{}", kind.label())
}

/// `<db>-backup-20261123-103000`: one name per tick, so a Job made twice for a tick is the same.
pub fn backup_job_name(db: &str, tick: Timestamp) -> String {
    format!("{db}-backup-{}", tick.strftime("%Y%m%d-%H%M%S"))
}

/// `<db>-upgrade-16-4`: one name per target version (the version it came from is in the status).
pub fn upgrade_job_name(db: &str, to: &str) -> String {
    format!("{db}-upgrade-{}", to.replace('.', "-"))
}

/// `<db>-final-snapshot-<first 8 of the uid>`: a SampleDB re-created under the same name gets a
/// snapshot of its own (the backups volume outlives both).
pub fn final_snapshot_job_name(db: &str, uid: &str) -> String {
    let short: String = uid.chars().take(8).collect();
    format!("{db}-final-snapshot-{short}")
}

/// The file a backup, snapshot or upgrade Job writes in the backups volume.
pub fn dump_file(job: &str) -> String {
    format!("{job}.dump")
}

/// Labels selecting a SampleDB's database Pods.
pub fn selector_labels(db: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_owned(), "sampledb".to_owned()),
        ("app.kubernetes.io/instance".to_owned(), db.to_owned()),
        (ROLE_LABEL.to_owned(), "database".to_owned()),
    ])
}

fn labels(db: &str, role: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_owned(), "sampledb".to_owned()),
        ("app.kubernetes.io/instance".to_owned(), db.to_owned()),
        (MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned()),
        (INSTANCE_LABEL.to_owned(), db.to_owned()),
        (ROLE_LABEL.to_owned(), role.to_owned()),
    ])
}

fn meta(db: &SampleDB, name: String, role: &str, owner: Option<&OwnerReference>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: db.namespace(),
        labels: Some(labels(&db.name_any(), role)),
        owner_references: owner.map(|owner| vec![owner.clone()]),
        ..ObjectMeta::default()
    }
}

/// The Secret with the superuser's credentials: the user's, or the generated one.
pub fn credentials_secret(db: &SampleDB) -> String {
    db.spec
        .credentials
        .secret_name
        .clone()
        .unwrap_or_else(|| generated_secret(&db.name_any()))
}

/// The generated credentials (`postgres` and `password`), created once and never applied again.
pub fn generated_credentials(db: &SampleDB, owner: &OwnerReference, password: &str) -> Secret {
    Secret {
        metadata: meta(
            db,
            generated_secret(&db.name_any()),
            "credentials",
            Some(owner),
        ),
        string_data: Some(BTreeMap::from([
            ("username".to_owned(), "postgres".to_owned()),
            ("password".to_owned(), password.to_owned()),
        ])),
        type_: Some("Opaque".to_owned()),
        ..Secret::default()
    }
}

/// Where the database is: `PGHOST`, `PGPORT`, `PGDATABASE` (libpq's own variable names, so a
/// client Pod takes them with `envFrom`).
pub fn connection(db: &SampleDB, owner: &OwnerReference) -> ConfigMap {
    let name = db.name_any();
    ConfigMap {
        metadata: meta(db, connection_config_map(&name), "connection", Some(owner)),
        data: Some(BTreeMap::from([
            ("PGHOST".to_owned(), name),
            ("PGPORT".to_owned(), PORT.to_string()),
            ("PGDATABASE".to_owned(), DATABASE.to_owned()),
        ])),
        ..ConfigMap::default()
    }
}

/// A claim with no ownerReference: the operator deletes the data claim itself, after the final
/// snapshot, and keeps the backups claim.
pub fn claim(db: &SampleDB, name: String, size: &str) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: meta(db, name, "storage", None),
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".to_owned()]),
            storage_class_name: db.spec.storage.storage_class_name.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_owned(),
                    Quantity(size.to_owned()),
                )])),
                ..VolumeResourceRequirements::default()
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        status: None,
    }
}

/// The headless Service that gives the database Pod its name (`PGHOST`).
pub fn service(db: &SampleDB, owner: &OwnerReference) -> Service {
    let name = db.name_any();
    Service {
        metadata: meta(db, name.clone(), "database", Some(owner)),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".to_owned()),
            selector: Some(selector_labels(&name)),
            ports: Some(vec![ServicePort {
                name: Some("postgres".to_owned()),
                port: PORT,
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

fn image(db: &SampleDB, version: &str) -> String {
    format!("{}:{version}", db.spec.image)
}

fn secret_env(name: &str, secret: &str, key: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.to_owned(),
                key: key.to_owned(),
                optional: None,
            }),
            ..EnvVarSource::default()
        }),
        value: None,
    }
}

fn env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.to_owned()),
        value_from: None,
    }
}

fn claim_volume(name: &str, claim: String) -> Volume {
    Volume {
        name: name.to_owned(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: claim,
            read_only: None,
        }),
        ..Volume::default()
    }
}

fn mount(name: &str, path: &str) -> VolumeMount {
    VolumeMount {
        name: name.to_owned(),
        mount_path: path.to_owned(),
        ..VolumeMount::default()
    }
}

/// Every SampleDB Pod (server and Jobs): `restricted`, as the image's `postgres` user, on a
/// read-only root filesystem; the server's socket directory and the scripts' temporary files
/// are emptyDir volumes.
fn restricted_postgres(spec: PodSpec) -> PodSpec {
    let scratch_dirs = [("sockets", SOCKETS_MOUNT), ("tmp", "/tmp")].map(|(n, p)| scratch(n, p));
    let with_scratch = |containers: Vec<Container>| {
        containers
            .into_iter()
            .map(|mut container| {
                let mounts = container.volume_mounts.get_or_insert_with(Vec::new);
                mounts.extend(scratch_dirs.iter().map(|(_, mount)| mount.clone()));
                container
            })
            .collect::<Vec<_>>()
    };
    let mut volumes = spec.volumes.unwrap_or_default();
    volumes.extend(scratch_dirs.iter().map(|(volume, _)| volume.clone()));
    restrict(
        PodSpec {
            init_containers: spec.init_containers.map(with_scratch),
            containers: with_scratch(spec.containers),
            volumes: Some(volumes),
            ..spec
        },
        pod_security_context(Some(POSTGRES_UID)),
        true,
    )
}

/// The access rules of a database that archives its write-ahead log (PostgreSQL's `hba_file`):
/// the image's own (the socket trusted, TCP with a password), and replication connections with
/// a password for `pg_basebackup` in backup Jobs.
pub fn access_rules(db: &SampleDB, owner: &OwnerReference) -> ConfigMap {
    ConfigMap {
        metadata: meta(
            db,
            access_rules_config_map(&db.name_any()),
            "access-rules",
            Some(owner),
        ),
        data: Some(BTreeMap::from([(
            HBA_FILE.to_owned(),
            "# Written by app-operator for backup.archiveWal.\n\
             local all all trust\n\
             local replication all trust\n\
             host all all all scram-sha-256\n\
             host replication all all scram-sha-256\n"
                .to_owned(),
        )])),
        ..ConfigMap::default()
    }
}

fn access_rules_config_map(db: &str) -> String {
    format!("{db}-access-rules")
}

/// With `backup.archiveWal` (and the operator's image): the server archives each write-ahead
/// log segment to the bucket through the operator's binary, copied in by an init container,
/// and reads its access rules from [`access_rules`].
fn with_wal_archiving(db: &SampleDB, helper_image: Option<&str>, pod: &mut PodSpec) {
    let (Some(s3), Some(helper_image), true) =
        (&db.spec.backup.s3, helper_image, db.spec.backup.archive_wal)
    else {
        return;
    };
    let (install, helper, helper_mount) = bucket::helper_install(helper_image);
    let (credentials, credentials_mount) = bucket::credentials_volume(s3);
    let rules = Volume {
        name: "access-rules".to_owned(),
        config_map: Some(ConfigMapVolumeSource {
            name: access_rules_config_map(&db.name_any()),
            ..ConfigMapVolumeSource::default()
        }),
        ..Volume::default()
    };
    let settings = [
        "archive_mode=on".to_owned(),
        format!("archive_command={}", bucket::wal_command(Wal::Archive, s3)),
        // At most five minutes of commits wait for a segment to fill (CloudNativePG's default).
        "archive_timeout=300".to_owned(),
        format!("hba_file={ACCESS_RULES_MOUNT}/{HBA_FILE}"),
    ];
    pod.init_containers = Some(vec![install]);
    pod.volumes
        .get_or_insert_with(Vec::new)
        .extend([helper, credentials, rules]);
    if let Some(postgres) = pod.containers.first_mut() {
        postgres.args = Some(
            settings
                .into_iter()
                .flat_map(|setting| ["-c".to_owned(), setting])
                .collect(),
        );
        postgres.volume_mounts.get_or_insert_with(Vec::new).extend([
            helper_mount,
            credentials_mount,
            VolumeMount {
                read_only: Some(true),
                ..mount("access-rules", ACCESS_RULES_MOUNT)
            },
        ]);
    }
}

/// The database: one replica (0 while it is stopped for an upgrade or a final snapshot, or
/// before a point-in-time recovery has written its data) of `<image>:<version>` on the data
/// claim; archiving its write-ahead log with `backup.archiveWal` (on the operator's image,
/// `helper_image`, which the caller checked is known).
pub fn stateful_set(
    db: &SampleDB,
    owner: &OwnerReference,
    version: &str,
    replicas: i32,
    helper_image: Option<&str>,
) -> StatefulSet {
    let name = db.name_any();
    let secret = credentials_secret(db);
    let container = Container {
        name: "postgres".to_owned(),
        image: Some(image(db, version)),
        env: Some(vec![
            secret_env("POSTGRES_USER", &secret, "username"),
            secret_env("POSTGRES_PASSWORD", &secret, "password"),
            env("POSTGRES_DB", DATABASE),
            env("PGDATA", PGDATA),
        ]),
        ports: Some(vec![ContainerPort {
            name: Some("postgres".to_owned()),
            container_port: PORT,
            ..ContainerPort::default()
        }]),
        readiness_probe: Some(Probe {
            exec: Some(ExecAction {
                command: Some(
                    ["pg_isready", "--host", "127.0.0.1", "--dbname", DATABASE]
                        .map(str::to_owned)
                        .to_vec(),
                ),
            }),
            period_seconds: Some(5),
            ..Probe::default()
        }),
        volume_mounts: Some(vec![mount("data", DATA_MOUNT)]),
        ..Container::default()
    };
    let mut pod = PodSpec {
        containers: vec![container],
        volumes: Some(vec![claim_volume("data", data_claim(&name))]),
        ..PodSpec::default()
    };
    with_wal_archiving(db, helper_image, &mut pod);
    StatefulSet {
        metadata: meta(db, name.clone(), "database", Some(owner)),
        spec: Some(StatefulSetSpec {
            replicas: Some(replicas),
            service_name: Some(name.clone()),
            selector: LabelSelector {
                match_labels: Some(selector_labels(&name)),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels(&name, "database")),
                    ..ObjectMeta::default()
                }),
                spec: Some(restricted_postgres(pod)),
            },
            ..StatefulSetSpec::default()
        }),
        status: None,
    }
}

/// One Job: a container running `script` with the connection and credentials in its
/// environment, `backoffLimit: 0` (a failed database command is reported, not retried blindly)
/// and a deadline. Only a script's [`scripts::TRY_AGAIN`] (a server that did not answer yet) is
/// tried again, in a new Pod, until that deadline.
pub struct JobSpecOf<'a> {
    pub kind: JobKind,
    pub name: String,
    pub version: &'a str,
    pub script: &'static str,
    /// Extra environment (`BACKUP_FILE`, `INIT_SQL_DIR`, …).
    pub env: Vec<EnvVar>,
    pub deadline_seconds: i64,
    /// Mount the data volume (offline Jobs: upgrade, snapshot).
    pub data: bool,
    /// Runs first, with another image (the upgrade's dump, by the old version).
    pub before: Option<(&'a str, &'static str)>,
    /// Containers on the operator's image around the script (bucket transfers).
    pub helpers: Helpers,
    pub owner: Option<&'a OwnerReference>,
}

/// The operator's image in a Job: containers before the script (a download, copying its
/// binary), containers after it (uploads), the volumes they need, and those the script mounts
/// too.
#[derive(Default)]
pub struct Helpers {
    pub before: Vec<Container>,
    pub after: Vec<Container>,
    pub volumes: Vec<Volume>,
    pub script_mounts: Vec<VolumeMount>,
}

pub fn job(db: &SampleDB, spec: JobSpecOf<'_>) -> Job {
    let name = db.name_any();
    let secret = credentials_secret(db);
    let mut environment = vec![
        secret_env("PGUSER", &secret, "username"),
        secret_env("PGPASSWORD", &secret, "password"),
        env("BACKUP_DIR", BACKUPS_MOUNT),
    ];
    let mut mounts = vec![mount("backups", BACKUPS_MOUNT)];
    let mut volumes = vec![claim_volume(
        "backups",
        backups_claim(backups_of(db, spec.kind)),
    )];
    if spec.data {
        environment.push(env("PGDATA", PGDATA));
        mounts.push(mount("data", DATA_MOUNT));
        volumes.push(claim_volume("data", data_claim(&name)));
    }
    if let (JobKind::Init, Some(init)) = (spec.kind, &db.spec.init_sql) {
        environment.push(env("INIT_SQL_DIR", INIT_SQL_MOUNT));
        mounts.push(mount("init-sql", INIT_SQL_MOUNT));
        volumes.push(Volume {
            name: "init-sql".to_owned(),
            config_map: Some(ConfigMapVolumeSource {
                name: init.config_map_name.clone(),
                ..ConfigMapVolumeSource::default()
            }),
            ..Volume::default()
        });
    }
    environment.extend(spec.env);
    mounts.extend(spec.helpers.script_mounts);
    volumes.extend(spec.helpers.volumes);
    let container = |container: &str, version: &str, script: &str| Container {
        name: container.to_owned(),
        image: Some(image(db, version)),
        command: Some(vec!["bash".to_owned(), "-c".to_owned(), script.to_owned()]),
        env_from: Some(vec![EnvFromSource {
            config_map_ref: Some(ConfigMapEnvSource {
                name: connection_config_map(&name),
                optional: None,
            }),
            ..EnvFromSource::default()
        }]),
        env: Some(environment.clone()),
        volume_mounts: Some(mounts.clone()),
        // A script that fails writes why to its termination message (`fail` in common.sh); its
        // log's tail stands in when it died before saying. Either reaches the status.
        termination_message_policy: Some("FallbackToLogsOnError".to_owned()),
        ..Container::default()
    };
    let mut init_containers: Vec<Container> = spec
        .before
        .map(|(version, script)| container("dump", version, script))
        .into_iter()
        .collect();
    init_containers.extend(spec.helpers.before);
    let script_container = spec.kind.label();
    let mut containers = vec![container(script_container, spec.version, spec.script)];
    if !spec.helpers.after.is_empty() {
        init_containers.append(&mut containers);
        containers = spec.helpers.after;
    }
    let mut pod_labels = db.spec.job_pod_metadata.labels.clone();
    pod_labels.extend(labels(&name, spec.kind.label()));
    let annotations = &db.spec.job_pod_metadata.annotations;
    Job {
        metadata: meta(db, spec.name, spec.kind.label(), spec.owner),
        spec: Some(JobSpec {
            backoff_limit: Some(0),
            pod_failure_policy: Some(PodFailurePolicy {
                rules: vec![PodFailurePolicyRule {
                    action: "Ignore".to_owned(),
                    on_exit_codes: Some(PodFailurePolicyOnExitCodesRequirement {
                        container_name: Some(script_container.to_owned()),
                        operator: "In".to_owned(),
                        values: vec![scripts::TRY_AGAIN],
                    }),
                    on_pod_conditions: None,
                }],
            }),
            active_deadline_seconds: Some(spec.deadline_seconds),
            ttl_seconds_after_finished: (spec.kind == JobKind::FinalSnapshot)
                .then_some(SNAPSHOT_JOB_TTL_SECONDS),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    annotations: (!annotations.is_empty()).then(|| annotations.clone()),
                    ..ObjectMeta::default()
                }),
                spec: Some(restricted_postgres(PodSpec {
                    restart_policy: Some("Never".to_owned()),
                    init_containers: (!init_containers.is_empty()).then_some(init_containers),
                    containers,
                    volumes: Some(volumes),
                    ..PodSpec::default()
                })),
            },
            ..JobSpec::default()
        }),
        status: None,
    }
}

/// The SampleDB whose backups volume a Job of `kind` mounts: a clone's restore Job reads its
/// source's, every other Job this SampleDB's own.
fn backups_of(db: &SampleDB, kind: JobKind) -> &str {
    let source = db.spec.restore.as_ref().and_then(|r| r.source.as_deref());
    match (kind, source) {
        (JobKind::Restore, Some(source)) => source,
        _ => db.metadata.name.as_deref().unwrap_or_default(),
    }
}

/// The init Job, or the restore Job when the SampleDB starts from a backup: a file in a
/// backups volume, a dump in a bucket downloaded into its own backups volume first, or a
/// point-in-time recovery into the data volume (before the database first starts) from a base
/// backup and the write-ahead log in a bucket. Bucket transfers run the operator's image
/// (`helper_image`, which the caller checked is known).
pub fn first_job(db: &SampleDB, owner: &OwnerReference, helper_image: Option<&str>) -> Job {
    let name = db.name_any();
    let mut helpers = Helpers::default();
    let restore = db.spec.restore.as_ref();
    let recovery = restore.and_then(|restore| restore.point_in_time.as_ref());
    let (kind, script, extra) = match (restore, recovery, helper_image) {
        (None, _, _) => (JobKind::Init, scripts::INIT, Vec::new()),
        (Some(_), Some(recovery), Some(helper_image)) => {
            let s3 = &recovery.s3;
            let target = recovery.target_time.0;
            let (install, helper, helper_mount) = bucket::helper_install(helper_image);
            let (staging, staging_mount) = scratch(STAGING_VOLUME, STAGING_MOUNT);
            let (fetch, credentials) = transfer_container(
                "fetch",
                helper_image,
                s3,
                &archive_object(&s3.path, "base"),
                &Transfer::LatestBefore(target),
                BASE_BACKUP,
                staging_mount.clone(),
            );
            let (_, credentials_mount) = bucket::credentials_volume(s3);
            helpers = Helpers {
                before: vec![install, fetch],
                after: Vec::new(),
                volumes: vec![helper, staging, credentials],
                script_mounts: vec![helper_mount, credentials_mount, staging_mount],
            };
            (
                JobKind::Restore,
                scripts::RECOVER,
                vec![
                    env("BASE_BACKUP", BASE_BACKUP),
                    env("RESTORE_COMMAND", &bucket::wal_command(Wal::Restore, s3)),
                    // PostgreSQL refuses RFC 3339's `Z` in recovery_target_time.
                    env(
                        "TARGET_TIME",
                        &target.strftime("%Y-%m-%d %H:%M:%S%.f+00").to_string(),
                    ),
                ],
            )
        }
        (Some(restore), _, helper_image) => {
            let file = match (&restore.s3, helper_image) {
                (Some(s3), Some(helper_image)) => {
                    let file = format!("{name}-restore.dump");
                    let (fetch, credentials) = fetch_container(
                        helper_image,
                        s3,
                        &format!("{BACKUPS_MOUNT}/{file}"),
                        mount("backups", BACKUPS_MOUNT),
                    );
                    helpers.before.push(fetch);
                    helpers.volumes.push(credentials);
                    file
                }
                _ => restore.backup_file.clone().unwrap_or_default(),
            };
            (
                JobKind::Restore,
                scripts::RESTORE,
                vec![env("BACKUP_FILE", &file)],
            )
        }
    };
    job(
        db,
        JobSpecOf {
            kind,
            name: init_job_name(&name, kind),
            version: &db.spec.version,
            script,
            env: extra,
            deadline_seconds: db.spec.job_timeout_seconds,
            // A point-in-time recovery writes the data directory itself.
            data: recovery.is_some(),
            before: None,
            helpers,
            owner: Some(owner),
        },
    )
}

/// A backup: of a schedule's tick, or (`request` set) on demand at `tick`, annotated with the
/// request it serves. With `backup.s3` (and the operator's image, which the caller checked is
/// known) the dump is uploaded to `<key>/<file>` once written, and the bucket's retention
/// applied to this SampleDB's dumps there; with `archiveWal` too, a base backup is taken after
/// the dump and uploaded to `<key>/base/<job>.tar.gz`, under the same retention.
pub fn backup_job(
    db: &SampleDB,
    owner: &OwnerReference,
    version: &str,
    tick: Timestamp,
    request: Option<&str>,
    helper_image: Option<&str>,
) -> Job {
    let name = backup_job_name(&db.name_any(), tick);
    let file = dump_file(&name);
    let mut environment = vec![env("BACKUP_FILE", &file)];
    let mut helpers = Helpers::default();
    if let Some((s3, helper_image)) = db.spec.backup.s3.as_ref().zip(helper_image) {
        let series = |directory: &str| format!("{directory}{}-backup-", db.name_any());
        let dump_series = series(&key_prefix(&s3.path));
        let base_series = series(&format!("{}base/", key_prefix(&s3.path)));
        let upload = |container: &str, object: &str, series: &str, file: &str, mount| {
            let retention = db.spec.backup.bucket_retention.as_ref();
            transfer_container(
                container,
                helper_image,
                s3,
                object,
                &Transfer::Put {
                    retention: retention.map(|retention| Retention {
                        series,
                        keep: retention.max_backups,
                        max_age_hours: retention.max_age_hours,
                    }),
                },
                file,
                mount,
            )
        };
        let (dump, credentials) = upload(
            "upload",
            &uploaded_dump(&s3.path, &file),
            &dump_series,
            &format!("{BACKUPS_MOUNT}/{file}"),
            mount("backups", BACKUPS_MOUNT),
        );
        helpers.after.push(dump);
        helpers.volumes.push(credentials);
        if db.spec.backup.archive_wal {
            let (staging, staging_mount) = scratch(STAGING_VOLUME, STAGING_MOUNT);
            let object = archive_object(&s3.path, &format!("base/{name}.tar.gz"));
            let (base, _) = upload(
                "upload-base",
                &object,
                &base_series,
                BASE_BACKUP,
                staging_mount.clone(),
            );
            helpers.after.push(base);
            helpers.volumes.push(staging);
            helpers.script_mounts.push(staging_mount);
            environment.push(env("BASE_BACKUP", BASE_BACKUP));
        }
    }
    let mut backup = job(
        db,
        JobSpecOf {
            kind: JobKind::Backup,
            env: environment,
            name,
            version,
            script: scripts::BACKUP,
            deadline_seconds: db.spec.backup.timeout_seconds,
            data: false,
            before: None,
            helpers,
            owner: Some(owner),
        },
    );
    backup.metadata.annotations =
        request.map(|request| [(BACKUP_REQUESTED_AT.to_owned(), request.to_owned())].into());
    backup
}

/// `<bucket>/<key>/<name>` of an archive at `path` (`<bucket>/<key>`): its `base` directory, a
/// base backup in it.
fn archive_object(path: &str, name: &str) -> String {
    format!("{}/{name}", path.trim_end_matches('/'))
}

/// The key prefix dumps go under in `path` (`<bucket>/<key>`): `<key>/`.
fn key_prefix(path: &str) -> String {
    format!("{}/", bucket::key(path).trim_end_matches('/'))
}

/// The object (`<bucket>/<key>/<file>`) a dump is uploaded to.
pub fn uploaded_dump(path: &str, file: &str) -> String {
    format!("{}/{file}", path.trim_end_matches('/'))
}

/// The offline upgrade: the old version dumps the stopped database, the new one converts the data
/// directory when the major version changes (see `scripts/upgrade.sh`).
pub fn upgrade_job(db: &SampleDB, owner: &OwnerReference, from: &str, to: &str) -> Job {
    let name = upgrade_job_name(&db.name_any(), to);
    job(
        db,
        JobSpecOf {
            kind: JobKind::Upgrade,
            env: vec![env("BACKUP_FILE", &dump_file(&name))],
            name,
            version: to,
            script: scripts::UPGRADE,
            deadline_seconds: db.spec.job_timeout_seconds,
            data: true,
            before: Some((from, scripts::SNAPSHOT)),
            helpers: Helpers::default(),
            owner: Some(owner),
        },
    )
}

/// The final snapshot: no ownerReference, so no deletion propagation removes it before it ran.
pub fn final_snapshot_job(db: &SampleDB, uid: &str, version: &str) -> Job {
    let name = final_snapshot_job_name(&db.name_any(), uid);
    job(
        db,
        JobSpecOf {
            kind: JobKind::FinalSnapshot,
            env: vec![env("BACKUP_FILE", &dump_file(&name))],
            name,
            version,
            script: scripts::SNAPSHOT,
            deadline_seconds: db.spec.deletion.snapshot_timeout_seconds,
            data: true,
            before: None,
            helpers: Helpers::default(),
            owner: None,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::restricted::restricted_violations;

    fn db() -> SampleDB {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "db.example.com/v1alpha1",
            "kind": "SampleDB",
            "metadata": { "name": "db", "namespace": "ns", "uid": "u1" },
            "spec": { "version": "15", "storage": { "size": "1Gi" } },
        }))
        .unwrap()
    }

    const BUCKET: &str = r#"{ "path": "backups/team/db", "awsSecret": "keys", "endpoint": "http://10.0.0.1:7070", "forcePathStyle": true }"#;

    /// Backing up to a bucket, keeping 2 dumps for at most a day.
    fn in_bucket() -> SampleDB {
        let mut db = db();
        db.spec.backup.s3 = serde_json::from_str(BUCKET).unwrap();
        db.spec.backup.bucket_retention =
            serde_json::from_value(serde_json::json!({ "maxBackups": 2, "maxAgeHours": 24 }))
                .unwrap();
        db
    }

    /// A new SampleDB restored from a dump in a bucket.
    fn cloned_from_bucket() -> SampleDB {
        let mut clone = db();
        clone.metadata.name = Some("copy".into());
        let mut source: serde_json::Value = serde_json::from_str(BUCKET).unwrap();
        source["path"] = "backups/team/db/db-backup-20261123-103000.dump".into();
        clone.spec.restore =
            Some(serde_json::from_value(serde_json::json!({ "s3": source })).unwrap());
        clone
    }

    /// Archiving its write-ahead log to the bucket.
    fn archiving() -> SampleDB {
        let mut db = in_bucket();
        db.spec.backup.archive_wal = true;
        db
    }

    /// A new SampleDB recovered to a time from the archive.
    fn recovered_to_time() -> SampleDB {
        let mut clone = db();
        clone.metadata.name = Some("copy".into());
        let source: serde_json::Value = serde_json::from_str(BUCKET).unwrap();
        clone.spec.restore = Some(
            serde_json::from_value(serde_json::json!({
                "pointInTime": { "s3": source, "targetTime": "2026-11-23T10:45:00Z" },
            }))
            .unwrap(),
        );
        clone
    }

    fn job_pod(job: Job) -> PodSpec {
        job.spec.unwrap().template.spec.unwrap()
    }

    fn server_pod(set: StatefulSet) -> PodSpec {
        set.spec.unwrap().template.spec.unwrap()
    }

    fn env_of<'a>(container: &'a Container, name: &str) -> Option<&'a str> {
        container
            .env
            .iter()
            .flatten()
            .find(|e| e.name == name)
            .and_then(|e| e.value.as_deref())
    }

    fn container_names(spec: &PodSpec) -> Vec<&str> {
        spec.init_containers
            .iter()
            .flatten()
            .chain(&spec.containers)
            .map(|c| c.name.as_str())
            .collect()
    }

    #[test]
    fn an_archiving_database_uploads_its_wal_and_base_backups_and_a_recovery_replays_them_first() {
        let owner = OwnerReference::default();
        let helper = Some("app-operator:v1");
        let server = server_pod(stateful_set(&archiving(), &owner, "15", 1, helper));
        assert_eq!(
            container_names(&server),
            ["install-app-operator", "postgres"]
        );
        let args = server.containers[0].args.clone().unwrap().join(" ");
        assert!(args.contains("-c archive_mode=on"), "{args}");
        assert!(
            args.contains("-c archive_command='/opt/app-operator/app-operator' 'object-store' 'put' '--path=backups/team/db/wal/%f' '--file=%p'"),
            "{args}"
        );
        assert!(
            args.contains("-c hba_file=/etc/app-operator/access-rules/pg_hba.conf"),
            "{args}"
        );
        let rules = access_rules(&archiving(), &owner).data.unwrap();
        assert!(rules["pg_hba.conf"].contains("host replication all all scram-sha-256"));
        // Without the operator's image, or without archiveWal, the server is as before.
        for plain in [
            stateful_set(&archiving(), &owner, "15", 1, None),
            stateful_set(&in_bucket(), &owner, "15", 1, helper),
        ] {
            let spec = server_pod(plain);
            assert_eq!(container_names(&spec), ["postgres"]);
            assert_eq!(spec.containers[0].args, None);
        }

        let tick: Timestamp = "2026-11-23T10:30:00Z".parse().unwrap();
        let backup = job_pod(backup_job(&archiving(), &owner, "15", tick, None, helper));
        assert_eq!(
            container_names(&backup),
            ["backup", "upload", "upload-base"]
        );
        assert_eq!(
            env_of(&backup.init_containers.as_ref().unwrap()[0], "BASE_BACKUP"),
            Some("/staging/base.tar.gz")
        );
        let base_upload = backup.containers[1].args.clone().unwrap();
        assert!(
            base_upload.contains(
                &"--path=backups/team/db/base/db-backup-20261123-103000.tar.gz".to_owned()
            )
        );
        assert!(base_upload.contains(&"--series=team/db/base/db-backup-".to_owned()));

        let recovery = job_pod(first_job(&recovered_to_time(), &owner, helper));
        assert_eq!(
            container_names(&recovery),
            ["install-app-operator", "fetch", "restore"]
        );
        let fetch = recovery.init_containers.as_ref().unwrap()[1]
            .args
            .clone()
            .unwrap();
        assert!(fetch.contains(&"--path=backups/team/db/base".to_owned()));
        assert!(fetch.contains(&"--latest-before=2026-11-23T10:45:00Z".to_owned()));
        let restore = &recovery.containers[0];
        assert_eq!(
            env_of(restore, "TARGET_TIME"),
            Some("2026-11-23 10:45:00+00")
        );
        assert!(
            env_of(restore, "RESTORE_COMMAND")
                .unwrap()
                .contains("'get' '--path=backups/team/db/wal/%f'")
        );
        assert!(
            restore
                .volume_mounts
                .iter()
                .flatten()
                .any(|m| m.name == "data"),
            "the recovery writes the data volume"
        );
    }

    #[test]
    fn a_bucket_backup_uploads_the_dump_pg_dump_wrote_and_a_clone_fetches_it_first() {
        let owner = OwnerReference::default();
        let tick: Timestamp = "2026-11-23T10:30:00Z".parse().unwrap();
        let backup = backup_job(
            &in_bucket(),
            &owner,
            "15",
            tick,
            None,
            Some("app-operator:v1"),
        );
        let pod = backup.spec.unwrap().template.spec.unwrap();
        assert_eq!(container_names(&pod), ["backup", "upload"]);
        let upload = pod.containers[0].args.clone().unwrap();
        for arg in [
            "put",
            "--path=backups/team/db/db-backup-20261123-103000.dump",
            "--file=/backups/db-backup-20261123-103000.dump",
            "--series=team/db/db-backup-",
            "--keep=2",
            "--max-age-hours=24",
        ] {
            assert!(upload.contains(&arg.to_owned()), "{arg} in {upload:?}");
        }

        let restore = first_job(&cloned_from_bucket(), &owner, Some("app-operator:v1"));
        let pod = restore.spec.unwrap().template.spec.unwrap();
        assert_eq!(container_names(&pod), ["fetch", "restore"]);
        let fetch = pod.init_containers.unwrap()[0].args.clone().unwrap();
        assert!(
            fetch.contains(&"--file=/backups/copy-restore.dump".to_owned()),
            "{fetch:?}"
        );
        let file = pod.containers[0]
            .env
            .iter()
            .flatten()
            .find(|e| e.name == "BACKUP_FILE");
        assert_eq!(
            file.and_then(|e| e.value.as_deref()),
            Some("copy-restore.dump")
        );
    }

    /// The server and every Job: `restricted`, as `postgres`, read-only, with somewhere to put
    /// the socket and temporary files.
    #[test]
    fn every_pod_is_restricted_and_writes_only_to_volumes() {
        let db = db();
        let owner = OwnerReference::default();
        let tick: Timestamp = "2026-11-23T10:30:00Z".parse().unwrap();
        let helper = Some("app-operator:v1");
        let specs = [
            server_pod(stateful_set(&db, &owner, "15", 1, None)),
            server_pod(stateful_set(&archiving(), &owner, "15", 1, helper)),
            job_pod(backup_job(&archiving(), &owner, "15", tick, None, helper)),
            job_pod(first_job(&recovered_to_time(), &owner, helper)),
            job_pod(first_job(&db, &owner, None)),
            job_pod(backup_job(&db, &owner, "15", tick, None, None)),
            job_pod(backup_job(&in_bucket(), &owner, "15", tick, None, helper)),
            job_pod(first_job(&cloned_from_bucket(), &owner, helper)),
        ];
        for spec in specs {
            assert_eq!(restricted_violations(&spec), Vec::<String>::new());
            assert_eq!(
                spec.security_context.as_ref().unwrap().run_as_user,
                Some(999)
            );
            for container in spec
                .init_containers
                .iter()
                .flatten()
                .chain(&spec.containers)
            {
                let mounts: Vec<_> = container
                    .volume_mounts
                    .iter()
                    .flatten()
                    .map(|m| m.mount_path.as_str())
                    .collect();
                assert!(
                    mounts.contains(&"/tmp") && mounts.contains(&"/var/run/postgresql"),
                    "{}: {mounts:?}",
                    container.name
                );
            }
        }
    }

    /// The claim behind a Job's `backups` volume.
    fn backups_volume(job: &Job) -> String {
        let spec = job.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
        let volumes = spec.volumes.as_ref().unwrap();
        let backups = volumes.iter().find(|v| v.name == "backups").unwrap();
        backups
            .persistent_volume_claim
            .as_ref()
            .unwrap()
            .claim_name
            .clone()
    }

    #[test]
    fn a_clone_restores_from_its_sources_backups_and_backs_up_into_its_own() {
        let mut clone = db();
        clone.metadata.name = Some("copy".into());
        clone.spec.restore = Some(
            serde_json::from_value(serde_json::json!({
                "backupFile": "db-backup-20261123-103000.dump", "source": "db"
            }))
            .unwrap(),
        );
        let owner = OwnerReference::default();
        let tick: Timestamp = "2026-11-23T10:30:00Z".parse().unwrap();
        assert_eq!(
            backups_volume(&first_job(&clone, &owner, None)),
            "db-backups"
        );
        assert_eq!(
            backups_volume(&backup_job(&clone, &owner, "15", tick, None, None)),
            "copy-backups"
        );
        clone.spec.restore.as_mut().unwrap().source = None;
        assert_eq!(
            backups_volume(&first_job(&clone, &owner, None)),
            "copy-backups"
        );
    }

    #[test]
    fn an_on_demand_backup_job_carries_its_request() {
        let db = db();
        let owner = OwnerReference::default();
        let tick: Timestamp = "2026-11-23T10:30:00Z".parse().unwrap();
        let on_demand = backup_job(&db, &owner, "15", tick, Some("t1"), None);
        assert_eq!(
            on_demand.metadata.name.as_deref(),
            Some("db-backup-20261123-103000")
        );
        assert_eq!(
            on_demand
                .annotations()
                .get(BACKUP_REQUESTED_AT)
                .map(String::as_str),
            Some("t1")
        );
        let scheduled = backup_job(&db, &owner, "15", tick, None, None);
        assert!(scheduled.metadata.annotations.is_none());
    }
}
