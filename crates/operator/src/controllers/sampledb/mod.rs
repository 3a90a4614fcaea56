//! `SampleDB` (seed 003): a PostgreSQL database with its volumes, init Job, scheduled backups,
//! restore at creation, offline upgrade and a snapshot before delete.
//!
//! Each reconcile is level-triggered and takes the next step only when the one before it is seen
//! done: finalizer → credentials and connection → claims → Service → StatefulSet → init (or
//! restore) Job once the database is Ready → backups on schedule, one at a time → upgrades with
//! the database stopped. On deletion: stop → final snapshot Job → delete the data.

mod children;
pub mod scripts;
mod status;

use std::sync::Arc;
use std::time::Duration;

use app_operator_api::SampleDB;
use app_operator_api::sampledb::{
    DeletionPolicy, FINALIZER, FinalSnapshotStatus, SampleDBStatus, UpgradeStatus,
};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::Store;
use kube::{Resource, ResourceExt};
use serde_json::json;

pub use self::children::INSTANCE_LABEL;
use self::children::{JobKind, ROLE_LABEL};
use self::status::{Findings, Problem};
use crate::reconcile::apply::{controlled, controller_reference};
use crate::reconcile::children::{OnImmutable, Owned, create_child, delete_child};
use crate::reconcile::finalizer::{Cleanup, finalize};
use crate::reconcile::jobs::{Announced, Finished, JobState, Outcome, ensure_job, job_state};
use crate::reconcile::runner::{Reconciler, Runner, Settings, Shared, cached};
use crate::reconcile::schedule::Schedule;
use crate::reconcile::{Error, FIELD_MANAGER};
use crate::telemetry::metrics::Metrics;

pub const NAME: &str = "sampledb";

/// How soon to look again while waiting for something no watched object announces (a Pod gone
/// from another owner, a claim released, a Job without an owner reference).
const POLL: Duration = Duration::from_secs(2);

pub async fn run(settings: Settings, shutdown: impl Future<Output = ()> + Send + Sync + 'static) {
    let mut runner = Runner::<SampleDB>::new(NAME, &settings).children(INSTANCE_LABEL);
    let reconciler = SampleDBReconciler {
        config_maps: Owned::new(runner.owns(), OnImmutable::Recreate),
        services: Owned::new(runner.owns(), OnImmutable::Recreate),
        stateful_sets: Owned::new(runner.owns(), OnImmutable::Recreate),
        claims: runner.owns(),
        jobs: runner.owns(),
        pods: runner.owns(),
        metrics: settings.metrics.clone(),
        announced: Announced::default(),
    };
    runner.run(reconciler, shutdown).await;
}

struct SampleDBReconciler {
    config_maps: Owned<ConfigMap>,
    services: Owned<Service>,
    stateful_sets: Owned<StatefulSet>,
    claims: Store<PersistentVolumeClaim>,
    jobs: Store<Job>,
    pods: Store<Pod>,
    metrics: Arc<Metrics>,
    announced: Announced,
}

/// What one reconcile works on.
struct Context<'a> {
    db: &'a SampleDB,
    name: String,
    namespace: String,
    uid: String,
    owner: OwnerReference,
    shared: &'a Shared,
}

/// `a` is a newer PostgreSQL version than `b` (numeric, component by component).
fn is_newer(a: &str, b: &str) -> bool {
    let parse = |v: &str| -> Vec<u64> { v.split('.').map(|p| p.parse().unwrap_or(0)).collect() };
    parse(a) > parse(b)
}

impl Reconciler for SampleDBReconciler {
    type Object = SampleDB;

    async fn reconcile(&self, db: &SampleDB, shared: &Shared) -> Result<Action, Error> {
        let namespace = db.namespace().ok_or(Error::MissingMetadata("namespace"))?;
        let uid = db.uid().ok_or(Error::MissingMetadata("uid"))?;
        let owner = controller_reference(db).ok_or(Error::MissingMetadata("uid"))?;
        let context = Context {
            db,
            name: db.name_any(),
            namespace: namespace.clone(),
            uid,
            owner,
            shared,
        };
        let api: Api<SampleDB> = Api::namespaced(shared.client.clone(), &namespace);
        finalize(
            shared,
            &api,
            db,
            FINALIZER,
            || self.live(&context),
            || self.clean_up(&context),
        )
        .await
    }

    fn forget(&self, key: &str) {
        self.announced.forget(key);
        if let Some((namespace, name)) = key.split_once('/') {
            self.metrics.sampledb_backups.forget(namespace, name);
        }
    }
}

impl SampleDBReconciler {
    /// The live object: converge, then write the status and publish what changed.
    async fn live(&self, context: &Context<'_>) -> Result<Action, Error> {
        let db = context.db;
        let previous = db.status.clone().unwrap_or_default();
        let mut status = previous.clone();
        let mut findings = Findings::default();
        let now = Timestamp::now();
        let converged = self
            .converge(context, &mut status, &mut findings, now)
            .await;
        let (outcome, next_tick) = match converged {
            Ok(next_tick) => (Ok(()), next_tick),
            Err(error) => (Err(error), None),
        };
        status::finish(
            db,
            &mut status,
            &findings,
            outcome.as_ref().err(),
            &Time(now),
        );
        self.announce(context, &previous, &status, &findings).await;
        if let Some(last) = &status.backup.last_successful_time {
            self.metrics.sampledb_backups.set_last_success(
                &context.namespace,
                &context.name,
                last.0.as_second(),
            );
        }
        let then = if findings.progress.is_some() {
            Action::requeue(POLL)
        } else if let Some(next) = next_tick {
            let wait = next.duration_since(now).unsigned_abs();
            Action::requeue(wait.max(Duration::from_millis(100)))
        } else {
            Action::await_change()
        };
        context
            .shared
            .write_status(db, db.status.as_ref(), status, |_| {}, outcome)
            .await
            .map(|()| then)
    }

    /// Makes the children match the spec and takes the lifecycle's next step. Returns the next
    /// backup tick, to wake up for it.
    async fn converge(
        &self,
        context: &Context<'_>,
        status: &mut SampleDBStatus,
        findings: &mut Findings,
        now: Timestamp,
    ) -> Result<Option<Timestamp>, Error> {
        let db = context.db;
        let client = &context.shared.client;
        self.ensure_credentials(context, status).await?;
        self.config_maps
            .apply(
                client,
                &context.uid,
                &children::connection(db, &context.owner),
            )
            .await?;
        for (claim, size) in [
            (children::data_claim(&context.name), &db.spec.storage.size),
            (
                children::backups_claim(&context.name),
                &db.spec.storage.backups_size,
            ),
        ] {
            self.apply_claim(context, children::claim(db, claim, size))
                .await?;
        }
        self.services
            .apply(client, &context.uid, &children::service(db, &context.owner))
            .await?;

        let backups = self.backup_jobs(context);
        let backup_running = backups.iter().any(|(_, state)| *state == JobState::Running);
        let (version, replicas) = self
            .upgrade(context, status, findings, backup_running)
            .await?;
        let (stateful_set, _) = self
            .stateful_sets
            .apply(
                client,
                &context.uid,
                &children::stateful_set(db, &context.owner, &version, replicas),
            )
            .await?;
        let ready_replicas = stateful_set
            .status
            .as_ref()
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0);
        findings.database_ready = replicas > 0 && ready_replicas > 0;

        if status.current_version.is_none() {
            self.initialize(context, status, findings).await?;
        }
        self.record_backups(context, status, &backups).await?;
        if status.current_version.is_some() && status.upgrade.is_none() {
            return self
                .schedule_backup(context, status, findings, now, backup_running)
                .await;
        }
        Ok(None)
    }

    /// The generated credentials are created once (`create` only: the operator cannot read
    /// Secrets) and recorded in the status; a user's Secret is only referenced.
    async fn ensure_credentials(
        &self,
        context: &Context<'_>,
        status: &mut SampleDBStatus,
    ) -> Result<(), Error> {
        let secret = children::credentials_secret(context.db);
        if context.db.spec.credentials.secret_name.is_none()
            && status.credentials_secret.as_deref() != Some(secret.as_str())
        {
            let password = random_password()?;
            let desired = children::generated_credentials(context.db, &context.owner, &password);
            let api: Api<Secret> =
                Api::namespaced(context.shared.client.clone(), &context.namespace);
            // One made by an earlier pass whose status write was lost is never overwritten.
            create_child(&api, &desired).await?;
        }
        status.credentials_secret = Some(secret);
        Ok(())
    }

    /// Applies a claim, which has no owner reference: the instance label says it is ours (a
    /// backups claim left by an earlier SampleDB of this name is taken on, so its backups can be
    /// restored). Only the size may change, and only up.
    async fn apply_claim(
        &self,
        context: &Context<'_>,
        desired: PersistentVolumeClaim,
    ) -> Result<(), Error> {
        let name = desired.name_any();
        let current = cached(&self.claims, &name, &context.namespace);
        let size = |claim: &PersistentVolumeClaim| {
            claim
                .spec
                .as_ref()
                .and_then(|s| s.resources.as_ref())
                .and_then(|r| r.requests.as_ref())
                .and_then(|r| r.get("storage").cloned())
        };
        if let Some(current) = &current {
            if !self.is_ours(current.as_ref(), &context.name) {
                return Err(Error::Conflict {
                    kind: "PersistentVolumeClaim".into(),
                    name,
                });
            }
            if size(current) == size(&desired) {
                return Ok(());
            }
        }
        let api: Api<PersistentVolumeClaim> =
            Api::namespaced(context.shared.client.clone(), &context.namespace);
        if current.is_none() {
            // Not in the cache: ours from an earlier life, or a stranger's (not labelled).
            if let Some(existing) = api.get_opt(&name).await.map_err(|source| Error::Get {
                kind: "PersistentVolumeClaim".into(),
                name: name.clone(),
                source,
            })? && !self.is_ours(&existing, &context.name)
            {
                return Err(Error::Conflict {
                    kind: "PersistentVolumeClaim".into(),
                    name,
                });
            }
        }
        api.patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&desired),
        )
        .await
        .map_err(|source| Error::Apply {
            kind: "PersistentVolumeClaim".into(),
            name,
            source,
        })?;
        Ok(())
    }

    fn is_ours(&self, object: &impl Resource, db: &str) -> bool {
        object
            .meta()
            .labels
            .as_ref()
            .and_then(|l| l.get(INSTANCE_LABEL))
            .map(String::as_str)
            == Some(db)
    }

    /// The upgrade's step, if one is wanted: returns the version to run and the replicas. The
    /// database is stopped (0 replicas, its Pods gone) before the upgrade Job starts; a failed
    /// upgrade runs the old version again and is not retried until the version changes or the
    /// Job is deleted; going back to `currentVersion` deletes the failed Job.
    async fn upgrade(
        &self,
        context: &Context<'_>,
        status: &mut SampleDBStatus,
        findings: &mut Findings,
        backup_running: bool,
    ) -> Result<(String, i32), Error> {
        let db = context.db;
        let Some(current) = status.current_version.clone() else {
            return Ok((db.spec.version.clone(), 1));
        };
        let wanted = &db.spec.version;
        if let Some(upgrade) = status.upgrade.clone()
            && &upgrade.to != wanted
        {
            // Given up (the version went back) or replaced by a newer target.
            let job = children::upgrade_job_name(&context.name, &upgrade.to);
            self.delete_job(context, &job).await?;
            status.upgrade = None;
        }
        if wanted == &current || !is_newer(wanted, &current) {
            return Ok((current, 1));
        }
        let upgrade = status.upgrade.get_or_insert_with(|| UpgradeStatus {
            from: current.clone(),
            to: wanted.clone(),
            job: None,
        });
        let job_name = children::upgrade_job_name(&context.name, wanted);
        let job = cached(&self.jobs, &job_name, &context.namespace);
        match job.as_deref().map(job_state) {
            Some(JobState::Succeeded(_)) => {
                status.current_version = Some(wanted.clone());
                status.upgrade = None;
                Ok((wanted.clone(), 1))
            }
            Some(JobState::Failed { message, .. }) => {
                findings.problem = Some(Problem {
                    reason: "UpgradeFailed",
                    message: format!(
                        "upgrade Job {job_name} from {current} to {wanted} failed ({message}); the database runs {current} again. Set spec.version back to {current}, or delete the Job to retry"
                    ),
                });
                Ok((current, 1))
            }
            Some(JobState::Running) => {
                findings.upgrading = true;
                findings.progress = Some((
                    "Upgrading",
                    format!("upgrade Job {job_name} is converting the data to {wanted}"),
                ));
                Ok((current, 0))
            }
            None => {
                findings.upgrading = true;
                if backup_running {
                    findings.progress = Some((
                        "WaitingForBackup",
                        "the upgrade starts when the running backup ends".to_owned(),
                    ));
                    return Ok((current, 1));
                }
                if self.database_pods(context) > 0 {
                    findings.progress = Some((
                        "StoppingDatabase",
                        format!("stopping the database to upgrade it from {current} to {wanted}"),
                    ));
                    return Ok((current, 0));
                }
                let desired = children::upgrade_job(db, &context.owner, &current, wanted);
                self.ensure_job(context, desired).await?;
                upgrade.job = Some(job_name.clone());
                findings.progress = Some((
                    "Upgrading",
                    format!("upgrade Job {job_name} is converting the data to {wanted}"),
                ));
                Ok((current, 0))
            }
        }
    }

    /// The init (or restore) Job, once the database is Ready.
    async fn initialize(
        &self,
        context: &Context<'_>,
        status: &mut SampleDBStatus,
        findings: &mut Findings,
    ) -> Result<(), Error> {
        if !findings.database_ready {
            findings.progress = Some((
                "WaitingForDatabase",
                "waiting for the database Pod to be Ready".to_owned(),
            ));
            return Ok(());
        }
        let desired = children::first_job(context.db, &context.owner);
        let name = desired.name_any();
        let kind = if context.db.spec.restore.is_some() {
            JobKind::Restore
        } else {
            JobKind::Init
        };
        match job_state(&self.ensure_job(context, desired).await?) {
            JobState::Succeeded(_) => {
                status.current_version = Some(context.db.spec.version.clone());
            }
            JobState::Failed { message, .. } => {
                let (reason, what) = match kind {
                    JobKind::Restore => ("RestoreJobFailed", "restore"),
                    _ => ("InitJobFailed", "init"),
                };
                findings.init_failed = true;
                findings.problem = Some(Problem {
                    reason,
                    message: format!(
                        "{what} Job {name} failed ({message}); no backups run until it succeeds. Fix the cause and delete the Job to run it again"
                    ),
                });
            }
            JobState::Running => {
                findings.progress = Some((
                    "Initializing",
                    format!("Job {name} is initializing the database"),
                ));
            }
        }
        Ok(())
    }

    /// The backup Jobs of this SampleDB, with their states (read once per reconcile).
    fn backup_jobs(&self, context: &Context<'_>) -> Vec<(Arc<Job>, JobState)> {
        controlled(&self.jobs, &context.namespace, &context.uid)
            .into_iter()
            .filter(|job| {
                job.labels().get(ROLE_LABEL).map(String::as_str) == Some(JobKind::Backup.label())
            })
            .map(|job| {
                let state = job_state(&job);
                (job, state)
            })
            .collect()
    }

    /// Records finished backups in the status and metrics (each once: newer than the last one
    /// recorded), and trims the history to its limits.
    async fn record_backups(
        &self,
        context: &Context<'_>,
        status: &mut SampleDBStatus,
        backups: &[(Arc<Job>, JobState)],
    ) -> Result<(), Error> {
        let finished = Finished::of(backups);
        let key = format!("{}/{}", context.namespace, context.name);
        let backup = &mut status.backup;
        for (at, job) in Finished::newer(&finished.succeeded, backup.last_successful_time.as_ref())
        {
            backup.last_successful_time = at.clone();
            backup.last_successful_job = Some(job.name_any());
            if !self.announced.first(&key, Outcome::Succeeded, at.as_ref()) {
                continue;
            }
            self.metrics
                .sampledb_backups
                .finished(&context.namespace, &context.name, "succeeded");
        }
        for (at, job) in Finished::newer(&finished.failed, backup.last_failed_time.as_ref()) {
            backup.last_failed_time = at.clone();
            backup.last_failed_job = Some(job.name_any());
            if !self.announced.first(&key, Outcome::Failed, at.as_ref()) {
                continue;
            }
            self.metrics
                .sampledb_backups
                .finished(&context.namespace, &context.name, "failed");
        }
        let policy = &context.db.spec.backup;
        let keep = |limit: i32| usize::try_from(limit).unwrap_or(0);
        let api: Api<Job> = Api::namespaced(context.shared.client.clone(), &context.namespace);
        finished
            .trim(
                &api,
                keep(policy.successful_jobs_history_limit),
                keep(policy.failed_jobs_history_limit),
            )
            .await
    }

    /// Starts the backup of the latest due tick, unless one is running (never two at once) or
    /// backups are suspended. Ticks passed over are counted. Returns the next tick.
    async fn schedule_backup(
        &self,
        context: &Context<'_>,
        status: &mut SampleDBStatus,
        findings: &mut Findings,
        now: Timestamp,
        backup_running: bool,
    ) -> Result<Option<Timestamp>, Error> {
        let db = context.db;
        let Some(expression) = &db.spec.backup.schedule else {
            status.backup.next_schedule_time = None;
            return Ok(None);
        };
        let schedule = match Schedule::parse(expression) {
            Ok(schedule) => schedule,
            Err(message) => {
                findings.problem.get_or_insert(Problem {
                    reason: "InvalidSchedule",
                    message: format!("spec.backup.schedule: {message}; no backups run"),
                });
                status.backup.next_schedule_time = None;
                return Ok(None);
            }
        };
        if db.spec.backup.suspend {
            status.backup.next_schedule_time = None;
            return Ok(None);
        }
        let after = status
            .backup
            .last_schedule_time
            .as_ref()
            .or(db.metadata.creation_timestamp.as_ref())
            .map_or(now, |t| t.0);
        let next = if let Some(due) = schedule.due(after, now)
            && !backup_running
        {
            let version = status.current_version.clone().unwrap_or_default();
            let desired = children::backup_job(db, &context.owner, &version, due.tick);
            self.ensure_job(context, desired).await?;
            status.backup.last_schedule_time = Some(Time(due.tick));
            status.backup.skipped_schedules = status
                .backup
                .skipped_schedules
                .saturating_add(i64::try_from(due.skipped).unwrap_or(i64::MAX));
            schedule.next_after(due.tick.max(now))
        } else {
            // Not due yet, or due while a backup runs: its end (a Job event) wakes us up.
            schedule.next_after(now)
        };
        status.backup.next_schedule_time = next.map(Time);
        Ok(next)
    }

    /// The Job `desired` names, cached or created (see [`ensure_job`]).
    async fn ensure_job(&self, context: &Context<'_>, desired: Job) -> Result<Job, Error> {
        let api: Api<Job> = Api::namespaced(context.shared.client.clone(), &context.namespace);
        ensure_job(&self.jobs, &api, desired, |job| {
            self.is_ours(job, &context.name)
        })
        .await
    }

    async fn delete_job(&self, context: &Context<'_>, name: &str) -> Result<(), Error> {
        let api: Api<Job> = Api::namespaced(context.shared.client.clone(), &context.namespace);
        let uid = cached(&self.jobs, name, &context.namespace).and_then(|job| job.uid());
        delete_child(&api, name, uid.as_deref()).await
    }

    /// The database Pods of this SampleDB that still exist (terminating ones included).
    fn database_pods(&self, context: &Context<'_>) -> usize {
        self.pods
            .state()
            .iter()
            .filter(|pod| {
                pod.namespace().as_deref() == Some(context.namespace.as_str())
                    && self.is_ours(pod.as_ref(), &context.name)
                    && pod.labels().get(ROLE_LABEL).map(String::as_str) == Some("database")
            })
            .count()
    }

    /// Publishes the events for what changed since `previous`.
    async fn announce(
        &self,
        context: &Context<'_>,
        previous: &SampleDBStatus,
        status: &SampleDBStatus,
        findings: &Findings,
    ) {
        for event in events(&context.name, previous, status, findings) {
            context
                .shared
                .publish(
                    context.db,
                    event.type_,
                    event.reason,
                    event.action,
                    event.note,
                )
                .await;
        }
    }

    /// Deletion: by the policy, snapshot the stopped database into the backups volume, then
    /// delete the StatefulSet and the data claim (the backups claim stays). The status says how
    /// far it got; a failed snapshot blocks with the way out in the message.
    async fn clean_up(&self, context: &Context<'_>) -> Result<Cleanup, Error> {
        let db = context.db;
        let mut status = db.status.clone().unwrap_or_default();
        let mut findings = Findings {
            deleting: true,
            ..Findings::default()
        };
        let now = Time(Timestamp::now());
        let shared = context.shared;
        match self.take_down(context, &mut status, &mut findings).await {
            Ok(cleanup) => {
                if let Cleanup::Blocked { reason, message } = &cleanup {
                    findings.problem = Some(Problem {
                        reason,
                        message: message.clone(),
                    });
                }
                status::finish(db, &mut status, &findings, None, &now);
                shared
                    .write_status(db, db.status.as_ref(), status, |_| {}, Ok(()))
                    .await
                    .map(|()| cleanup)
            }
            Err(error) => {
                status::finish(db, &mut status, &findings, Some(&error), &now);
                // Returns the error (the runner reports it and retries).
                shared
                    .write_status(db, db.status.as_ref(), status, |_| {}, Err(error))
                    .await
                    .map(|()| Cleanup::Wait(POLL))
            }
        }
    }

    async fn take_down(
        &self,
        context: &Context<'_>,
        status: &mut SampleDBStatus,
        findings: &mut Findings,
    ) -> Result<Cleanup, Error> {
        let db = context.db;
        let policy = db.spec.deletion.policy;
        let snapshot_done = status
            .final_snapshot
            .as_ref()
            .is_some_and(|s| s.completion_time.is_some());
        // A database that never initialized has nothing to snapshot.
        let snapshot = policy == DeletionPolicy::Snapshot
            && !snapshot_done
            && status.current_version.is_some();
        if snapshot {
            if let Some(wait) = self.stop_database(context, findings).await? {
                return Ok(wait);
            }
            let version = status.current_version.clone().unwrap_or_default();
            let desired = children::final_snapshot_job(db, &context.uid, &version);
            let name = desired.name_any();
            let job = self.ensure_job(context, desired).await?;
            let record = status
                .final_snapshot
                .get_or_insert_with(|| FinalSnapshotStatus {
                    job: name.clone(),
                    start_time: job.metadata.creation_timestamp.clone(),
                    completion_time: None,
                });
            match job_state(&job) {
                JobState::Running => {
                    findings.progress = Some((
                        "Snapshotting",
                        format!("final snapshot Job {name} is dumping the stopped database"),
                    ));
                    return Ok(Cleanup::Wait(POLL));
                }
                JobState::Succeeded(at) => {
                    record.completion_time = at.or_else(|| Some(Time(Timestamp::now())));
                }
                JobState::Failed {
                    reason, message, ..
                } => {
                    let (reason, what) = if reason == "DeadlineExceeded" {
                        (
                            "SnapshotTimedOut",
                            "did not finish within spec.deletion.snapshotTimeoutSeconds",
                        )
                    } else {
                        ("SnapshotFailed", "failed")
                    };
                    return Ok(Cleanup::Blocked {
                        reason,
                        message: format!(
                            "the final snapshot Job {name} {what} ({message}); the SampleDB and its data are kept. To delete it without a snapshot: kubectl patch sampledb {} -n {} --type merge -p '{{\"spec\":{{\"deletion\":{{\"policy\":\"Delete\"}}}}}}'",
                            context.name, context.namespace
                        ),
                    });
                }
            }
        }
        self.remove_data(context, policy, findings).await
    }

    /// Scales the database to 0 and waits for its Pods to be gone. `None` once stopped.
    async fn stop_database(
        &self,
        context: &Context<'_>,
        findings: &mut Findings,
    ) -> Result<Option<Cleanup>, Error> {
        // Found by name and label: under orphan propagation it no longer has our reference.
        if let Some(stateful_set) = self.stateful_sets.get(&context.namespace, &context.name)
            && self.is_ours(stateful_set.as_ref(), &context.name)
            && stateful_set.spec.as_ref().and_then(|s| s.replicas) != Some(0)
            && stateful_set.metadata.deletion_timestamp.is_none()
        {
            let api: Api<StatefulSet> =
                Api::namespaced(context.shared.client.clone(), &context.namespace);
            let patch = json!({ "spec": { "replicas": 0 } });
            match api
                .patch(
                    &context.name,
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(source) => {
                    return Err(Error::Apply {
                        kind: "StatefulSet".into(),
                        name: context.name.clone(),
                        source,
                    });
                }
            }
        }
        if self.database_pods(context) > 0 {
            findings.progress = Some((
                "StoppingDatabase",
                "stopping the database for its final snapshot".to_owned(),
            ));
            return Ok(Some(Cleanup::Wait(POLL)));
        }
        Ok(None)
    }

    /// Deletes the StatefulSet and, unless the policy is `Retain`, the data claim; done once
    /// they are gone.
    async fn remove_data(
        &self,
        context: &Context<'_>,
        policy: DeletionPolicy,
        findings: &mut Findings,
    ) -> Result<Cleanup, Error> {
        let client = &context.shared.client;
        let mut left = Vec::new();
        if let Some(stateful_set) = self.stateful_sets.get(&context.namespace, &context.name)
            && self.is_ours(stateful_set.as_ref(), &context.name)
        {
            let api: Api<StatefulSet> = Api::namespaced(client.clone(), &context.namespace);
            delete_child(&api, &context.name, stateful_set.uid().as_deref()).await?;
            left.push(format!("StatefulSet {}", context.name));
        }
        // Its Pod, finished or not, holds the data claim (pvc-protection); the snapshot itself
        // is the file in the backups volume.
        let snapshot = children::final_snapshot_job_name(&context.name, &context.uid);
        if cached(&self.jobs, &snapshot, &context.namespace).is_some() {
            self.delete_job(context, &snapshot).await?;
            left.push(format!("Job {snapshot}"));
        }
        let data = children::data_claim(&context.name);
        if policy != DeletionPolicy::Retain
            && let Some(claim) = cached(&self.claims, &data, &context.namespace)
            && self.is_ours(claim.as_ref(), &context.name)
        {
            let api: Api<PersistentVolumeClaim> =
                Api::namespaced(client.clone(), &context.namespace);
            delete_child(&api, &data, claim.uid().as_deref()).await?;
            left.push(format!("PersistentVolumeClaim {data}"));
        }
        if left.is_empty() {
            return Ok(Cleanup::Done);
        }
        findings.progress = Some((
            "DeletingData",
            format!("waiting for {} to be gone", left.join(" and ")),
        ));
        Ok(Cleanup::Wait(POLL))
    }
}

/// One event to publish.
#[derive(Debug, PartialEq)]
struct Announcement {
    type_: EventType,
    reason: &'static str,
    action: &'static str,
    note: String,
}

/// Events for what changed: a Warning when a problem first appears (or backups were missed or
/// failed), Normal events for initialization, upgrades and backups.
fn events(
    name: &str,
    previous: &SampleDBStatus,
    status: &SampleDBStatus,
    findings: &Findings,
) -> Vec<Announcement> {
    let event = |type_, reason, action, note| Announcement {
        type_,
        reason,
        action,
        note,
    };
    let mut events = Vec::new();
    let degraded_before = previous
        .conditions
        .iter()
        .find(|c| c.type_ == app_operator_api::conditions::DEGRADED && c.status == "True")
        .map(|c| c.reason.as_str());
    if let Some(problem) = &findings.problem
        && degraded_before != Some(problem.reason)
    {
        let note = problem.message.clone();
        events.push(event(EventType::Warning, problem.reason, "Reconcile", note));
    }
    match (&previous.current_version, &status.current_version) {
        (None, Some(version)) => {
            let note = format!("the database was initialized at version {version}");
            events.push(event(EventType::Normal, "Initialized", "Initialize", note));
        }
        (Some(from), Some(to)) if from != to => {
            let note = format!("the database was upgraded from {from} to {to}");
            events.push(event(EventType::Normal, "Upgraded", "Upgrade", note));
        }
        _ => {}
    }
    let backup = (&previous.backup, &status.backup);
    if backup.0.last_schedule_time != backup.1.last_schedule_time
        && let Some(tick) = &backup.1.last_schedule_time
    {
        let note = format!(
            "started backup Job {}",
            children::backup_job_name(name, tick.0)
        );
        events.push(event(EventType::Normal, "BackupStarted", "Backup", note));
    }
    let skipped = backup.1.skipped_schedules - backup.0.skipped_schedules;
    if skipped > 0 {
        let note = format!(
            "{skipped} scheduled backup(s) were passed over (the operator was down, or a backup was still running); one backup caught up"
        );
        events.push(event(EventType::Warning, "MissedSchedules", "Backup", note));
    }
    let finished = [
        (
            &backup.0.last_successful_job,
            &backup.1.last_successful_job,
            EventType::Normal,
            "BackupSucceeded",
            "succeeded",
        ),
        (
            &backup.0.last_failed_job,
            &backup.1.last_failed_job,
            EventType::Warning,
            "BackupFailed",
            "failed; see its Pod's log",
        ),
    ];
    for (before, now, type_, reason, outcome) in finished {
        if before != now
            && let Some(job) = now
        {
            let note = format!("backup Job {job} {outcome}");
            events.push(event(type_, reason, "Backup", note));
        }
    }
    events
}

/// 32 random alphanumeric characters (about 190 bits).
fn random_password() -> Result<String, Error> {
    use ring::rand::{SecureRandom, SystemRandom};
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut bytes = [0u8; 32];
    SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| Error::Random)?;
    Ok(bytes
        .iter()
        .filter_map(|b| {
            ALPHABET
                .get(usize::from(*b) % ALPHABET.len())
                .map(|c| char::from(*c))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    #[test]
    fn events_say_what_changed_once() {
        let previous = SampleDBStatus::default();
        let mut status = previous.clone();
        status.current_version = Some("16.4".into());
        status.backup.last_schedule_time = Some(Time("2026-11-23T03:00:00Z".parse().unwrap()));
        status.backup.skipped_schedules = 2;
        status.backup.last_failed_job = Some("db-backup-20261123-025500".into());
        let findings = Findings {
            problem: Some(Problem {
                reason: "InvalidSchedule",
                message: "bad".into(),
            }),
            ..Findings::default()
        };
        let reasons: Vec<&str> = events("db", &previous, &status, &findings)
            .iter()
            .map(|e| e.reason)
            .collect();
        assert_eq!(
            reasons,
            [
                "InvalidSchedule",
                "Initialized",
                "BackupStarted",
                "MissedSchedules",
                "BackupFailed"
            ]
        );
        let started = &events("db", &previous, &status, &findings)[2];
        assert_eq!(started.note, "started backup Job db-backup-20261123-030000");
        // Nothing changed: nothing to say (the problem is already the Degraded reason).
        status.conditions = vec![app_operator_api::conditions::Condition {
            type_: "Degraded".into(),
            status: "True".into(),
            reason: "InvalidSchedule".into(),
            message: "bad".into(),
            observed_generation: None,
            last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
        }];
        assert!(events("db", &status, &status, &findings).is_empty());
    }
}
