//! The EtcdBackup controller: snapshots of an EtcdCluster, one Job at a time. Each reconcile
//! observes its Jobs, lets the pure [`plan`] choose one step (start the backup that is due, or
//! trim the Job history), takes it, and writes the pure [`status`], which records the Jobs that
//! finished (from the Jobs themselves, so nothing is lost if a status write is). A snapshot is
//! taken only from a healthy member of a cluster with a quorum (the one with the highest
//! revision): a member cut off from the quorum may be missing acknowledged writes.
//!
//! Why a Job and not a stream through the operator: the snapshot lands in a claim only a Pod can
//! mount, it may be gigabytes the operator would otherwise hold, `etcdctl` writes it atomically,
//! and the Job's deadline bounds it even while the operator is down.

mod children;
pub mod plan;
mod status;

use std::sync::Arc;
use std::time::{Duration, Instant};

use app_operator_api::etcdbackup::{BackupStorageType, EtcdBackupStatus, S3Source, SnapshotRecord};
use app_operator_api::etcdcluster::EtcdClusterPhase;
use app_operator_api::{EtcdBackup, EtcdCluster};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::Store;

use self::children::{
    CLUSTER_LABEL, Destination, FILE_ANNOTATION, INSTANCE_LABEL, REVISION_ANNOTATION,
    SIZE_ANNOTATION, SKIPPED_ANNOTATION, TICK_ANNOTATION, VERSION_ANNOTATION,
};
use self::plan::{BackupJob, Desired, Observed, Repeat, Step};
use self::status::Taken;
use super::etcdcluster::client_for;
use super::{Wiring, bucket};
use crate::etcd::address::Addressing;
use crate::etcd::version::Version;
use crate::etcd::{EtcdApi, Status, image, members_with_status, quorum};
use crate::reconcile::Error;
use crate::reconcile::apply::controlled;
use crate::reconcile::children::{create_child, delete_child};
use crate::reconcile::jobs::{Announced, JobState, Outcome, SeenJob, ensure_job, job_state};
use crate::reconcile::runner::{Announcement, Reconciled, Reconciler, Runner, Target, cached};
use crate::reconcile::schedule::Schedule;
use crate::telemetry::metrics::Metrics;

pub const NAME: &str = "etcdbackup";

/// How soon to look again while another EtcdBackup's Job copies the same cluster (its end is no
/// event of ours).
const CLUSTER_BUSY_POLL: Duration = Duration::from_secs(2);

/// How long a Job this process created may be missing from the cache before its turn is over (it
/// was deleted; or its create failed, which the retry takes the turn for again).
const TURN_UNSEEN: Duration = Duration::from_secs(30);

/// Finished Jobs kept of each outcome, for `kubectl describe` and logs; the snapshots
/// themselves are listed in the status.
const JOB_HISTORY: usize = 3;

pub async fn run(wiring: Wiring, shutdown: impl Future<Output = ()> + Send + Sync + 'static) {
    let settings = wiring.settings;
    let (addressing, etcd) = (wiring.etcd.addressing, wiring.etcd.client);
    let mut runner = Runner::<EtcdBackup>::new(NAME, &settings).children(children::INSTANCE_LABEL);
    let reconciler = EtcdBackupReconciler {
        jobs: runner.owns(),
        pods: runner.owns(),
        claims: runner.owns(),
        addressing,
        etcd,
        helper_image: wiring.helper_image,
        metrics: settings.metrics.clone(),
    };
    runner.run(reconciler, shutdown).await;
}

struct EtcdBackupReconciler {
    jobs: Store<Job>,
    /// The Jobs' Pods: a failed Job is explained by what its container said last.
    pods: Store<Pod>,
    claims: Store<PersistentVolumeClaim>,
    addressing: Addressing,
    etcd: Arc<dyn EtcdApi>,
    /// The operator's image, which uploads snapshots to buckets.
    helper_image: Option<String>,
    metrics: Arc<Metrics>,
}

/// What is remembered about each EtcdBackup.
#[derive(Default)]
struct Memory {
    announced: Announced,
    /// The backup Job this process started for it, until the cache shows it finished.
    turn: Option<Turn>,
}

/// A backup Job copying a cluster: only one at a time per cluster.
struct Turn {
    cluster: String,
    job: String,
    since: Instant,
}

/// The member a snapshot is taken from.
struct Source {
    endpoint: String,
    version: String,
    revision: u64,
    db_size: u64,
}

type Context<'a> = Target<'a, EtcdBackup, Memory>;

impl Reconciler for EtcdBackupReconciler {
    type Object = EtcdBackup;
    type Memory = Memory;

    async fn reconcile(&self, context: &Context<'_>) -> Reconciled<EtcdBackupStatus> {
        let (backup, namespace, uid) = (context.object, &context.namespace, &context.uid);
        let now = Timestamp::now();
        let desired = desired(backup);
        let pods: Vec<Arc<Pod>> = self
            .pods
            .state()
            .into_iter()
            .filter(|pod| pod.namespace().as_deref() == Some(namespace.as_str()))
            .filter(|pod| pod.labels().get(INSTANCE_LABEL) == Some(&context.name))
            .collect();
        let observed = Observed {
            jobs: controlled(&self.jobs, namespace, uid)
                .iter()
                .map(|job| backup_job(job, &pods))
                .collect(),
            last_tick: backup
                .status
                .as_ref()
                .and_then(|s| s.last_schedule_time.as_ref())
                .map(|t| t.0),
            other_job: self.turn(context, None),
            now,
        };
        let plan = plan::plan(&desired, &observed);
        let (taken, outcome) = match &plan.step {
            None => (Taken::Done, Ok(())),
            Some(step) => match self.take(context, step).await {
                Ok(taken) => (taken, Ok(())),
                Err(error) => (Taken::Done, Err(error)),
            },
        };
        let status = status::status(
            backup,
            &observed,
            &plan,
            &taken,
            outcome.as_ref().err(),
            now,
        );
        let announce = self.announcements(context, &observed);
        let then = match plan.next_tick {
            _ if matches!(taken, Taken::TurnedAway { .. }) || observed.other_job.is_some() => {
                Action::requeue(CLUSTER_BUSY_POLL)
            }
            Some(next) => {
                let wait = next.duration_since(now).unsigned_abs();
                Action::requeue(wait.max(Duration::from_millis(100)))
            }
            // A running Job's end is a Job event.
            None => Action::await_change(),
        };
        Reconciled::status(status, outcome, then).announcing(announce)
    }

    fn forget_metrics(&self, namespace: &str, name: &str) {
        self.metrics.forget_etcd_backup(namespace, name);
    }
}

impl EtcdBackupReconciler {
    /// The Job of another EtcdBackup copying the same cluster now: from the cache, or started by
    /// this process and not cached yet. With `take`, when there is none, this backup's Job
    /// `take` takes the turn in the same step (two EtcdBackups of a cluster may be reconciled at
    /// once).
    fn turn(&self, context: &Context<'_>, take: Option<&str>) -> Option<String> {
        let namespace = &context.namespace;
        let cluster = &context.object.spec.etcd_cluster.name;
        let in_namespace = format!("{namespace}/");
        let over = |turn: &Turn| match cached(&self.jobs, &turn.job, namespace)
            .map(|job| job_state(&job))
        {
            Some(JobState::Running) => false,
            Some(_) => true,
            None => turn.since.elapsed() > TURN_UNSEEN,
        };
        context.remember_among(|own, others| {
            let mut other = None;
            for (key, memory) in others {
                memory.turn.take_if(|turn| over(turn));
                if let Some(turn) = &memory.turn
                    && key.starts_with(&in_namespace)
                    && turn.cluster == *cluster
                {
                    other = Some(turn.job.clone());
                }
            }
            let other = other.or_else(|| {
                self.jobs
                    .state()
                    .into_iter()
                    .filter(|job| job.namespace().as_deref() == Some(namespace))
                    .filter(|job| job.labels().get(CLUSTER_LABEL) == Some(cluster))
                    .filter(|job| job.labels().get(INSTANCE_LABEL) != Some(&context.name))
                    .find(|job| job_state(job) == JobState::Running)
                    .map(|job| job.name_any())
            });
            if let (None, Some(job)) = (&other, take) {
                own.turn = Some(Turn {
                    cluster: cluster.clone(),
                    job: job.to_owned(),
                    since: Instant::now(),
                });
            }
            other
        })
    }

    /// Events and metrics for the Jobs that finished since the status recorded (each once,
    /// even when a pass reads a status older than its own last write).
    fn announcements(&self, context: &Context<'_>, observed: &Observed) -> Vec<Announcement> {
        let previous = context.object.status.clone().unwrap_or_default();
        let (namespace, name) = (&context.namespace, &context.name);
        let metrics = &self.metrics;
        let mut announce = Vec::new();
        for finished in status::newly_finished(&previous, &observed.jobs) {
            let at = Time(finished.at);
            let outcome = if finished.succeeded {
                Outcome::Succeeded
            } else {
                Outcome::Failed
            };
            if !context.remember(|memory| memory.announced.first(outcome, Some(&at))) {
                continue;
            }
            let (type_, reason, note) = if finished.succeeded {
                let record = &finished.job.snapshot;
                metrics.etcd_backups.finished(namespace, name, "succeeded");
                metrics
                    .etcd_backups
                    .set_last_success(namespace, name, finished.at.as_second());
                metrics.set_etcd_snapshot_size(namespace, name, record.size_bytes);
                let note = format!(
                    "Job {} saved snapshot {} (revision {}, etcd {})",
                    record.job, record.file, record.etcd_revision, record.etcd_version
                );
                (EventType::Normal, "BackupSucceeded", note)
            } else {
                metrics.etcd_backups.finished(namespace, name, "failed");
                (
                    EventType::Warning,
                    "BackupFailed",
                    status::failure(finished.job),
                )
            };
            announce.push(Announcement {
                type_,
                reason: reason.into(),
                action: "Backup",
                note,
            });
        }
        announce
    }

    /// Takes the plan's step.
    async fn take(&self, context: &Context<'_>, step: &Step) -> Result<Taken, Error> {
        match step {
            Step::Start { tick, skipped } => self.start(context, *tick, *skipped).await,
            Step::Trim { jobs } => {
                let api: Api<Job> =
                    Api::namespaced(context.shared.client.clone(), &context.namespace);
                for job in jobs {
                    let uid = cached(&self.jobs, job, &context.namespace).and_then(|j| j.uid());
                    delete_child(&api, job, uid.as_deref()).await?;
                }
                Ok(Taken::Done)
            }
        }
    }

    /// Starts the backup of `tick`: checks the cluster and the destination, then creates its
    /// Job, unless another EtcdBackup's Job copies the cluster now (then this one waits).
    async fn start(
        &self,
        context: &Context<'_>,
        tick: Timestamp,
        skipped: u64,
    ) -> Result<Taken, Error> {
        let backup = context.object;
        let clusters: Api<EtcdCluster> =
            Api::namespaced(context.shared.client.clone(), &context.namespace);
        let cluster_name = &backup.spec.etcd_cluster.name;
        let cluster = clusters
            .get_opt(cluster_name)
            .await
            .map_err(|source| Error::Get {
                kind: "EtcdCluster".into(),
                name: cluster_name.clone(),
                source,
            })?
            .ok_or_else(|| Error::Waiting {
                reason: "ClusterNotFound",
                message: format!(
                    "spec.etcdCluster.name: EtcdCluster {cluster_name} does not exist in namespace {}",
                    context.namespace
                ),
            })?;
        let policy = policy(backup);
        let kept = backup.status.as_ref().map(|s| s.snapshots.as_slice());
        let file = children::snapshot_file(
            &context.name,
            next_slot(kept.unwrap_or_default(), policy.max_backups),
        );
        // A periodic series to a bucket: `<key>_<yyyymmdd-hhmmss>`, sharing the prefix `<key>_`.
        let periodic = matches!(desired(backup).repeat, Repeat::Every(_));
        let stamp = tick.strftime("%Y%m%d-%H%M%S").to_string();
        let (object, series) = match &backup.spec.s3 {
            Some(s3) if periodic => (
                bucket::series_object(&s3.path, Some(&stamp)),
                Some(bucket::series_prefix(&s3.path)),
            ),
            Some(s3) => (s3.path.clone(), None),
            None => (String::new(), None),
        };
        let helper_image;
        let destination = match backup.spec.storage_type {
            BackupStorageType::PersistentVolume => {
                self.destination(context).await?;
                Destination::Claim { file: &file }
            }
            BackupStorageType::S3 => {
                let s3 = s3(backup)?;
                helper_image = self.bucket(context, s3).await?;
                Destination::Bucket {
                    s3,
                    object: &object,
                    series: series.as_deref().map(|prefix| (prefix, policy.max_backups)),
                    helper_image: &helper_image,
                }
            }
        };
        let source = self
            .source(&context.shared.client, &cluster, &context.namespace)
            .await?;
        let file = destination.file().to_owned();
        let version = Version::parse(&source.version)
            .or_else(|| Version::parse(&cluster.spec.version))
            .ok_or_else(|| Error::InvalidSpec {
                field: "spec.version",
                message: format!("{:?} is not an etcd version", cluster.spec.version),
            })?;
        let job = children::backup_job(
            backup,
            &context.owner,
            &children::SnapshotJob {
                tick,
                skipped,
                destination,
                endpoint: &source.endpoint,
                image: image(&cluster.spec.repository, &version),
                revision: source.revision,
                etcd_version: &source.version,
                db_size: source.db_size,
                timeout_seconds: policy.timeout_in_second,
                client_tls_secret: cluster.spec.operator_tls_secret(),
            },
        );
        if let Some(other_job) = self.turn(context, Some(&job.name_any())) {
            return Ok(Taken::TurnedAway { other_job });
        }
        let api: Api<Job> = Api::namespaced(context.shared.client.clone(), &context.namespace);
        let job = ensure_job(&self.jobs, &api, job, |job| {
            job.labels().get(INSTANCE_LABEL) == Some(&context.name)
        })
        .await?;
        let mut note = format!(
            "Job {} takes snapshot {file} from {} (revision {})",
            job.name_any(),
            source.endpoint,
            source.revision
        );
        if skipped > 0 {
            note.push_str(&format!(
                "; {skipped} earlier tick(s) passed without a backup (the operator was down or a backup was running)"
            ));
        }
        context
            .shared
            .publish(backup, EventType::Normal, "BackupStarted", "Backup", note)
            .await;
        Ok(Taken::Done)
    }

    /// The healthy voting member with the highest revision, if the cluster has a quorum.
    async fn source(
        &self,
        client: &kube::Client,
        cluster: &EtcdCluster,
        namespace: &str,
    ) -> Result<Source, Error> {
        let name = cluster.name_any();
        let tls = cluster.spec.server_tls_secret().is_some();
        let members = cluster.status.as_ref().map(|s| &s.members);
        let endpoints: Vec<String> = members
            .into_iter()
            .flat_map(|m| m.ready.iter().chain(&m.unready))
            .map(|pod| self.addressing.client_url(&name, namespace, pod, tls))
            .collect();
        let no_quorum = |message: String| Error::Waiting {
            reason: "NoQuorum",
            message,
        };
        let served = cluster
            .status
            .as_ref()
            .is_some_and(|s| s.phase != EtcdClusterPhase::Creating);
        match (endpoints.is_empty(), served) {
            (true, false) => {
                return Err(Error::Waiting {
                    reason: "ClusterNotReady",
                    message: format!(
                        "EtcdCluster {name} has no members yet; the backup starts once it serves"
                    ),
                });
            }
            // A cluster that lost its quorum lists no members: etcd cannot say who they are.
            (true, true) => {
                return Err(no_quorum(format!(
                    "EtcdCluster {name} has served but no member answers now, so there is no quorum: the backup waits for the cluster to recover"
                )));
            }
            _ => {}
        }
        let etcd = client_for(client, &self.etcd, cluster).await?;
        let listed = members_with_status(&*etcd, &endpoints).await.map_err(|error| {
            no_quorum(format!(
                "no member of EtcdCluster {name} answers with a leader ({error}), so there is no quorum: a snapshot needs a healthy member of a cluster with a quorum, so the backup waits for the cluster to recover"
            ))
        })?;
        let voting: Vec<_> = listed
            .into_iter()
            .filter(|(member, _)| !member.is_learner)
            .collect();
        let healthy: Vec<(String, Status)> = voting
            .iter()
            .filter_map(|(member, status)| {
                let status = status.clone().filter(Status::has_leader)?;
                Some((member.client_urls.first()?.clone(), status))
            })
            .collect();
        if healthy.len() < quorum(voting.len()) {
            return Err(no_quorum(format!(
                "EtcdCluster {name} has {} of {} voting members healthy, no quorum: a snapshot now could miss acknowledged writes, so the backup waits for the cluster to recover",
                healthy.len(),
                voting.len()
            )));
        }
        healthy
            .into_iter()
            .max_by_key(|(_, status)| status.revision)
            .map(|(endpoint, status)| Source {
                endpoint,
                version: status.version,
                revision: status.revision,
                db_size: status.db_size,
            })
            .ok_or_else(|| no_quorum(format!("EtcdCluster {name} has no healthy member")))
    }

    /// What an upload to a bucket needs, checked before its Job starts: the image that uploads
    /// (returned), and the Secret it mounts (by its metadata only: the operator never reads
    /// credentials).
    async fn bucket(&self, context: &Context<'_>, s3: &S3Source) -> Result<String, Error> {
        bucket::ready(
            &context.shared.client,
            &context.namespace,
            self.helper_image.as_deref(),
            s3,
            "spec.s3",
            "a backup to a bucket",
        )
        .await
    }

    /// Makes sure the claim snapshots go to is there: the one the spec names must exist, ours
    /// is created when missing.
    async fn destination(&self, context: &Context<'_>) -> Result<(), Error> {
        let backup = context.object;
        let name = children::claim_name(backup);
        let claims: Api<PersistentVolumeClaim> =
            Api::namespaced(context.shared.client.clone(), &context.namespace);
        if backup.spec.pv.claim_name.is_some() {
            let found = claims.get_opt(&name).await.map_err(|source| Error::Get {
                kind: "PersistentVolumeClaim".into(),
                name: name.clone(),
                source,
            })?;
            return match found {
                Some(_) => Ok(()),
                None => Err(Error::Waiting {
                    reason: "DestinationNotFound",
                    message: format!(
                        "spec.pv.claimName: PersistentVolumeClaim {name} does not exist in namespace {}; create it, or leave claimName unset for the operator to create one",
                        context.namespace
                    ),
                }),
            };
        }
        if let Some(existing) = cached(&self.claims, &name, &context.namespace) {
            return if existing.labels().get(INSTANCE_LABEL) == Some(&context.name) {
                Ok(())
            } else {
                Err(Error::Conflict {
                    kind: "PersistentVolumeClaim".into(),
                    name,
                })
            };
        }
        create_child(&claims, &children::snapshots_claim(backup)).await
    }
}

/// The spec's bucket; the schema requires it with `storageType: S3`.
fn s3(backup: &EtcdBackup) -> Result<&S3Source, Error> {
    backup.spec.s3.as_ref().ok_or(Error::InvalidSpec {
        field: "spec.s3",
        message: "storageType S3 needs spec.s3".into(),
    })
}

fn policy(backup: &EtcdBackup) -> app_operator_api::etcdbackup::BackupPolicy {
    backup.spec.backup_policy.clone().unwrap_or_default()
}

/// The slot the next snapshot goes to: the first free one, else the oldest kept.
fn next_slot(kept: &[SnapshotRecord], max_backups: i32) -> usize {
    let max = usize::try_from(max_backups).unwrap_or(1).max(1);
    let used = |slot: usize| {
        kept.iter()
            .any(|k| k.file.ends_with(&format!("-{slot}.db")))
    };
    if let Some(free) = (0..max).find(|slot| !used(*slot)) {
        return free;
    }
    kept.last()
        .and_then(|oldest| {
            let stem = oldest.file.strip_suffix(".db")?;
            stem.rsplit_once('-')?.1.parse().ok()
        })
        .filter(|slot| *slot < max)
        .unwrap_or(0)
}

/// What the spec asks for, as the plan reads it.
fn desired(backup: &EtcdBackup) -> Desired {
    let policy = policy(backup);
    let repeat = match &policy.schedule {
        Some(expression) => match Schedule::parse(expression) {
            Ok(schedule) => Repeat::Every(schedule),
            Err(message) => Repeat::Invalid(message),
        },
        None => {
            Schedule::every(policy.backup_interval_in_second).map_or(Repeat::Once, Repeat::Every)
        }
    };
    Desired {
        repeat,
        history: JOB_HISTORY,
    }
}

/// A backup Job as the plan and the status read it: what the operator knew when it started it
/// is in its annotations (the Job's containers cannot report back: the image has no shell).
fn backup_job(job: &Job, pods: &[Arc<Pod>]) -> BackupJob {
    let annotation = |key: &str| job.annotations().get(key).cloned().unwrap_or_default();
    let seen = SeenJob::of(job).with_pods(pods.iter().map(AsRef::as_ref));
    BackupJob {
        tick: annotation(TICK_ANNOTATION).parse().ok(),
        skipped: annotation(SKIPPED_ANNOTATION).parse().unwrap_or(0),
        snapshot: SnapshotRecord {
            file: annotation(FILE_ANNOTATION),
            time: Time(
                seen.finished()
                    .and_then(|(at, _)| at)
                    .unwrap_or(Timestamp::UNIX_EPOCH),
            ),
            etcd_revision: annotation(REVISION_ANNOTATION).parse().unwrap_or(0),
            etcd_version: annotation(VERSION_ANNOTATION),
            size_bytes: annotation(SIZE_ANNOTATION).parse().unwrap_or(0),
            job: seen.name.clone(),
        },
        claim: job
            .spec
            .iter()
            .filter_map(|spec| spec.template.spec.as_ref())
            .flat_map(|pod| pod.volumes.iter().flatten())
            .find_map(|volume| Some(volume.persistent_volume_claim.as_ref()?.claim_name.clone())),
        job: seen,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(slots: &[usize]) -> Vec<SnapshotRecord> {
        slots
            .iter()
            .map(|slot| SnapshotRecord {
                file: children::snapshot_file("b", *slot),
                time: Time(Timestamp::UNIX_EPOCH),
                etcd_revision: 1,
                etcd_version: "3.6.16".into(),
                size_bytes: 1,
                job: "j".into(),
            })
            .collect()
    }

    #[test]
    fn snapshots_fill_free_slots_then_replace_the_oldest() {
        assert_eq!(next_slot(&kept(&[]), 3), 0);
        assert_eq!(next_slot(&kept(&[0]), 3), 1);
        assert_eq!(next_slot(&kept(&[1, 0]), 3), 2);
        // Newest first: slot 1 is the oldest of a full set.
        assert_eq!(next_slot(&kept(&[0, 2, 1]), 3), 1);
        // Fewer kept after maxBackups went down: the oldest slot still in range.
        assert_eq!(next_slot(&kept(&[0, 1]), 1), 0);
    }
}
