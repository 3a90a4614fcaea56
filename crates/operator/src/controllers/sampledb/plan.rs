//! The one lifecycle step a SampleDB reconcile takes, chosen from what it observed. Pure: no I/O,
//! so every ordering rule is a table test.
//!
//! Live, first that applies wins: an upgrade that was given up (the version went back, or on to
//! another) has its Job deleted with the database stopped until that Job's Pods are gone; a
//! database not initialized waits to be Ready, then runs its init (or restore) Job; a newer
//! version waits for a running backup, stops the database, then runs the upgrade Job; an
//! initialized database starts the backup of the latest due tick, else an on-demand backup that
//! was asked for (never two at once), then trims finished backups beyond the history limits.
//!
//! Deleting, by the policy: stop the database, run the final snapshot Job (a failed or hung one
//! blocks with the way out in the message), then delete the StatefulSet, the snapshot Job and
//! (unless `Retain`) the data claim.

use app_operator_api::sampledb::{DeletionPolicy, UpgradeStatus};
use k8s_openapi::jiff::Timestamp;

use super::children::{backup_job_name, data_claim as data_claim_name, upgrade_job_name};
use crate::reconcile::jobs::{JobState, SeenJob, beyond_history};
use crate::reconcile::schedule::Schedule;

/// The backup schedule, as the spec gives it.
#[derive(Clone, Debug)]
pub enum Backups {
    /// No schedule, or suspended.
    Off,
    /// The schedule does not parse: why.
    Invalid(String),
    On(Schedule),
}

/// What the spec asks for.
#[derive(Clone, Debug)]
pub struct Desired {
    pub version: String,
    /// Starts from a backup file (a restore Job instead of the init Job).
    pub restoring: bool,
    /// The restore is a point-in-time recovery: its Job writes the data directory before the
    /// database first starts.
    pub recovering: bool,
    pub backups: Backups,
    /// The on-demand backup asked for (the `backup-requested-at` annotation's value).
    pub backup_request: Option<String>,
    pub keep_succeeded: usize,
    pub keep_failed: usize,
    pub deletion: DeletionPolicy,
}

/// The database's StatefulSet and Pods.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Database {
    /// A StatefulSet of this SampleDB exists (found by name and label).
    pub exists: bool,
    /// Its spec asks for 0 replicas.
    pub stopped: bool,
    /// It is being deleted.
    pub terminating: bool,
    /// At least one replica is Ready.
    pub ready: bool,
    /// Database Pods that still exist, terminating ones included.
    pub pods: usize,
}

/// What one reconcile saw: the status recorded so far and the children in the cache.
#[derive(Clone, Debug)]
pub struct Observed {
    /// The version the data is at (`status.currentVersion`): `None` until initialized.
    pub current_version: Option<String>,
    /// The upgrade recorded under way or failed (`status.upgrade`).
    pub upgrade: Option<UpgradeStatus>,
    /// The tick of the last backup started (`status.backup.lastScheduleTime`), else the
    /// creation time: ticks after it are due.
    pub backups_since: Timestamp,
    /// The on-demand request the latest such backup was started for
    /// (`status.backup.lastHandledRequest`).
    pub handled_request: Option<String>,
    /// The final snapshot has completed (`status.finalSnapshot.completionTime`).
    pub snapshot_done: bool,
    pub database: Database,
    /// The init or restore Job.
    pub first_job: Option<SeenJob>,
    /// Every upgrade Job (one per target version).
    pub upgrade_jobs: Vec<SeenJob>,
    /// Pods of upgrade Jobs that still exist: the data is not free until they are gone.
    pub upgrade_pods: usize,
    pub backups: Vec<SeenJob>,
    pub final_snapshot_job: Option<SeenJob>,
    /// The data claim of this SampleDB exists.
    pub data_claim: bool,
    pub now: Timestamp,
}

impl Observed {
    fn backup_running(&self) -> bool {
        self.backups
            .iter()
            .any(|job| job.state == JobState::Running)
    }

    fn upgrade_job(&self, name: &str) -> Option<&SeenJob> {
        self.upgrade_jobs.iter().find(|job| job.name == name)
    }
}

/// Something wrong with the database itself (not with a reconcile): the `Degraded` reason and
/// message, and a Warning when it first appears.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub reason: &'static str,
    pub message: String,
}

/// What the database is moving towards: the `Progressing` reason and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Progress {
    pub reason: &'static str,
    pub message: String,
}

fn progress(reason: &'static str, message: impl Into<String>) -> Option<Progress> {
    Some(Progress {
        reason,
        message: message.into(),
    })
}

/// The one action a reconcile takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Run the init Job, or the restore Job when the SampleDB starts from a backup.
    CreateFirstJob,
    /// Delete the Job of an upgrade that was given up.
    DeleteUpgradeJob { job: String },
    /// Convert the stopped database's data from `from` to `to`.
    CreateUpgradeJob { from: String, to: String },
    /// Back up the tick `tick` (`skipped` earlier ticks get none).
    StartBackup { tick: Timestamp, skipped: u64 },
    /// Back up now, for the on-demand `request`.
    BackUpNow { at: Timestamp, request: String },
    /// Delete finished backup Jobs beyond the history limits.
    TrimBackups { jobs: Vec<String> },
    /// Scale the database to 0 before its final snapshot.
    StopDatabase,
    /// Dump the stopped database into the backups volume.
    CreateFinalSnapshotJob { version: String },
    /// Delete what is left: the StatefulSet, Jobs (the final snapshot's, and the upgrades' whose
    /// Pods name the data claim), the data claim.
    DeleteData {
        stateful_set: bool,
        jobs: Vec<String>,
        data_claim: bool,
    },
}

/// The lifecycle stage the plan puts the database in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Stage {
    #[default]
    Live,
    /// The init or restore Job failed: no backups until it is retried.
    InitFailed,
    /// Stopped for an upgrade.
    Upgrading,
    /// Being deleted: a step is under way, or one is awaited.
    Deleting,
    /// The final snapshot failed: a person must act (the problem says how).
    DeletionBlocked,
    /// Nothing is left: the finalizer can go.
    Deleted,
}

/// The decision: the database to run, at most one step, and what the status should say.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// The StatefulSet's version and replicas; `None` while deleting (it is only stopped or
    /// deleted then).
    pub database: Option<(String, i32)>,
    pub step: Option<Step>,
    pub stage: Stage,
    /// The version the data is at, with a Job that succeeded since the status was written.
    pub current_version: Option<String>,
    /// The upgrade under way, failed, or being given up, as `status.upgrade` records it.
    pub upgrade: Option<UpgradeStatus>,
    pub progress: Option<Progress>,
    pub problem: Option<Problem>,
    /// The next backup tick, to wake up for it.
    pub next_backup: Option<Timestamp>,
}

/// `a` is a newer PostgreSQL version than `b` (numeric, component by component).
pub fn is_newer(a: &str, b: &str) -> bool {
    let parse = |v: &str| -> Vec<u64> { v.split('.').map(|p| p.parse().unwrap_or(0)).collect() };
    parse(a) > parse(b)
}

/// The next step of a live SampleDB named `name`.
pub fn plan(name: &str, desired: &Desired, observed: &Observed) -> Plan {
    let wanted = &desired.version;
    let mut plan = Plan {
        current_version: current_version(name, desired, observed),
        ..Plan::default()
    };
    let Some(current) = plan.current_version.clone() else {
        plan.database = Some((wanted.clone(), if desired.recovering { 0 } else { 1 }));
        initialize(desired, observed, &mut plan);
        return plan;
    };

    // 1. An upgrade given up: its Job goes, and the data stays untouched until its Pods are gone.
    if let Some(given_up) = &observed.upgrade
        && given_up.to != *wanted
        && given_up.to != current
    {
        let to = &given_up.to;
        let job = upgrade_job_name(name, to);
        if observed.upgrade_job(&job).is_some() || observed.upgrade_pods > 0 {
            // Recorded until it is gone, so the next pass still knows to wait.
            plan.upgrade = Some(given_up.clone());
            plan.database = Some((current.clone(), 0));
            plan.progress = progress(
                "CancellingUpgrade",
                format!("waiting for upgrade Job {job} to {to} to be gone"),
            );
            plan.step = observed
                .upgrade_job(&job)
                .is_some()
                .then_some(Step::DeleteUpgradeJob { job });
            return plan;
        }
    }

    // 2. A newer version: the upgrade, with the database stopped.
    if *wanted != current && is_newer(wanted, &current) {
        upgrade(name, &current, wanted, observed, &mut plan);
        return plan;
    }
    plan.database = Some((current, 1));

    // 3. Backups of an initialized database, then the history.
    schedule_backup(name, desired, observed, &mut plan);
    if plan.step.is_none() {
        plan.step = requested_backup(desired, observed);
    }
    if plan.step.is_none() {
        let jobs = beyond_history(
            &observed.backups,
            desired.keep_succeeded,
            desired.keep_failed,
        );
        if !jobs.is_empty() {
            plan.step = Some(Step::TrimBackups { jobs });
        }
    }
    plan
}

/// The recorded version, or the one a Job that succeeded since has brought the data to.
fn current_version(name: &str, desired: &Desired, observed: &Observed) -> Option<String> {
    let succeeded =
        |job: Option<&SeenJob>| job.is_some_and(|job| matches!(job.state, JobState::Succeeded(_)));
    match &observed.current_version {
        None => succeeded(observed.first_job.as_ref()).then(|| desired.version.clone()),
        Some(current) => {
            let upgraded = is_newer(&desired.version, current)
                && succeeded(observed.upgrade_job(&upgrade_job_name(name, &desired.version)));
            Some(if upgraded {
                desired.version.clone()
            } else {
                current.clone()
            })
        }
    }
}

/// Not initialized: the init (or restore) Job once the database is Ready.
fn initialize(desired: &Desired, observed: &Observed, plan: &mut Plan) {
    let what = if desired.restoring { "restore" } else { "init" };
    match observed
        .first_job
        .as_ref()
        .map(|job| (&job.name, &job.state, &job.retrying_after))
    {
        None if desired.recovering && observed.database.pods > 0 => {
            plan.progress = progress(
                "WaitingForDatabase",
                "waiting for the database Pod to be gone before the point-in-time recovery writes its data",
            );
        }
        None if !desired.recovering && !observed.database.ready => {
            plan.progress = progress(
                "WaitingForDatabase",
                "waiting for the database Pod to be Ready",
            );
        }
        None => {
            plan.step = Some(Step::CreateFirstJob);
            plan.progress = progress(
                "Initializing",
                format!("the {what} Job is initializing the database"),
            );
        }
        Some((name, JobState::Running, retrying_after)) => {
            let retry = retrying_after.as_ref().map_or_else(String::new, |said| {
                format!("; a Pod of it failed, and a new one tries again: {said}")
            });
            plan.progress = progress(
                "Initializing",
                format!("Job {name} is initializing the database{retry}"),
            );
        }
        Some((name, JobState::Failed { message, .. }, _)) => {
            plan.stage = Stage::InitFailed;
            plan.problem = Some(Problem {
                reason: if desired.restoring {
                    "RestoreJobFailed"
                } else {
                    "InitJobFailed"
                },
                message: format!(
                    "{what} Job {name} failed ({message}); no backups run until it succeeds. Fix the cause and delete the Job to run it again"
                ),
            });
        }
        // Recorded as the current version by `current_version`.
        Some((_, JobState::Succeeded(_), _)) => {}
    }
}

/// From `current` to the newer `wanted`: wait for a running backup, stop the database, run the
/// upgrade Job. A failed one runs `current` again and is not retried until the version changes
/// or the Job is deleted.
fn upgrade(name: &str, current: &str, wanted: &str, observed: &Observed, plan: &mut Plan) {
    let job_name = upgrade_job_name(name, wanted);
    let job = observed.upgrade_job(&job_name);
    let record = |job: Option<String>| {
        Some(UpgradeStatus {
            from: current.to_owned(),
            to: wanted.to_owned(),
            job,
        })
    };
    plan.upgrade = record(job.map(|job| job.name.clone()));
    plan.stage = Stage::Upgrading;
    plan.database = Some((current.to_owned(), 0));
    match job.map(|job| &job.state) {
        Some(JobState::Failed { message, .. }) => {
            plan.stage = Stage::Live;
            plan.database = Some((current.to_owned(), 1));
            plan.problem = Some(Problem {
                reason: "UpgradeFailed",
                message: format!(
                    "upgrade Job {job_name} from {current} to {wanted} failed ({message}); the database runs {current} again. Set spec.version back to {current}, or delete the Job to retry"
                ),
            });
        }
        Some(_) => {
            plan.progress = progress(
                "Upgrading",
                format!("upgrade Job {job_name} is converting the data to {wanted}"),
            );
        }
        None if observed.backup_running() => {
            plan.database = Some((current.to_owned(), 1));
            plan.progress = progress(
                "WaitingForBackup",
                "the upgrade starts when the running backup ends",
            );
        }
        None if observed.database.pods > 0 => {
            plan.progress = progress(
                "StoppingDatabase",
                format!("stopping the database to upgrade it from {current} to {wanted}"),
            );
        }
        None => {
            plan.upgrade = record(Some(job_name.clone()));
            plan.step = Some(Step::CreateUpgradeJob {
                from: current.to_owned(),
                to: wanted.to_owned(),
            });
            plan.progress = progress(
                "Upgrading",
                format!("upgrade Job {job_name} is converting the data to {wanted}"),
            );
        }
    }
}

/// Starts the backup of the latest due tick, unless one is running; the next tick to wake for.
fn schedule_backup(name: &str, desired: &Desired, observed: &Observed, plan: &mut Plan) {
    let schedule = match &desired.backups {
        Backups::Off => return,
        Backups::Invalid(message) => {
            plan.problem = Some(Problem {
                reason: "InvalidSchedule",
                message: format!("spec.backup.schedule: {message}; no backups run"),
            });
            return;
        }
        Backups::On(schedule) => schedule,
    };
    let now = observed.now;
    match schedule.due(observed.backups_since, now) {
        Some(due) if !observed.backup_running() => {
            plan.next_backup = schedule.next_after(due.tick.max(now));
            plan.step = Some(Step::StartBackup {
                tick: due.tick,
                skipped: due.skipped,
            });
        }
        // Not due yet, or due while a backup runs: its end (a Job event) wakes us up.
        _ => plan.next_backup = schedule.next_after(now),
    }
    // The Job of a tick already started is never made twice (its name is the tick).
    if let Some(Step::StartBackup { tick, .. }) = &plan.step
        && observed
            .backups
            .iter()
            .any(|job| job.name == backup_job_name(name, *tick))
    {
        plan.step = None;
    }
}

/// An on-demand backup asked for and not started yet, once no other backup runs.
fn requested_backup(desired: &Desired, observed: &Observed) -> Option<Step> {
    let request = desired.backup_request.as_ref()?;
    (observed.handled_request.as_ref() != Some(request) && !observed.backup_running()).then(|| {
        Step::BackUpNow {
            at: observed.now,
            request: request.clone(),
        }
    })
}

/// The next step of a SampleDB being deleted.
pub fn clean_up(name: &str, namespace: &str, desired: &Desired, observed: &Observed) -> Plan {
    let mut plan = Plan {
        current_version: observed.current_version.clone(),
        stage: Stage::Deleting,
        ..Plan::default()
    };
    // A database that never initialized has nothing to snapshot.
    let wanted = desired.deletion == DeletionPolicy::Snapshot && observed.current_version.is_some();
    if wanted && !observed.snapshot_done && !snapshot(name, namespace, observed, &mut plan) {
        return plan;
    }
    // The snapshot Job goes only once the status records its completion (without the Job, a
    // status read before that write would take another snapshot), or once none is wanted.
    let snapshot_job = observed
        .final_snapshot_job
        .as_ref()
        .filter(|_| observed.snapshot_done || !wanted);
    let data_claim = desired.deletion != DeletionPolicy::Retain && observed.data_claim;
    // A finished upgrade's Pod still names the data claim, and Kubernetes keeps a claim while any
    // Pod names it (pvc-protection counts Succeeded Pods): those Jobs go before the claim can.
    let upgrade_jobs: &[SeenJob] = if data_claim {
        &observed.upgrade_jobs
    } else {
        &[]
    };
    let jobs: Vec<String> = snapshot_job
        .into_iter()
        .chain(upgrade_jobs)
        .map(|job| job.name.clone())
        .collect();
    let stateful_set = observed.database.exists;
    let mut left = Vec::new();
    if stateful_set {
        left.push(format!("StatefulSet {name}"));
    }
    let waited_jobs = observed.final_snapshot_job.iter().chain(upgrade_jobs);
    left.extend(waited_jobs.map(|job| format!("Job {}", job.name)));
    if data_claim && observed.upgrade_pods > 0 {
        left.push(format!("{} upgrade Pod(s)", observed.upgrade_pods));
    }
    if data_claim {
        left.push(format!("PersistentVolumeClaim {}", data_claim_name(name)));
    }
    if left.is_empty() {
        plan.stage = Stage::Deleted;
        return plan;
    }
    if stateful_set || !jobs.is_empty() || data_claim {
        plan.step = Some(Step::DeleteData {
            stateful_set,
            jobs,
            data_claim,
        });
    }
    plan.progress = progress(
        "DeletingData",
        format!("waiting for {} to be gone", left.join(" and ")),
    );
    plan
}

/// The snapshot before deletion: true once it succeeded; otherwise the plan says what it waits
/// for, or why it is blocked.
fn snapshot(name: &str, namespace: &str, observed: &Observed, plan: &mut Plan) -> bool {
    let database = &observed.database;
    if database.exists && !database.stopped && !database.terminating {
        plan.step = Some(Step::StopDatabase);
    }
    if plan.step.is_some() || database.pods > 0 {
        plan.progress = progress(
            "StoppingDatabase",
            "stopping the database for its final snapshot",
        );
        return false;
    }
    let job = observed.final_snapshot_job.as_ref();
    match job.map(|job| (&job.name, &job.state)) {
        None => {
            plan.step = Some(Step::CreateFinalSnapshotJob {
                version: observed.current_version.clone().unwrap_or_default(),
            });
            plan.progress = progress(
                "Snapshotting",
                "the final snapshot Job is dumping the stopped database",
            );
            false
        }
        Some((job, JobState::Running)) => {
            plan.progress = progress(
                "Snapshotting",
                format!("final snapshot Job {job} is dumping the stopped database"),
            );
            false
        }
        Some((
            job,
            JobState::Failed {
                reason, message, ..
            },
        )) => {
            let (reason, what) = if reason == "DeadlineExceeded" {
                (
                    "SnapshotTimedOut",
                    "did not finish within spec.deletion.snapshotTimeoutSeconds",
                )
            } else {
                ("SnapshotFailed", "failed")
            };
            plan.stage = Stage::DeletionBlocked;
            plan.problem = Some(Problem {
                reason,
                message: format!(
                    "the final snapshot Job {job} {what} ({message}); the SampleDB and its data are kept. To delete it without a snapshot: kubectl patch sampledb {name} -n {namespace} --type merge -p '{{\"spec\":{{\"deletion\":{{\"policy\":\"Delete\"}}}}}}'"
                ),
            });
            false
        }
        Some((_, JobState::Succeeded(_))) => true,
    }
}

/// A new SampleDB's observation at the Unix epoch: nothing recorded, nothing made.
#[cfg(test)]
pub fn observed() -> Observed {
    Observed {
        current_version: None,
        upgrade: None,
        backups_since: Timestamp::UNIX_EPOCH,
        handled_request: None,
        snapshot_done: false,
        database: Database::default(),
        first_job: None,
        upgrade_jobs: Vec::new(),
        upgrade_pods: 0,
        backups: Vec::new(),
        final_snapshot_job: None,
        data_claim: false,
        now: Timestamp::UNIX_EPOCH,
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    const MINUTE: i64 = 60;

    fn desired() -> Desired {
        Desired {
            version: "15".into(),
            restoring: false,
            recovering: false,
            backups: Backups::Off,
            backup_request: None,
            keep_succeeded: 3,
            keep_failed: 1,
            deletion: DeletionPolicy::Snapshot,
        }
    }

    fn job(name: &str, state: JobState) -> SeenJob {
        SeenJob::new(name, state)
    }

    fn at(seconds: i64) -> Option<Time> {
        Some(Time(Timestamp::from_second(seconds).unwrap()))
    }

    fn failed(reason: &str) -> JobState {
        JobState::Failed {
            at: at(1),
            reason: reason.into(),
            message: "exit 1".into(),
        }
    }

    /// An initialized database at 15, running and Ready, an hour after its last backup tick.
    fn serving() -> Observed {
        let mut seen = observed();
        seen.current_version = Some("15".into());
        seen.database = Database {
            exists: true,
            ready: true,
            pods: 1,
            ..Database::default()
        };
        seen.data_claim = true;
        seen.now = Timestamp::from_second(60 * MINUTE).unwrap();
        seen
    }

    fn upgrading(job_state: Option<JobState>) -> (Desired, Observed) {
        let mut seen = serving();
        seen.upgrade = Some(UpgradeStatus {
            from: "15".into(),
            to: "17".into(),
            job: job_state.as_ref().map(|_| "db-upgrade-17".into()),
        });
        seen.upgrade_jobs = job_state
            .into_iter()
            .map(|s| job("db-upgrade-17", s))
            .collect();
        (
            Desired {
                version: "17".into(),
                ..desired()
            },
            seen,
        )
    }

    fn hourly() -> Backups {
        Backups::On(Schedule::parse("0 * * * *").unwrap())
    }

    struct Row {
        case: &'static str,
        desired: Desired,
        observed: Observed,
        step: Option<Step>,
        /// The `Progressing` reason, else the `Degraded` reason, else "".
        says: &'static str,
        stage: Stage,
        /// The StatefulSet's (version, replicas).
        database: Option<(&'static str, i32)>,
        current: Option<&'static str>,
    }

    fn check(rows: Vec<Row>, decide: impl Fn(&Desired, &Observed) -> Plan) {
        for row in rows {
            let plan = decide(&row.desired, &row.observed);
            let says = plan
                .progress
                .as_ref()
                .map(|p| p.reason)
                .or(plan.problem.as_ref().map(|p| p.reason))
                .unwrap_or("");
            let database = plan.database.as_ref().map(|(v, r)| (v.as_str(), *r));
            assert_eq!(plan.step, row.step, "{}: step", row.case);
            assert_eq!(says, row.says, "{}: reason", row.case);
            assert_eq!(plan.stage, row.stage, "{}: stage", row.case);
            assert_eq!(database, row.database, "{}: database", row.case);
            assert_eq!(
                plan.current_version.as_deref(),
                row.current,
                "{}: current version",
                row.case
            );
        }
    }

    #[test]
    fn an_init_job_trying_again_says_why_its_last_pod_failed() {
        let said = "init.sh: PostgreSQL at db:5432 did not accept connections within 60 s";
        let mut seen = observed();
        seen.database.ready = true;
        seen.first_job = Some(SeenJob {
            retrying_after: Some(said.into()),
            ..job("db-init", JobState::Running)
        });
        let plan = plan("db", &desired(), &seen);
        assert_eq!(plan.step, None, "the Job's own next Pod tries again");
        assert_eq!(plan.problem, None, "not failed until the Job fails");
        let progress = plan.progress.expect("progress");
        assert_eq!(progress.reason, "Initializing");
        assert!(progress.message.ends_with(said), "{}", progress.message);
    }

    #[test]
    fn creation_waits_for_the_database_then_runs_one_init_or_restore_job() {
        let ready = {
            let mut seen = observed();
            seen.database.ready = true;
            seen
        };
        let with_first = |state: JobState| {
            let mut seen = ready.clone();
            seen.first_job = Some(job("db-init", state));
            seen
        };
        let restoring = Desired {
            restoring: true,
            ..desired()
        };
        let row = |case, desired, observed, step, says, stage, current| Row {
            case,
            desired,
            observed,
            step,
            says,
            stage,
            database: Some(("15", 1)),
            current,
        };
        check(
            vec![
                row(
                    "new",
                    desired(),
                    observed(),
                    None,
                    "WaitingForDatabase",
                    Stage::Live,
                    None,
                ),
                row(
                    "ready",
                    desired(),
                    ready.clone(),
                    Some(Step::CreateFirstJob),
                    "Initializing",
                    Stage::Live,
                    None,
                ),
                row(
                    "init running",
                    desired(),
                    with_first(JobState::Running),
                    None,
                    "Initializing",
                    Stage::Live,
                    None,
                ),
                row(
                    "init failed",
                    desired(),
                    with_first(failed("BackoffLimitExceeded")),
                    None,
                    "InitJobFailed",
                    Stage::InitFailed,
                    None,
                ),
                row(
                    "restore failed",
                    restoring.clone(),
                    with_first(failed("BackoffLimitExceeded")),
                    None,
                    "RestoreJobFailed",
                    Stage::InitFailed,
                    None,
                ),
                row(
                    "restore ready",
                    restoring,
                    ready.clone(),
                    Some(Step::CreateFirstJob),
                    "Initializing",
                    Stage::Live,
                    None,
                ),
                row(
                    "init succeeded",
                    desired(),
                    with_first(JobState::Succeeded(at(5))),
                    None,
                    "",
                    Stage::Live,
                    Some("15"),
                ),
            ],
            |d, o| plan("db", d, o),
        );
        // A point-in-time recovery writes the data before the server first runs.
        let recovering = Desired {
            restoring: true,
            recovering: true,
            ..desired()
        };
        let pod_left = {
            let mut seen = observed();
            seen.database.pods = 1;
            seen
        };
        let recovery = |case, observed, step, says, replicas, current| Row {
            case,
            desired: recovering.clone(),
            observed,
            step,
            says,
            stage: Stage::Live,
            database: Some(("15", replicas)),
            current,
        };
        check(
            vec![
                recovery(
                    "recovery: new",
                    observed(),
                    Some(Step::CreateFirstJob),
                    "Initializing",
                    0,
                    None,
                ),
                recovery(
                    "recovery: a database Pod is left",
                    pod_left,
                    None,
                    "WaitingForDatabase",
                    0,
                    None,
                ),
                recovery(
                    "recovery: running",
                    with_first(JobState::Running),
                    None,
                    "Initializing",
                    0,
                    None,
                ),
                recovery(
                    "recovery: succeeded",
                    with_first(JobState::Succeeded(at(5))),
                    None,
                    "",
                    1,
                    Some("15"),
                ),
            ],
            |d, o| plan("db", d, o),
        );
    }

    #[test]
    fn an_upgrade_waits_for_backups_stops_the_database_then_runs_its_job() {
        let (newer, stopped) = {
            let (d, mut o) = upgrading(None);
            o.database.pods = 0;
            (d, o)
        };
        let backing_up = {
            let mut o = upgrading(None).1;
            o.backups = vec![job("db-backup-1", JobState::Running)];
            o
        };
        let row = |case, observed: (Desired, Observed), step, says, stage, database, current| Row {
            case,
            desired: observed.0,
            observed: observed.1,
            step,
            says,
            stage,
            database,
            current,
        };
        let create = Step::CreateUpgradeJob {
            from: "15".into(),
            to: "17".into(),
        };
        check(
            vec![
                row(
                    "backup running",
                    (newer.clone(), backing_up),
                    None,
                    "WaitingForBackup",
                    Stage::Upgrading,
                    Some(("15", 1)),
                    Some("15"),
                ),
                row(
                    "database running",
                    upgrading(None),
                    None,
                    "StoppingDatabase",
                    Stage::Upgrading,
                    Some(("15", 0)),
                    Some("15"),
                ),
                row(
                    "database stopped",
                    (newer.clone(), stopped),
                    Some(create),
                    "Upgrading",
                    Stage::Upgrading,
                    Some(("15", 0)),
                    Some("15"),
                ),
                row(
                    "job running",
                    upgrading(Some(JobState::Running)),
                    None,
                    "Upgrading",
                    Stage::Upgrading,
                    Some(("15", 0)),
                    Some("15"),
                ),
                row(
                    "job failed",
                    upgrading(Some(failed("BackoffLimitExceeded"))),
                    None,
                    "UpgradeFailed",
                    Stage::Live,
                    Some(("15", 1)),
                    Some("15"),
                ),
                row(
                    "job succeeded",
                    upgrading(Some(JobState::Succeeded(at(9)))),
                    None,
                    "",
                    Stage::Live,
                    Some(("17", 1)),
                    Some("17"),
                ),
            ],
            |d, o| plan("db", d, o),
        );
        // The record follows: the Job's name once it is created, none once the upgrade is done.
        let (d, o) = upgrading(None);
        assert_eq!(plan("db", &d, &o).upgrade.unwrap().job, None);
        let (d, o) = upgrading(Some(JobState::Succeeded(at(9))));
        assert_eq!(plan("db", &d, &o).upgrade, None);
    }

    #[test]
    fn a_given_up_upgrade_keeps_the_database_stopped_until_its_job_and_pods_are_gone() {
        let back = |jobs: bool, pods: usize| {
            let (_, mut o) = upgrading(jobs.then_some(failed("BackoffLimitExceeded")));
            o.upgrade_pods = pods;
            o
        };
        let row = |case, observed, step, says, database| Row {
            case,
            desired: desired(),
            observed,
            step,
            says,
            stage: Stage::Live,
            database,
            current: Some("15"),
        };
        let delete = Step::DeleteUpgradeJob {
            job: "db-upgrade-17".into(),
        };
        check(
            vec![
                row(
                    "job left",
                    back(true, 1),
                    Some(delete),
                    "CancellingUpgrade",
                    Some(("15", 0)),
                ),
                row(
                    "pods left",
                    back(false, 1),
                    None,
                    "CancellingUpgrade",
                    Some(("15", 0)),
                ),
                row("all gone", back(false, 0), None, "", Some(("15", 1))),
            ],
            |d, o| plan("db", d, o),
        );
        assert_eq!(plan("db", &desired(), &back(false, 0)).upgrade, None);
        assert!(plan("db", &desired(), &back(false, 1)).upgrade.is_some());
    }

    #[test]
    fn backups_start_on_the_latest_due_tick_one_at_a_time_then_history_is_trimmed() {
        let on = Desired {
            backups: hourly(),
            ..desired()
        };
        let mut due = serving();
        due.backups_since = Timestamp::from_second(-120 * MINUTE).unwrap();
        let mut running = due.clone();
        running.backups = vec![job("db-backup-x", JobState::Running)];
        let mut started = due.clone();
        started.backups = vec![job("db-backup-19700101-010000", JobState::Running)];
        let mut not_due = serving();
        not_due.backups_since = Timestamp::from_second(60 * MINUTE).unwrap();
        let mut full = not_due.clone();
        full.backups = (1..=5)
            .map(|i| job(&format!("ok-{i}"), JobState::Succeeded(at(i))))
            .chain((1..=2).map(|i| job(&format!("bad-{i}"), failed("DeadlineExceeded"))))
            .collect();
        if let Some(JobState::Failed { at: when, .. }) =
            full.backups.last_mut().map(|j| &mut j.state)
        {
            *when = at(7);
        }
        let row = |case, desired, observed, step, says| Row {
            case,
            desired,
            observed,
            step,
            says,
            stage: Stage::Live,
            database: Some(("15", 1)),
            current: Some("15"),
        };
        let tick = Timestamp::from_second(60 * MINUTE).unwrap();
        check(
            vec![
                row(
                    "due",
                    on.clone(),
                    due.clone(),
                    Some(Step::StartBackup { tick, skipped: 2 }),
                    "",
                ),
                row("due while one runs", on.clone(), running, None, ""),
                row("tick already started", on.clone(), started, None, ""),
                row("not due", on.clone(), not_due.clone(), None, ""),
                row("off", desired(), due.clone(), None, ""),
                row(
                    "invalid schedule",
                    Desired {
                        backups: Backups::Invalid("bad".into()),
                        ..desired()
                    },
                    due,
                    None,
                    "InvalidSchedule",
                ),
                row(
                    "beyond the limits",
                    on.clone(),
                    full.clone(),
                    Some(Step::TrimBackups {
                        jobs: vec!["ok-2".into(), "ok-1".into(), "bad-1".into()],
                    }),
                    "",
                ),
            ],
            |d, o| plan("db", d, o),
        );
        let next = plan("db", &on, &not_due).next_backup;
        assert_eq!(next, Timestamp::from_second(120 * MINUTE).ok());
    }

    #[test]
    fn an_on_demand_backup_starts_once_per_request_after_a_running_one_and_due_ticks() {
        let asked = |request: &str| Desired {
            backup_request: Some(request.into()),
            ..desired()
        };
        let now = serving().now;
        let back_up_now = |request: &str| {
            Some(Step::BackUpNow {
                at: now,
                request: request.into(),
            })
        };
        let mut handled = serving();
        handled.handled_request = Some("t1".into());
        let mut running = serving();
        running.backups = vec![job("db-backup-x", JobState::Running)];
        let mut tick_due = serving();
        tick_due.backups_since = Timestamp::from_second(-120 * MINUTE).unwrap();
        let mut not_initialized = observed();
        not_initialized.database.ready = true;
        let row = |case, desired, observed, step| Row {
            case,
            desired,
            observed,
            step,
            says: "",
            stage: Stage::Live,
            database: Some(("15", 1)),
            current: Some("15"),
        };
        check(
            vec![
                row("asked", asked("t1"), serving(), back_up_now("t1")),
                row(
                    "asked again",
                    asked("t2"),
                    handled.clone(),
                    back_up_now("t2"),
                ),
                row("already handled", asked("t1"), handled, None),
                row("not asked", desired(), serving(), None),
                row("while a backup runs", asked("t1"), running, None),
                row(
                    "suspended schedule",
                    Desired {
                        backup_request: Some("t1".into()),
                        backups: Backups::Off,
                        ..desired()
                    },
                    serving(),
                    back_up_now("t1"),
                ),
                row(
                    "a tick is due first",
                    Desired {
                        backups: hourly(),
                        ..asked("t1")
                    },
                    tick_due,
                    Some(Step::StartBackup {
                        tick: Timestamp::from_second(60 * MINUTE).unwrap(),
                        skipped: 2,
                    }),
                ),
            ],
            |d, o| plan("db", d, o),
        );
        // Before the database is initialized, the init Job comes first.
        let first = plan("db", &asked("t1"), &not_initialized);
        assert_eq!(first.step, Some(Step::CreateFirstJob));
    }

    #[test]
    fn deletion_stops_the_database_snapshots_it_then_removes_the_data() {
        let stopped = {
            let mut o = serving();
            o.database.stopped = true;
            o.database.pods = 0;
            o
        };
        let snapshot = |state: JobState| {
            let mut o = stopped.clone();
            o.final_snapshot_job = Some(job("db-final-snapshot-1", state));
            o
        };
        let recorded = {
            let mut o = snapshot(JobState::Succeeded(at(3)));
            o.snapshot_done = true;
            o
        };
        let gone = {
            let mut o = observed();
            o.current_version = Some("15".into());
            o.snapshot_done = true;
            o
        };
        let policy = |deletion| Desired {
            deletion,
            ..desired()
        };
        let upgraded = |mut o: Observed| {
            o.upgrade_jobs = vec![job("db-upgrade-17", JobState::Succeeded(at(2)))];
            o.upgrade_pods = 1;
            o
        };
        let everything = Step::DeleteData {
            stateful_set: true,
            jobs: vec!["db-final-snapshot-1".into()],
            data_claim: true,
        };
        let row = |case, desired, observed, step, says, stage| Row {
            case,
            desired,
            observed,
            step,
            says,
            stage,
            database: None,
            current: Some("15"),
        };
        check(
            vec![
                row(
                    "running",
                    desired(),
                    serving(),
                    Some(Step::StopDatabase),
                    "StoppingDatabase",
                    Stage::Deleting,
                ),
                row(
                    "pods still there",
                    desired(),
                    {
                        let mut o = stopped.clone();
                        o.database.pods = 1;
                        o
                    },
                    None,
                    "StoppingDatabase",
                    Stage::Deleting,
                ),
                row(
                    "stopped",
                    desired(),
                    stopped.clone(),
                    Some(Step::CreateFinalSnapshotJob {
                        version: "15".into(),
                    }),
                    "Snapshotting",
                    Stage::Deleting,
                ),
                row(
                    "snapshot running",
                    desired(),
                    snapshot(JobState::Running),
                    None,
                    "Snapshotting",
                    Stage::Deleting,
                ),
                row(
                    "snapshot failed",
                    desired(),
                    snapshot(failed("BackoffLimitExceeded")),
                    None,
                    "SnapshotFailed",
                    Stage::DeletionBlocked,
                ),
                row(
                    "snapshot timed out",
                    desired(),
                    snapshot(failed("DeadlineExceeded")),
                    None,
                    "SnapshotTimedOut",
                    Stage::DeletionBlocked,
                ),
                row(
                    "snapshot succeeded, not yet recorded",
                    desired(),
                    snapshot(JobState::Succeeded(at(3))),
                    Some(Step::DeleteData {
                        stateful_set: true,
                        jobs: vec![],
                        data_claim: true,
                    }),
                    "DeletingData",
                    Stage::Deleting,
                ),
                row(
                    "snapshot recorded",
                    desired(),
                    recorded.clone(),
                    Some(everything.clone()),
                    "DeletingData",
                    Stage::Deleting,
                ),
                row(
                    "unblocked by policy Delete",
                    policy(DeletionPolicy::Delete),
                    snapshot(failed("BackoffLimitExceeded")),
                    Some(everything),
                    "DeletingData",
                    Stage::Deleting,
                ),
                row(
                    "retain keeps the claim",
                    policy(DeletionPolicy::Retain),
                    serving(),
                    Some(Step::DeleteData {
                        stateful_set: true,
                        jobs: vec![],
                        data_claim: false,
                    }),
                    "DeletingData",
                    Stage::Deleting,
                ),
                row(
                    "upgraded: its Job's Pod holds the claim",
                    desired(),
                    upgraded(recorded.clone()),
                    Some(Step::DeleteData {
                        stateful_set: true,
                        jobs: vec!["db-final-snapshot-1".into(), "db-upgrade-17".into()],
                        data_claim: true,
                    }),
                    "DeletingData",
                    Stage::Deleting,
                ),
                row(
                    "upgraded, the claim retained",
                    policy(DeletionPolicy::Retain),
                    upgraded(serving()),
                    Some(Step::DeleteData {
                        stateful_set: true,
                        jobs: vec![],
                        data_claim: false,
                    }),
                    "DeletingData",
                    Stage::Deleting,
                ),
                row(
                    "upgrade Pod still there",
                    desired(),
                    {
                        let mut o = gone.clone();
                        o.data_claim = true;
                        o.upgrade_pods = 1;
                        o
                    },
                    Some(Step::DeleteData {
                        stateful_set: false,
                        jobs: vec![],
                        data_claim: true,
                    }),
                    "DeletingData",
                    Stage::Deleting,
                ),
                row("all gone", desired(), gone, None, "", Stage::Deleted),
            ],
            |d, o| clean_up("db", "ns", d, o),
        );
        // A database never initialized has nothing to snapshot.
        let mut new = observed();
        new.database.exists = true;
        let plan = clean_up("db", "ns", &desired(), &new);
        assert!(
            matches!(plan.step, Some(Step::DeleteData { .. })),
            "{plan:?}"
        );
        // The way out is in the message.
        let blocked = clean_up(
            "db",
            "ns",
            &desired(),
            &snapshot(failed("BackoffLimitExceeded")),
        );
        let message = blocked.problem.unwrap().message;
        assert!(
            message.contains("kubectl patch sampledb db -n ns"),
            "{message}"
        );
    }

    #[test]
    fn versions_compare_by_number() {
        assert!(is_newer("17", "15"));
        assert!(is_newer("15.10", "15.9"));
        assert!(!is_newer("15.2", "17"));
    }
}
