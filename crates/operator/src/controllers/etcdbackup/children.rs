//! What an EtcdBackup is made of: the claim snapshots go to (unless the user names one or they go
//! to a bucket) and one Job per backup. The etcd image has no shell, so each step is one of its
//! own binaries in a container of its own: `etcdctl snapshot save` (which writes `<file>.part`
//! and renames it only once the snapshot is complete), then `etcdutl snapshot status` to read the
//! file back; for a bucket, in an emptyDir, then `app-operator object-store put` uploads it.

use std::collections::BTreeMap;

use app_operator_api::EtcdBackup;
use app_operator_api::etcdbackup::S3Source;
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    PersistentVolumeClaimVolumeSource, PodSpec, PodTemplateSpec, Volume, VolumeMount,
    VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::controllers::bucket::{Retention, Transfer, transfer_container};
use crate::controllers::etcdcluster::secret_volume;
use crate::controllers::restricted::{NON_ROOT, pod_security_context, restrict};
use crate::etcd::tls::{CLIENT_CA, CLIENT_CERT, CLIENT_KEY};
use crate::reconcile::{MANAGED_BY, MANAGED_BY_LABEL};

/// Every child carries it: the EtcdBackup it belongs to. The claim has no owner reference (the
/// snapshots outlive the EtcdBackup), so this label is what marks it as ours.
pub const INSTANCE_LABEL: &str = "etcd.database.coreos.com/backup";

/// On each backup Job: the EtcdCluster it copies, so no two backups of one cluster run at once
/// even when several EtcdBackups name it.
pub const CLUSTER_LABEL: &str = "etcd.database.coreos.com/cluster";

/// On each Job: what the operator knew when it started it, recorded in the status when it
/// succeeds (the Job's containers cannot report back: the image has no shell).
pub const FILE_ANNOTATION: &str = "etcd.database.coreos.com/snapshot-file";
pub const TICK_ANNOTATION: &str = "etcd.database.coreos.com/scheduled-at";
pub const SKIPPED_ANNOTATION: &str = "etcd.database.coreos.com/skipped-ticks";
pub const REVISION_ANNOTATION: &str = "etcd.database.coreos.com/revision";
pub const VERSION_ANNOTATION: &str = "etcd.database.coreos.com/etcd-version";
pub const SIZE_ANNOTATION: &str = "etcd.database.coreos.com/db-size";

const SNAPSHOTS_VOLUME: &str = "snapshots";
const SNAPSHOTS_MOUNT: &str = "/backups";
/// The snapshot's file in the Job's emptyDir, before it is uploaded to a bucket.
const UPLOADED_FILE: &str = "snapshot.db";
/// Where the operator's client certificate is mounted (the coreos operator's path).
const CLIENT_TLS_DIR: &str = "/etc/etcdtls/operator/etcd-tls";

fn labels(backup: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned()),
        (INSTANCE_LABEL.to_owned(), backup.to_owned()),
    ])
}

/// `<name>-snapshots`, when the spec names no claim.
pub fn claim_name(backup: &EtcdBackup) -> String {
    backup
        .spec
        .pv
        .claim_name
        .clone()
        .unwrap_or_else(|| format!("{}-snapshots", backup.name_any()))
}

/// The claim the operator creates when the spec names none.
pub fn snapshots_claim(backup: &EtcdBackup) -> PersistentVolumeClaim {
    let pv = &backup.spec.pv;
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(claim_name(backup)),
            namespace: backup.namespace(),
            labels: Some(labels(&backup.name_any())),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            storage_class_name: pv.storage_class_name.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_owned(),
                    Quantity(pv.volume_size.clone()),
                )])),
                ..VolumeResourceRequirements::default()
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        status: None,
    }
}

/// `<name>-20261123-103000`: one name per tick, so a Job made twice for a tick is the same.
pub fn job_name(backup: &str, tick: Timestamp) -> String {
    format!("{backup}-{}", tick.strftime("%Y%m%d-%H%M%S"))
}

/// `<name>-<slot>.db`: a new snapshot replaces the oldest slot once all are in use, so the
/// claim never holds more than `maxBackups` (no shell in the image to delete files with).
pub fn snapshot_file(backup: &str, slot: usize) -> String {
    format!("{backup}-{slot}.db")
}

/// Where one backup's snapshot goes.
pub enum Destination<'a> {
    /// The file `file` in the claim.
    Claim { file: &'a str },
    /// The object `object` (`<bucket>/<key>`) in the bucket of `s3`; for a periodic series, the
    /// key prefix it shares and how many of it to keep.
    Bucket {
        s3: &'a S3Source,
        object: &'a str,
        series: Option<(&'a str, i32)>,
        helper_image: &'a str,
    },
}

impl Destination<'_> {
    /// What the status lists: the claim's file name, or the object's `<bucket>/<key>`.
    pub fn file(&self) -> &str {
        match self {
            Destination::Claim { file } => file,
            Destination::Bucket { object, .. } => object,
        }
    }
}

/// What one backup Job takes, from where.
pub struct SnapshotJob<'a> {
    pub tick: Timestamp,
    /// Ticks passed over before this one (the operator was down, or a backup was running).
    pub skipped: u64,
    pub destination: Destination<'a>,
    /// The client URL of the healthy member the snapshot is taken from.
    pub endpoint: &'a str,
    /// The etcd image of that member's version (its `etcdctl` speaks its protocol).
    pub image: String,
    pub revision: u64,
    pub etcd_version: &'a str,
    pub db_size: u64,
    pub timeout_seconds: i64,
    /// The cluster's `spec.TLS.static.operatorSecret`, when its members serve TLS: `etcdctl`
    /// presents the operator's client certificate.
    pub client_tls_secret: Option<&'a str>,
}

pub fn backup_job(backup: &EtcdBackup, owner: &OwnerReference, spec: &SnapshotJob<'_>) -> Job {
    let name = backup.name_any();
    let local_file = match spec.destination {
        Destination::Claim { file } => file,
        Destination::Bucket { .. } => UPLOADED_FILE,
    };
    let path = format!("{SNAPSHOTS_MOUNT}/{local_file}");
    let snapshots = VolumeMount {
        name: SNAPSHOTS_VOLUME.into(),
        mount_path: SNAPSHOTS_MOUNT.into(),
        ..VolumeMount::default()
    };
    let step = |container: &str, command: Vec<String>, mounts: Vec<VolumeMount>| Container {
        name: container.into(),
        image: Some(spec.image.clone()),
        command: Some(command),
        volume_mounts: Some(mounts),
        ..Container::default()
    };
    let mut volumes = vec![match spec.destination {
        Destination::Claim { .. } => Volume {
            name: SNAPSHOTS_VOLUME.into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim_name(backup),
                read_only: None,
            }),
            ..Volume::default()
        },
        Destination::Bucket { .. } => Volume {
            name: SNAPSHOTS_VOLUME.into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        },
    }];
    let mut save_mounts = vec![snapshots.clone()];
    let mut save_command = vec![
        "/usr/local/bin/etcdctl".into(),
        format!("--endpoints={}", spec.endpoint),
        "--dial-timeout=10s".into(),
    ];
    if let Some(secret) = spec.client_tls_secret {
        let (volume, mount) = secret_volume(secret, "client-tls", CLIENT_TLS_DIR);
        volumes.push(volume);
        save_mounts.push(mount);
        save_command.extend([
            format!("--cacert={CLIENT_TLS_DIR}/{CLIENT_CA}"),
            format!("--cert={CLIENT_TLS_DIR}/{CLIENT_CERT}"),
            format!("--key={CLIENT_TLS_DIR}/{CLIENT_KEY}"),
        ]);
    }
    save_command.extend(["snapshot".into(), "save".into(), path.clone()]);
    let save = step("snapshot", save_command, save_mounts);
    let verify = step(
        "verify",
        vec![
            "/usr/local/bin/etcdutl".into(),
            "snapshot".into(),
            "status".into(),
            path.clone(),
            "--write-out=table".into(),
        ],
        vec![snapshots.clone()],
    );
    let mut init_containers = vec![save];
    let mut containers = vec![verify];
    if let Destination::Bucket {
        s3,
        object,
        series,
        helper_image,
    } = &spec.destination
    {
        // Read back before it leaves: an upload of a snapshot that does not open is a failure.
        init_containers.append(&mut containers);
        let (upload, credentials) = transfer_container(
            "upload",
            helper_image,
            s3,
            object,
            &Transfer::Put {
                retention: series.map(|(series, keep)| Retention {
                    series,
                    keep: Some(keep),
                    max_age_hours: None,
                }),
            },
            &path,
            snapshots,
        );
        containers.push(upload);
        volumes.push(credentials);
    }
    let annotations = BTreeMap::from([
        (
            FILE_ANNOTATION.to_owned(),
            spec.destination.file().to_owned(),
        ),
        (TICK_ANNOTATION.to_owned(), spec.tick.to_string()),
        (SKIPPED_ANNOTATION.to_owned(), spec.skipped.to_string()),
        (REVISION_ANNOTATION.to_owned(), spec.revision.to_string()),
        (VERSION_ANNOTATION.to_owned(), spec.etcd_version.to_owned()),
        (SIZE_ANNOTATION.to_owned(), spec.db_size.to_string()),
    ]);
    let mut job_labels = labels(&name);
    job_labels.insert(
        CLUSTER_LABEL.to_owned(),
        backup.spec.etcd_cluster.name.clone(),
    );
    Job {
        metadata: ObjectMeta {
            name: Some(job_name(&name, spec.tick)),
            namespace: backup.namespace(),
            labels: Some(job_labels),
            annotations: Some(annotations),
            owner_references: Some(vec![owner.clone()]),
            ..ObjectMeta::default()
        },
        spec: Some(JobSpec {
            // A failed snapshot is reported, and the next tick takes a new one.
            backoff_limit: Some(0),
            active_deadline_seconds: Some(spec.timeout_seconds),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels(&name)),
                    ..ObjectMeta::default()
                }),
                // `restricted`, as the members: the snapshots' files are theirs.
                spec: Some(restrict(
                    PodSpec {
                        restart_policy: Some("Never".into()),
                        init_containers: Some(init_containers),
                        containers,
                        volumes: Some(volumes),
                        ..PodSpec::default()
                    },
                    pod_security_context(Some(NON_ROOT)),
                    true,
                )),
            },
            ..JobSpec::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backup(spec: serde_json::Value) -> EtcdBackup {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "etcd.database.coreos.com/v1beta2",
            "kind": "EtcdBackup",
            "metadata": { "name": "nightly", "namespace": "ns", "uid": "u1" },
            "spec": spec,
        }))
        .unwrap()
    }

    /// The Job of `nightly` at 2026-11-23T10:30:00Z, from `endpoint`, to `destination`.
    fn job_of(
        destination: Destination<'_>,
        endpoint: &str,
        client_tls_secret: Option<&str>,
    ) -> Job {
        let backup = backup(serde_json::json!({ "etcdCluster": { "name": "etcd" } }));
        backup_job(
            &backup,
            &OwnerReference::default(),
            &SnapshotJob {
                tick: "2026-11-23T10:30:00Z".parse().unwrap(),
                skipped: 0,
                destination,
                endpoint,
                image: "etcd:v3.6.16".into(),
                revision: 42,
                etcd_version: "3.6.16",
                db_size: 20480,
                timeout_seconds: 60,
                client_tls_secret,
            },
        )
    }

    #[test]
    fn the_job_saves_then_reads_the_snapshot_in_the_claim_within_its_deadline() {
        let job = job_of(
            Destination::Claim {
                file: "nightly-0.db",
            },
            "http://10.0.0.1:2379",
            None,
        );
        assert_eq!(job.name_any(), "nightly-20261123-103000");
        assert_eq!(job.annotations()[REVISION_ANNOTATION], "42");
        let spec = job.spec.unwrap();
        assert_eq!(spec.active_deadline_seconds, Some(60));
        let pod = spec.template.spec.unwrap();
        assert_eq!(
            crate::controllers::restricted::restricted_violations(&pod),
            Vec::<String>::new()
        );
        let save = &pod.init_containers.unwrap()[0];
        assert_eq!(
            save.command.as_ref().unwrap()[3..],
            ["snapshot", "save", "/backups/nightly-0.db"]
        );
        assert_eq!(
            pod.volumes.unwrap()[0]
                .persistent_volume_claim
                .as_ref()
                .unwrap()
                .claim_name,
            "nightly-snapshots"
        );
    }

    #[test]
    fn a_bucket_backup_saves_and_reads_the_snapshot_in_an_emptydir_then_uploads_it() {
        let s3 = S3Source {
            path: "backups/ns/etcd.db".into(),
            aws_secret: "keys".into(),
            endpoint: None,
            force_path_style: false,
        };
        let job = job_of(
            Destination::Bucket {
                s3: &s3,
                object: "backups/ns/etcd.db",
                series: None,
                helper_image: "app-operator:v1",
            },
            "http://10.0.0.1:2379",
            None,
        );
        assert_eq!(job.annotations()[FILE_ANNOTATION], "backups/ns/etcd.db");
        let pod = job.spec.unwrap().template.spec.unwrap();
        assert_eq!(
            crate::controllers::restricted::restricted_violations(&pod),
            Vec::<String>::new()
        );
        let order: Vec<&str> = pod
            .init_containers
            .iter()
            .flatten()
            .chain(&pod.containers)
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(order, ["snapshot", "verify", "upload"]);
        let volumes = pod.volumes.unwrap();
        assert!(volumes[0].empty_dir.is_some(), "no claim: {volumes:?}");
        assert_eq!(
            pod.containers[0].args.as_ref().unwrap()[3],
            "--file=/backups/snapshot.db"
        );
    }

    #[test]
    fn a_tls_clusters_snapshot_is_taken_with_the_operators_client_certificate() {
        let job = job_of(
            Destination::Claim {
                file: "nightly-0.db",
            },
            "https://etcd-abcde12345.etcd.ns.svc:2379",
            Some("etcd-operator-tls"),
        );
        let pod = job.spec.unwrap().template.spec.unwrap();
        let save = &pod.init_containers.as_ref().unwrap()[0];
        let command = save.command.clone().unwrap();
        assert_eq!(
            command[1..7],
            [
                "--endpoints=https://etcd-abcde12345.etcd.ns.svc:2379",
                "--dial-timeout=10s",
                "--cacert=/etc/etcdtls/operator/etcd-tls/etcd-client-ca.crt",
                "--cert=/etc/etcdtls/operator/etcd-tls/etcd-client.crt",
                "--key=/etc/etcdtls/operator/etcd-tls/etcd-client.key",
                "snapshot",
            ]
        );
        let secret = pod.volumes.as_ref().unwrap()[1].secret.as_ref().unwrap();
        assert_eq!(secret.secret_name.as_deref(), Some("etcd-operator-tls"));
        let mounts = save.volume_mounts.as_ref().unwrap();
        assert_eq!(mounts[1].mount_path, "/etc/etcdtls/operator/etcd-tls");
        let verify = &pod.containers[0];
        assert_eq!(
            verify.volume_mounts.as_ref().unwrap().len(),
            1,
            "only the step that talks to etcd holds the certificate"
        );
    }
}
