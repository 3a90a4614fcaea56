//! `SampleDB` (seed 003): a PostgreSQL database with its volumes, init Job, scheduled backups,
//! restore at creation, offline upgrade and a snapshot before delete.
//!
//! Each reconcile observes the status recorded so far and the children in the cache, lets the
//! pure [`plan`] choose the database to run and at most one step, applies the children every
//! pass sets (credentials once, connection ConfigMap, claims, Service, StatefulSet), takes the
//! step, and writes the pure [`status`]. On deletion the plan's cleanup runs instead: stop →
//! final snapshot Job → delete the data.

pub mod children;
pub mod plan;
pub mod scripts;
mod status;

use std::sync::Arc;
use std::time::Duration;

use app_operator_api::etcdbackup::S3Source;
use app_operator_api::sampledb::{FINALIZER, SampleDBStatus};
use app_operator_api::{BACKUP_REQUESTED_AT, SampleDB};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::Store;
use kube::{Resource, ResourceExt};
use serde_json::json;

pub use self::children::INSTANCE_LABEL;
use self::children::{JobKind, ROLE_LABEL};
use self::plan::{Backups, Database, Desired, Observed, Plan, Problem, Stage, Step};
use super::{Wiring, bucket};
use crate::reconcile::apply::controlled;
use crate::reconcile::children::{OnImmutable, Owned, create_child, delete_child};
use crate::reconcile::finalizer::{Cleanup, finalize};
use crate::reconcile::jobs::{Announced, Outcome, SeenJob, ensure_job};
use crate::reconcile::runner::{Announcement, Reconciled, Reconciler, Runner, Target, cached};
use crate::reconcile::schedule::Schedule;
use crate::reconcile::{Error, apply_params};
use crate::telemetry::metrics::Metrics;

pub const NAME: &str = "sampledb";

/// How soon to look again while a step is under way. Every child, and the Pods of its Jobs and
/// StatefulSet, wakes the SampleDB when it changes; this covers a change missed while a watch
/// relists.
const POLL: Duration = Duration::from_secs(2);

pub async fn run(wiring: Wiring, shutdown: impl Future<Output = ()> + Send + Sync + 'static) {
    let settings = wiring.settings;
    let mut runner = Runner::<SampleDB>::new(NAME, &settings).children(INSTANCE_LABEL);
    let reconciler = SampleDBReconciler {
        config_maps: Owned::new(runner.owns(), OnImmutable::Recreate),
        services: Owned::new(runner.owns(), OnImmutable::Recreate),
        stateful_sets: Owned::new(runner.owns(), OnImmutable::Recreate),
        claims: runner.owns(),
        jobs: runner.owns(),
        pods: runner.owns(),
        helper_image: wiring.helper_image,
        metrics: settings.metrics.clone(),
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
    /// The operator's image, which moves dumps to and from buckets.
    helper_image: Option<String>,
    metrics: Arc<Metrics>,
}

type Context<'a> = Target<'a, SampleDB, Announced>;

/// The Jobs of the SampleDB's namespace.
fn jobs(context: &Context<'_>) -> Api<Job> {
    Api::namespaced(context.shared.client.clone(), &context.namespace)
}

impl Reconciler for SampleDBReconciler {
    type Object = SampleDB;
    type Memory = Announced;

    async fn reconcile(&self, context: &Context<'_>) -> Reconciled<SampleDBStatus> {
        finalize(
            context,
            FINALIZER,
            || self.live(context),
            || self.clean_up(context),
        )
        .await
    }

    fn forget_metrics(&self, namespace: &str, name: &str) {
        self.metrics.sampledb_backups.forget(namespace, name);
    }
}

/// What the spec asks for, as the plan reads it.
fn desired(db: &SampleDB) -> Desired {
    let spec = &db.spec;
    let backups = match &spec.backup.schedule {
        _ if spec.backup.suspend => Backups::Off,
        None => Backups::Off,
        Some(expression) => match Schedule::parse(expression) {
            Ok(schedule) => Backups::On(schedule),
            Err(message) => Backups::Invalid(message),
        },
    };
    let keep = |limit: i32| usize::try_from(limit).unwrap_or(0);
    Desired {
        version: spec.version.clone(),
        restoring: spec.restore.is_some(),
        recovering: spec
            .restore
            .as_ref()
            .is_some_and(|restore| restore.point_in_time.is_some()),
        backups,
        backup_request: db.annotations().get(BACKUP_REQUESTED_AT).cloned(),
        keep_succeeded: keep(spec.backup.successful_jobs_history_limit),
        keep_failed: keep(spec.backup.failed_jobs_history_limit),
        deletion: spec.deletion.policy,
    }
}

impl SampleDBReconciler {
    /// The live object: plan, apply the children, take the step, write the status.
    async fn live(&self, context: &Context<'_>) -> Reconciled<SampleDBStatus> {
        let db = context.object;
        let now = Timestamp::now();
        let observed = self.observe(context, now);
        let plan = plan::plan(&context.name, &desired(db), &observed);
        let mut outcome = self.apply_children(context, &plan).await;
        if outcome.is_ok()
            && let Some(step) = &plan.step
        {
            outcome = self.take(context, &plan, step).await;
        }
        let status = status::status(db, &observed, &plan, outcome.as_ref().err(), now);
        let previous = db.status.clone().unwrap_or_default();
        self.record_backups(context, &previous, &status, &observed);
        let announce = events(&context.name, &previous, &status, plan.problem.as_ref());
        let then = if plan.step.is_some() || plan.progress.is_some() {
            Action::requeue(POLL)
        } else if let Some(next) = plan.next_backup {
            let wait = next.duration_since(now).unsigned_abs();
            Action::requeue(wait.max(Duration::from_millis(100)))
        } else {
            Action::await_change()
        };
        Reconciled::status(status, outcome, then).announcing(announce)
    }

    /// Deletion: the plan's cleanup step, then the status; the finalizer goes once it is done.
    async fn clean_up(&self, context: &Context<'_>) -> (Result<Cleanup, Error>, SampleDBStatus) {
        let db = context.object;
        let now = Timestamp::now();
        let observed = self.observe(context, now);
        let plan = plan::clean_up(&context.name, &context.namespace, &desired(db), &observed);
        let outcome = match &plan.step {
            Some(step) => self.take(context, &plan, step).await,
            None => Ok(()),
        };
        let status = status::status(db, &observed, &plan, outcome.as_ref().err(), now);
        let cleanup = match (&plan.stage, &plan.problem) {
            (Stage::Deleted, _) => Cleanup::Done,
            (Stage::DeletionBlocked, Some(problem)) => Cleanup::Blocked {
                reason: problem.reason,
                message: problem.message.clone(),
            },
            _ => Cleanup::Wait(POLL),
        };
        (outcome.map(|()| cleanup), status)
    }

    /// The status recorded so far and the children in the cache (found by name and label: a
    /// Job without an owner, or under orphan propagation, is still ours).
    fn observe(&self, context: &Context<'_>, now: Timestamp) -> Observed {
        let db = context.object;
        let status = db.status.clone().unwrap_or_default();
        let namespace = context.namespace.as_str();
        let jobs = ours(&self.jobs, namespace, &context.name);
        let own_pods = ours(&self.pods, namespace, &context.name);
        // A failed Job is seen with what its container said last (PostgreSQL's own error).
        let seen = |job: &Job| SeenJob::of(job).with_pods(own_pods.iter().map(AsRef::as_ref));
        let with_role = |kind: JobKind| {
            jobs.iter()
                .filter(move |job| role(job.as_ref()) == Some(kind.label()))
                .map(|job| seen(job))
        };
        let first_kind = if db.spec.restore.is_some() {
            JobKind::Restore
        } else {
            JobKind::Init
        };
        let snapshot = children::final_snapshot_job_name(&context.name, &context.uid);
        let pods = |wanted: &str| {
            own_pods
                .iter()
                .filter(|pod| role(pod.as_ref()) == Some(wanted))
                .count()
        };
        let stateful_set = self
            .stateful_sets
            .get(namespace, &context.name)
            .filter(|set| is_ours(set, &context.name));
        let database = stateful_set.map_or_else(Database::default, |set| Database {
            exists: true,
            stopped: set.spec.as_ref().and_then(|s| s.replicas) == Some(0),
            terminating: set.metadata.deletion_timestamp.is_some(),
            ready: set
                .status
                .as_ref()
                .and_then(|s| s.ready_replicas)
                .unwrap_or(0)
                > 0,
            pods: 0,
        });
        Observed {
            current_version: status.current_version.clone(),
            upgrade: status.upgrade.clone(),
            backups_since: status
                .backup
                .last_schedule_time
                .as_ref()
                .or(db.metadata.creation_timestamp.as_ref())
                .map_or(now, |t| t.0),
            handled_request: status.backup.last_handled_request.clone(),
            snapshot_done: status
                .final_snapshot
                .as_ref()
                .is_some_and(|s| s.completion_time.is_some()),
            database: Database {
                pods: pods("database"),
                ..database
            },
            first_job: with_role(first_kind).next(),
            upgrade_jobs: with_role(JobKind::Upgrade).collect(),
            upgrade_pods: pods(JobKind::Upgrade.label()),
            // Backups are the ones this SampleDB (this uid) controls.
            backups: controlled(&self.jobs, namespace, &context.uid)
                .iter()
                .filter(|job| role(job.as_ref()) == Some(JobKind::Backup.label()))
                .map(|job| seen(job))
                .collect(),
            final_snapshot_job: with_role(JobKind::FinalSnapshot).find(|job| job.name == snapshot),
            data_claim: cached(
                &self.claims,
                &children::data_claim(&context.name),
                namespace,
            )
            .is_some_and(|claim| is_ours(claim.as_ref(), &context.name)),
            now,
        }
    }

    /// The children every live pass sets: the generated credentials (once), the connection
    /// ConfigMap, the claims, the Service, and the StatefulSet at the plan's version and replicas.
    async fn apply_children(&self, context: &Context<'_>, plan: &Plan) -> Result<(), Error> {
        let db = context.object;
        let client = &context.shared.client;
        self.ensure_credentials(context).await?;
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
        if let Some((version, replicas)) = &plan.database {
            let helper_image = if db.spec.backup.archive_wal {
                let rules = children::access_rules(db, &context.owner);
                self.config_maps.apply(client, &context.uid, &rules).await?;
                self.backup_bucket_ready(context).await?
            } else {
                None
            };
            let desired = children::stateful_set(
                db,
                &context.owner,
                version,
                *replicas,
                helper_image.as_deref(),
            );
            self.stateful_sets
                .apply(client, &context.uid, &desired)
                .await?;
        }
        Ok(())
    }

    /// Takes the plan's step.
    async fn take(&self, context: &Context<'_>, plan: &Plan, step: &Step) -> Result<(), Error> {
        let db = context.object;
        let owner = &context.owner;
        let current = plan.current_version.as_deref().unwrap_or_default();
        match step {
            Step::CreateFirstJob => {
                self.restore_source(context)?;
                let restore = db.spec.restore.as_ref();
                let (restore_bucket, field) =
                    match restore.and_then(|restore| restore.point_in_time.as_ref()) {
                        Some(recovery) => (Some(&recovery.s3), "spec.restore.pointInTime.s3"),
                        None => (restore.and_then(|r| r.s3.as_ref()), "spec.restore.s3"),
                    };
                let helper_image = self
                    .bucket_ready(context, restore_bucket, field, "a restore from a bucket")
                    .await?;
                let desired = children::first_job(db, owner, helper_image.as_deref());
                self.ensure_job(context, desired).await
            }
            Step::CreateUpgradeJob { from, to } => {
                let desired = children::upgrade_job(db, owner, from, to);
                self.ensure_job(context, desired).await
            }
            Step::StartBackup { tick, .. } => {
                let helper_image = self.backup_bucket_ready(context).await?;
                let desired =
                    children::backup_job(db, owner, current, *tick, None, helper_image.as_deref());
                self.ensure_job(context, desired).await
            }
            Step::BackUpNow { at, request } => {
                let helper_image = self.backup_bucket_ready(context).await?;
                let desired = children::backup_job(
                    db,
                    owner,
                    current,
                    *at,
                    Some(request),
                    helper_image.as_deref(),
                );
                self.ensure_job(context, desired).await
            }
            Step::CreateFinalSnapshotJob { version } => {
                let desired = children::final_snapshot_job(db, &context.uid, version);
                self.ensure_job(context, desired).await
            }
            Step::DeleteUpgradeJob { job } => self.delete_job(context, job).await,
            Step::TrimBackups { jobs } => {
                for job in jobs {
                    self.delete_job(context, job).await?;
                }
                Ok(())
            }
            Step::StopDatabase => self.stop_database(context).await,
            Step::DeleteData {
                stateful_set,
                jobs,
                data_claim,
            } => {
                self.delete_data(context, *stateful_set, jobs, *data_claim)
                    .await
            }
        }
    }

    /// With `s3` set, what a transfer to or from it needs (the operator's image, returned; the
    /// Secret): checked before the Job is created, which would otherwise wait for its volume.
    async fn bucket_ready(
        &self,
        context: &Context<'_>,
        s3: Option<&S3Source>,
        field: &str,
        transfer: &str,
    ) -> Result<Option<String>, Error> {
        let Some(s3) = s3 else {
            return Ok(None);
        };
        let client = &context.shared.client;
        let helper_image = self.helper_image.as_deref();
        bucket::ready(
            client,
            &context.namespace,
            helper_image,
            s3,
            field,
            transfer,
        )
        .await
        .map(Some)
    }

    async fn backup_bucket_ready(&self, context: &Context<'_>) -> Result<Option<String>, Error> {
        let s3 = context.object.spec.backup.s3.as_ref();
        self.bucket_ready(context, s3, "spec.backup.s3", "a backup to a bucket")
            .await
    }

    /// A clone's source must have a backups volume here: else its restore Job would wait for a
    /// claim that never comes until its deadline.
    fn restore_source(&self, context: &Context<'_>) -> Result<(), Error> {
        let restore = context.object.spec.restore.as_ref();
        let Some(source) = restore.and_then(|r| r.source.as_deref()) else {
            return Ok(());
        };
        let claim = children::backups_claim(source);
        match cached(&self.claims, &claim, &context.namespace) {
            Some(_) => Ok(()),
            None => Err(Error::Waiting {
                reason: "RestoreSourceNotFound",
                message: format!(
                    "spec.restore.source: SampleDB {source} has no backups volume (PersistentVolumeClaim {claim}) in namespace {}",
                    context.namespace
                ),
            }),
        }
    }

    /// The generated credentials are created once and then recorded in the status; a user's
    /// Secret (`spec.credentials.secretName`) is only referenced. A Secret of the generated
    /// name that this SampleDB does not control is someone else's: it is never used (its
    /// password would be the other owner's choice) nor overwritten.
    async fn ensure_credentials(&self, context: &Context<'_>) -> Result<(), Error> {
        let db = context.object;
        let secret = children::credentials_secret(db);
        let recorded = db
            .status
            .as_ref()
            .and_then(|s| s.credentials_secret.as_deref());
        if db.spec.credentials.secret_name.is_none() && recorded != Some(secret.as_str()) {
            let password = random_password()?;
            let desired = children::generated_credentials(db, &context.owner, &password);
            let api: Api<Secret> =
                Api::namespaced(context.shared.client.clone(), &context.namespace);
            // One made by an earlier pass whose status write was lost is never overwritten.
            create_child(&api, &desired).await?;
            let made = api.get(&secret).await.map_err(|source| Error::Get {
                kind: "Secret".into(),
                name: secret.clone(),
                source,
            })?;
            let ours = made
                .owner_references()
                .iter()
                .any(|owner| owner.controller == Some(true) && owner.uid == context.uid);
            if !ours {
                return Err(Error::Conflict {
                    kind: "Secret".into(),
                    name: secret,
                });
            }
        }
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
        let conflict = || Error::Conflict {
            kind: "PersistentVolumeClaim".into(),
            name: name.clone(),
        };
        if let Some(current) = &current {
            if !is_ours(current.as_ref(), &context.name) {
                return Err(conflict());
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
            })? && !is_ours(&existing, &context.name)
            {
                return Err(conflict());
            }
        }
        api.patch(&name, &apply_params().force(), &Patch::Apply(&desired))
            .await
            .map_err(|source| Error::Apply {
                kind: "PersistentVolumeClaim".into(),
                name: name.clone(),
                source,
            })?;
        Ok(())
    }

    /// Counts each backup that finished since the status recorded one (once, even when a pass
    /// reads a status older than its own last write) and exports the last success.
    fn record_backups(
        &self,
        context: &Context<'_>,
        previous: &SampleDBStatus,
        status: &SampleDBStatus,
        observed: &Observed,
    ) {
        let backups = &self.metrics.sampledb_backups;
        for finished in status::newly_finished(&previous.backup, &observed.backups) {
            let (outcome, label) = if finished.succeeded {
                (Outcome::Succeeded, "succeeded")
            } else {
                (Outcome::Failed, "failed")
            };
            if context.remember(|announced| announced.first(outcome, Some(&Time(finished.at)))) {
                backups.finished(&context.namespace, &context.name, label);
            }
        }
        if let Some(last) = &status.backup.last_successful_time {
            backups.set_last_success(&context.namespace, &context.name, last.0.as_second());
        }
    }

    /// The Job `desired` names, cached or created (see [`ensure_job`]).
    async fn ensure_job(&self, context: &Context<'_>, desired: Job) -> Result<(), Error> {
        ensure_job(&self.jobs, &jobs(context), desired, |job| {
            is_ours(job, &context.name)
        })
        .await
        .map(drop)
    }

    async fn delete_job(&self, context: &Context<'_>, name: &str) -> Result<(), Error> {
        let uid = cached(&self.jobs, name, &context.namespace).and_then(|job| job.uid());
        delete_child(&jobs(context), name, uid.as_deref()).await
    }

    /// Scales the database to 0 (its Pods going away is observed by the next pass).
    async fn stop_database(&self, context: &Context<'_>) -> Result<(), Error> {
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
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(source) => Err(Error::Apply {
                kind: "StatefulSet".into(),
                name: context.name.clone(),
                source,
            }),
        }
    }

    /// Deletes the StatefulSet, the final snapshot Job (its Pod, finished or not, holds the data
    /// claim) and the data claim, as the plan says.
    async fn delete_data(
        &self,
        context: &Context<'_>,
        stateful_set: bool,
        jobs: &[String],
        data_claim: bool,
    ) -> Result<(), Error> {
        let client = &context.shared.client;
        let namespace = &context.namespace;
        if stateful_set && let Some(set) = self.stateful_sets.get(namespace, &context.name) {
            let api: Api<StatefulSet> = Api::namespaced(client.clone(), namespace);
            delete_child(&api, &context.name, set.uid().as_deref()).await?;
        }
        for job in jobs {
            self.delete_job(context, job).await?;
        }
        let data = children::data_claim(&context.name);
        if data_claim && let Some(claim) = cached(&self.claims, &data, namespace) {
            let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
            delete_child(&api, &data, claim.uid().as_deref()).await?;
        }
        Ok(())
    }
}

/// The objects of `store` in `namespace` that carry SampleDB `db`'s instance label.
fn ours<K>(store: &Store<K>, namespace: &str, db: &str) -> Vec<Arc<K>>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    store
        .state()
        .into_iter()
        .filter(|object| {
            object.namespace().as_deref() == Some(namespace) && is_ours(object.as_ref(), db)
        })
        .collect()
}

/// The object carries this SampleDB's instance label.
fn is_ours(object: &impl Resource, db: &str) -> bool {
    object
        .meta()
        .labels
        .as_ref()
        .and_then(|l| l.get(INSTANCE_LABEL))
        .map(String::as_str)
        == Some(db)
}

/// What a Pod or Job does (`database`, or the Job's kind).
fn role(object: &impl Resource) -> Option<&str> {
    object
        .meta()
        .labels
        .as_ref()?
        .get(ROLE_LABEL)
        .map(String::as_str)
}

/// Events for what changed: a Warning when a problem first appears (or backups were missed or
/// failed), Normal events for initialization, upgrades and backups.
fn events(
    name: &str,
    previous: &SampleDBStatus,
    status: &SampleDBStatus,
    problem: Option<&Problem>,
) -> Vec<Announcement> {
    let event = |type_, reason: &str, action, note| Announcement {
        type_,
        reason: reason.to_owned(),
        action,
        note,
    };
    let mut events = Vec::new();
    let degraded_before = previous
        .conditions
        .iter()
        .find(|c| c.type_ == app_operator_api::conditions::DEGRADED && c.status == "True")
        .map(|c| c.reason.as_str());
    if let Some(problem) = problem
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
    // A failure's note is its condition's message, which says why.
    let failure = status
        .conditions
        .iter()
        .find(|c| c.type_ == status::LAST_BACKUP_SUCCEEDED && c.status == "False")
        .map(|c| c.message.clone());
    for (before, now, type_, reason, outcome) in finished {
        if before != now
            && let Some(job) = now
        {
            let note = match (type_, &failure) {
                (EventType::Warning, Some(failure)) => failure.clone(),
                _ => format!("backup Job {job} {outcome}"),
            };
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

    use super::*;

    #[test]
    fn events_say_what_changed_once() {
        let previous = SampleDBStatus::default();
        let mut status = previous.clone();
        status.current_version = Some("16.4".into());
        status.backup.last_schedule_time = Some(Time("2026-11-23T03:00:00Z".parse().unwrap()));
        status.backup.skipped_schedules = 2;
        status.backup.last_failed_job = Some("db-backup-20261123-025500".into());
        let problem = Problem {
            reason: "InvalidSchedule",
            message: "bad".into(),
        };
        let problem = Some(&problem);
        let reasons: Vec<String> = events("db", &previous, &status, problem)
            .into_iter()
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
        let started = &events("db", &previous, &status, problem)[2];
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
        assert!(events("db", &status, &status, problem).is_empty());
    }
}
