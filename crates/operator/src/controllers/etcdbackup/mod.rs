//! The EtcdBackup controller: snapshots of an EtcdCluster, one Job at a time. Each reconcile
//! records the Jobs that finished (from the Jobs themselves, so nothing is lost if a status
//! write is), then starts the backup that is due: the first one at once, then one per tick of
//! the policy, never two at once and at most one catch-up after downtime. A snapshot is taken
//! only from a healthy member of a cluster with a quorum (the one with the highest revision): a
//! member cut off from the quorum may be missing acknowledged writes.
//!
//! Why a Job and not a stream through the operator: the snapshot lands in a claim only a Pod can
//! mount, it may be gigabytes the operator would otherwise hold, `etcdctl` writes it atomically,
//! and the Job's deadline bounds it even while the operator is down.

mod children;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use app_operator_api::conditions::{DEGRADED, PROGRESSING, READY};
use app_operator_api::etcdbackup::{EtcdBackupStatus, SnapshotRecord};
use app_operator_api::etcdcluster::EtcdClusterPhase;
use app_operator_api::{EtcdBackup, EtcdCluster};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::Store;

use self::children::{
    BackupJob, CLUSTER_LABEL, FILE_ANNOTATION, INSTANCE_LABEL, REVISION_ANNOTATION,
    SIZE_ANNOTATION, SKIPPED_ANNOTATION, TICK_ANNOTATION, VERSION_ANNOTATION,
};
use crate::controllers::etcdcluster::address::Addressing;
use crate::controllers::etcdcluster::image;
use crate::controllers::etcdcluster::plan::quorum;
use crate::controllers::etcdcluster::version::Version;
use crate::etcd::{EtcdApi, Status, members_with_status};
use crate::reconcile::Error;
use crate::reconcile::apply::{controlled, controller_reference};
use crate::reconcile::children::create_child;
use crate::reconcile::conditions::{self, set};
use crate::reconcile::jobs::{Announced, Finished, JobState, Outcome, ensure_job, job_state};
use crate::reconcile::runner::{Reconciler, Runner, Settings, Shared, cached};
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

pub async fn run(
    settings: Settings,
    addressing: Addressing,
    etcd: Arc<dyn EtcdApi>,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let mut runner = Runner::<EtcdBackup>::new(NAME, &settings).children(children::INSTANCE_LABEL);
    let reconciler = EtcdBackupReconciler {
        jobs: runner.owns(),
        claims: runner.owns(),
        addressing,
        etcd,
        metrics: settings.metrics.clone(),
        announced: Announced::default(),
        turns: Mutex::default(),
    };
    runner.run(reconciler, shutdown).await;
}

struct EtcdBackupReconciler {
    jobs: Store<Job>,
    claims: Store<PersistentVolumeClaim>,
    addressing: Addressing,
    etcd: Arc<dyn EtcdApi>,
    metrics: Arc<Metrics>,
    announced: Announced,
    /// Whose backup Job copies each cluster (`namespace/cluster`), as this process started it.
    turns: Mutex<HashMap<String, Turn>>,
}

/// A backup Job this process started, until the cache shows it finished.
struct Turn {
    backup: String,
    job: String,
    since: Instant,
}

/// What one reconcile works on.
struct Context<'a> {
    backup: &'a EtcdBackup,
    name: String,
    namespace: String,
    owner: OwnerReference,
    shared: &'a Shared,
}

/// The member a snapshot is taken from.
struct Source {
    endpoint: String,
    version: String,
    revision: u64,
    db_size: u64,
}

impl Reconciler for EtcdBackupReconciler {
    type Object = EtcdBackup;

    async fn reconcile(&self, backup: &EtcdBackup, shared: &Shared) -> Result<Action, Error> {
        let namespace = backup
            .namespace()
            .ok_or(Error::MissingMetadata("namespace"))?;
        let uid = backup.uid().ok_or(Error::MissingMetadata("uid"))?;
        let owner = controller_reference(backup).ok_or(Error::MissingMetadata("uid"))?;
        let context = Context {
            backup,
            name: backup.name_any(),
            namespace: namespace.clone(),
            owner,
            shared,
        };
        let mut status = backup.status.clone().unwrap_or_default();
        let now = Timestamp::now();

        let jobs: Vec<(Arc<Job>, JobState)> = controlled(&self.jobs, &namespace, &uid)
            .into_iter()
            .map(|job| {
                let state = job_state(&job);
                (job, state)
            })
            .collect();
        let running = jobs
            .iter()
            .find(|(_, state)| *state == JobState::Running)
            .map(|(job, _)| job.name_any());
        let mut busy = self.turn(backup, &namespace, None);
        started(&mut status, &jobs);
        let mut outcome = self.record(&context, &mut status, &jobs).await;
        if outcome.is_ok() {
            outcome = match self.schedule(
                &context,
                &mut status,
                now,
                running.is_some() || busy.is_some(),
            ) {
                Ok(Some(due)) => self
                    .start(&context, &mut status, &due)
                    .await
                    .map(|waiting| {
                        busy = busy.take().or(waiting);
                    }),
                Ok(None) => Ok(()),
                Err(error) => Err(error),
            };
        }
        if let Err(error @ Error::Waiting { .. }) = &outcome {
            // The due backup could not start: that is the latest backup's outcome.
            status.succeeded = false;
            status.reason = Some(error.to_string());
        }
        finish(
            backup,
            &mut status,
            running.as_deref(),
            busy.as_deref(),
            outcome.as_ref().err(),
            &Time(now),
        );
        let then = match status.next_schedule_time.as_ref().map(|t| t.0) {
            _ if busy.is_some() => Action::requeue(CLUSTER_BUSY_POLL),
            Some(next) => {
                let wait = next.duration_since(now).unsigned_abs();
                Action::requeue(wait.max(Duration::from_millis(100)))
            }
            // A running Job's end is a Job event.
            None => Action::await_change(),
        };
        shared
            .write_status(backup, backup.status.as_ref(), status, |_| {}, outcome)
            .await
            .map(|()| then)
    }

    fn forget(&self, key: &str) {
        self.announced.forget(key);
        if let Some((namespace, name)) = key.split_once('/') {
            self.metrics.forget_etcd_backup(namespace, name);
        }
    }
}

/// A backup to start now.
struct Due {
    tick: Timestamp,
    skipped: u64,
}

impl EtcdBackupReconciler {
    /// The Job of another EtcdBackup copying the same cluster now: from the cache, or started by
    /// this process and not cached yet. With `take`, when there is none, this backup's Job
    /// `take` takes the turn in the same step (two EtcdBackups of a cluster may be reconciled at
    /// once).
    fn turn(&self, backup: &EtcdBackup, namespace: &str, take: Option<&str>) -> Option<String> {
        let cluster = &backup.spec.etcd_cluster.name;
        let own = backup.name_any();
        let key = format!("{namespace}/{cluster}");
        let mut turns = self
            .turns
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let over = turns.get(&key).is_some_and(|turn| {
            match cached(&self.jobs, &turn.job, namespace).map(|job| job_state(&job)) {
                Some(JobState::Running) => false,
                Some(_) => true,
                None => turn.since.elapsed() > TURN_UNSEEN,
            }
        });
        if over {
            turns.remove(&key);
        }
        let other = turns
            .get(&key)
            .filter(|turn| turn.backup != own)
            .map(|turn| turn.job.clone())
            .or_else(|| {
                self.jobs
                    .state()
                    .into_iter()
                    .filter(|job| job.namespace().as_deref() == Some(namespace))
                    .filter(|job| job.labels().get(CLUSTER_LABEL) == Some(cluster))
                    .filter(|job| job.labels().get(INSTANCE_LABEL) != Some(&own))
                    .find(|job| job_state(job) == JobState::Running)
                    .map(|job| job.name_any())
            });
        if let (None, Some(job)) = (&other, take) {
            let turn = Turn {
                backup: own,
                job: job.to_owned(),
                since: Instant::now(),
            };
            turns.insert(key, turn);
        }
        other
    }

    /// Records the Jobs that finished since the status last did (in order), in the status,
    /// events and metrics; trims the Job history.
    async fn record(
        &self,
        context: &Context<'_>,
        status: &mut EtcdBackupStatus,
        jobs: &[(Arc<Job>, JobState)],
    ) -> Result<(), Error> {
        let finished = Finished::of(jobs);
        let max = usize::try_from(policy(context.backup).max_backups)
            .unwrap_or(1)
            .max(1);
        let (namespace, name) = (&context.namespace, &context.name);
        let key = format!("{namespace}/{name}");
        for (at, job) in Finished::newer(&finished.succeeded, status.last_success_date.as_ref()) {
            let annotation = |key: &str| job.annotations().get(key).cloned().unwrap_or_default();
            let record = SnapshotRecord {
                file: annotation(FILE_ANNOTATION),
                time: at.clone().unwrap_or_else(|| Time(Timestamp::now())),
                etcd_revision: annotation(REVISION_ANNOTATION).parse().unwrap_or(0),
                etcd_version: annotation(VERSION_ANNOTATION),
                size_bytes: annotation(SIZE_ANNOTATION).parse().unwrap_or(0),
                job: job.name_any(),
            };
            // The claim the Job wrote to (the spec's may have changed since).
            status.claim_name = job
                .spec
                .iter()
                .filter_map(|spec| spec.template.spec.as_ref())
                .flat_map(|pod| pod.volumes.iter().flatten())
                .find_map(|volume| {
                    Some(volume.persistent_volume_claim.as_ref()?.claim_name.clone())
                })
                .or(status.claim_name.take());
            status.snapshots.retain(|kept| kept.file != record.file);
            status.snapshots.insert(0, record.clone());
            status.snapshots.truncate(max);
            status.last_success_date = Some(record.time.clone());
            status.etcd_revision = Some(record.etcd_revision);
            status.etcd_version = Some(record.etcd_version.clone());
            if !self.announced.first(&key, Outcome::Succeeded, at.as_ref()) {
                continue;
            }
            self.metrics
                .etcd_backups
                .finished(namespace, name, "succeeded");
            self.metrics
                .etcd_backups
                .set_last_success(namespace, name, record.time.0.as_second());
            self.metrics
                .set_etcd_snapshot_size(namespace, name, record.size_bytes);
            let note = format!(
                "Job {} saved snapshot {} (revision {}, etcd {})",
                record.job, record.file, record.etcd_revision, record.etcd_version
            );
            context
                .shared
                .publish(
                    context.backup,
                    EventType::Normal,
                    "BackupSucceeded",
                    "Backup",
                    note,
                )
                .await;
        }
        for (at, job) in Finished::newer(&finished.failed, status.last_failure_date.as_ref()) {
            let why = match job_state(&job) {
                JobState::Failed {
                    reason, message, ..
                } => format!("Job {} failed: {reason}: {message}", job.name_any()),
                _ => format!("Job {} failed", job.name_any()),
            };
            status.last_failure_date = at.clone();
            status.reason = Some(why.clone());
            if !self.announced.first(&key, Outcome::Failed, at.as_ref()) {
                continue;
            }
            self.metrics
                .etcd_backups
                .finished(namespace, name, "failed");
            context
                .shared
                .publish(
                    context.backup,
                    EventType::Warning,
                    "BackupFailed",
                    "Backup",
                    why,
                )
                .await;
        }
        let when = |t: &Option<Time>| t.as_ref().map(|t| t.0);
        status.succeeded = status.last_success_date.is_some()
            && when(&status.last_success_date) >= when(&status.last_failure_date);
        if status.succeeded {
            status.reason = None;
        }
        let api: Api<Job> = Api::namespaced(context.shared.client.clone(), namespace);
        finished.trim(&api, JOB_HISTORY, JOB_HISTORY).await
    }

    /// The backup due now, if any: the first one at once, then the latest tick of the policy
    /// since the last one started (the ticks before it are counted as skipped). None while one
    /// runs. Sets the next tick in the status.
    fn schedule(
        &self,
        context: &Context<'_>,
        status: &mut EtcdBackupStatus,
        now: Timestamp,
        running: bool,
    ) -> Result<Option<Due>, Error> {
        let policy = policy(context.backup);
        let repeat = match &policy.schedule {
            Some(expression) => {
                Some(
                    Schedule::parse(expression).map_err(|message| Error::InvalidSpec {
                        field: "spec.backupPolicy.schedule",
                        message,
                    })?,
                )
            }
            None => Schedule::every(policy.backup_interval_in_second),
        };
        let started = status.last_schedule_time.as_ref().map(|t| t.0);
        let next_after = |tick: Timestamp| repeat.as_ref().and_then(|r| r.next_after(tick));
        let due = match started {
            None => Some((now, 0)),
            Some(last) => repeat
                .as_ref()
                .and_then(|r| r.due(last, now))
                .map(|due| (due.tick, due.skipped)),
        };
        status.next_schedule_time = next_after(started.unwrap_or(now).max(now)).map(Time);
        if running {
            return Ok(None);
        }
        Ok(due.map(|(tick, skipped)| Due { tick, skipped }))
    }

    /// Starts the backup `due`: checks the cluster and the destination, then creates its Job,
    /// unless another EtcdBackup's Job copies the cluster now (returned: this one waits).
    async fn start(
        &self,
        context: &Context<'_>,
        status: &mut EtcdBackupStatus,
        due: &Due,
    ) -> Result<Option<String>, Error> {
        let backup = context.backup;
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
        self.destination(context).await?;
        let source = self.source(&cluster, &context.namespace).await?;
        let slot = next_slot(&status.snapshots, policy(backup).max_backups);
        let file = children::snapshot_file(&context.name, slot);
        let version = Version::parse(&source.version)
            .or_else(|| Version::parse(&cluster.spec.version))
            .ok_or_else(|| Error::InvalidSpec {
                field: "spec.version",
                message: format!("{:?} is not an etcd version", cluster.spec.version),
            })?;
        let job = children::backup_job(
            backup,
            &context.owner,
            &BackupJob {
                tick: due.tick,
                skipped: due.skipped,
                file: &file,
                endpoint: &source.endpoint,
                image: image(&cluster.spec.repository, &version),
                revision: source.revision,
                etcd_version: &source.version,
                db_size: source.db_size,
                timeout_seconds: policy(backup).timeout_in_second,
            },
        );
        if let Some(other) = self.turn(backup, &context.namespace, Some(&job.name_any())) {
            return Ok(Some(other));
        }
        let api: Api<Job> = Api::namespaced(context.shared.client.clone(), &context.namespace);
        let job = ensure_job(&self.jobs, &api, job, |job| {
            job.labels().get(INSTANCE_LABEL) == Some(&context.name)
        })
        .await?;
        started(status, &[(Arc::new(job.clone()), JobState::Running)]);
        let mut note = format!(
            "Job {} takes snapshot {file} from {} (revision {})",
            job.name_any(),
            source.endpoint,
            source.revision
        );
        if due.skipped > 0 {
            note.push_str(&format!(
                "; {} earlier tick(s) passed without a backup (the operator was down or a backup was running)",
                due.skipped
            ));
        }
        context
            .shared
            .publish(backup, EventType::Normal, "BackupStarted", "Backup", note)
            .await;
        Ok(None)
    }

    /// The healthy voting member with the highest revision, if the cluster has a quorum.
    async fn source(&self, cluster: &EtcdCluster, namespace: &str) -> Result<Source, Error> {
        let name = cluster.name_any();
        let members = cluster.status.as_ref().map(|s| &s.members);
        let endpoints: Vec<String> = members
            .into_iter()
            .flat_map(|m| m.ready.iter().chain(&m.unready))
            .map(|pod| self.addressing.client_url(&name, namespace, pod))
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
        let listed = members_with_status(&*self.etcd, &endpoints).await.map_err(|error| {
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

    /// Makes sure the claim snapshots go to is there: the one the spec names must exist, ours
    /// is created when missing.
    async fn destination(&self, context: &Context<'_>) -> Result<(), Error> {
        let backup = context.backup;
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

/// Folds the Jobs started after the status's last tick into it (their tick, and the ticks they
/// passed over). From the Jobs, so a pass that reads the object from a cache not yet showing the
/// status written with a Job's start still counts it, once.
fn started(status: &mut EtcdBackupStatus, jobs: &[(Arc<Job>, JobState)]) {
    let mut newer: Vec<(Timestamp, i64)> = jobs
        .iter()
        .filter_map(|(job, _)| {
            let annotations = job.annotations();
            let tick: Timestamp = annotations.get(TICK_ANNOTATION)?.parse().ok()?;
            let skipped = annotations
                .get(SKIPPED_ANNOTATION)
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            Some((tick, skipped))
        })
        .filter(|(tick, _)| {
            status
                .last_schedule_time
                .as_ref()
                .is_none_or(|t| *tick > t.0)
        })
        .collect();
    newer.sort();
    for (tick, skipped) in newer {
        status.last_schedule_time = Some(Time(tick));
        status.skipped_schedules = status.skipped_schedules.saturating_add(skipped);
    }
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

/// The conditions: Ready (the latest backup succeeded and nothing is in the way), Progressing
/// (a backup runs, or waits for another one of the same cluster), Degraded (why backups fail or
/// cannot start).
fn finish(
    backup: &EtcdBackup,
    status: &mut EtcdBackupStatus,
    running: Option<&str>,
    busy: Option<&str>,
    error: Option<&Error>,
    now: &Time,
) {
    let latest = status.snapshots.first();
    let ready = match (error, latest) {
        (None, Some(latest)) if status.succeeded => conditions::Desired {
            type_: READY,
            status: true,
            reason: "BackupSucceeded",
            message: format!(
                "snapshot {} at revision {} ({} kept)",
                latest.file,
                latest.etcd_revision,
                status.snapshots.len()
            ),
        },
        (Some(error), _) => conditions::Desired {
            type_: READY,
            status: false,
            reason: error.reason(),
            message: error.to_string(),
        },
        (None, _) if status.last_failure_date.is_some() && !status.succeeded => {
            conditions::Desired {
                type_: READY,
                status: false,
                reason: "BackupFailed",
                message: status.reason.clone().unwrap_or_default(),
            }
        }
        (None, _) => conditions::Desired {
            type_: READY,
            status: false,
            reason: "NoBackupYet",
            message: "no backup has finished yet".into(),
        },
    };
    let progressing = match (running, busy) {
        (Some(job), _) => conditions::Desired {
            type_: PROGRESSING,
            status: true,
            reason: "BackupRunning",
            message: format!("Job {job} is taking a snapshot"),
        },
        (None, Some(job)) => conditions::Desired {
            type_: PROGRESSING,
            status: true,
            reason: "WaitingForOtherBackup",
            message: format!(
                "Job {job} of another EtcdBackup is copying this cluster; one backup of a cluster runs at a time"
            ),
        },
        (None, None) => conditions::Desired {
            type_: PROGRESSING,
            status: false,
            reason: "Idle",
            message: "no backup is running".into(),
        },
    };
    let degraded = match error {
        None if !status.succeeded && status.last_failure_date.is_some() => conditions::Desired {
            type_: DEGRADED,
            status: true,
            reason: "BackupFailed",
            message: status.reason.clone().unwrap_or_default(),
        },
        _ => conditions::degraded(error, "backups run"),
    };
    let generation = backup.metadata.generation;
    let previous = status.conditions.clone();
    status.conditions = [ready, progressing, degraded]
        .into_iter()
        .map(|desired| set(&previous, desired, generation, now))
        .collect();
    status.observed_generation = generation;
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
