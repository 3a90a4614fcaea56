//! The status a SampleDB should show, from what one reconcile observed, planned and did. Pure.

use app_operator_api::SampleDB;
use app_operator_api::conditions::{Condition, DEGRADED, PROGRESSING, READY};
use app_operator_api::sampledb::{
    BackupStatus, FinalSnapshotStatus, SampleDBPhase, SampleDBStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::children::{credentials_secret, final_snapshot_job_name};
use super::plan::{Observed, Plan, Stage, Step};
use crate::reconcile::Error;
use crate::reconcile::conditions::{self, Desired, set};
use crate::reconcile::jobs::{self, JobState, NewlyFinished, SeenJob};

pub const INITIALIZED: &str = "Initialized";
pub const LAST_BACKUP_SUCCEEDED: &str = "LastBackupSucceeded";

/// The backups that finished since `backup` was recorded, oldest first.
pub fn newly_finished<'a>(
    backup: &BackupStatus,
    jobs: &'a [SeenJob],
) -> Vec<NewlyFinished<'a, SeenJob>> {
    jobs::newly_finished(
        jobs,
        |job| job,
        backup.last_successful_time.as_ref(),
        backup.last_failed_time.as_ref(),
    )
}

/// The whole status: what the plan records, the step's effect if it was taken (`error` is the
/// reconcile's failure, if any), the conditions and the phase.
pub fn status(
    db: &SampleDB,
    observed: &Observed,
    plan: &Plan,
    error: Option<&Error>,
    now: Timestamp,
) -> SampleDBStatus {
    let mut status = db.status.clone().unwrap_or_default();
    let deleting = matches!(
        plan.stage,
        Stage::Deleting | Stage::DeletionBlocked | Stage::Deleted
    );
    status.current_version.clone_from(&plan.current_version);
    if error.is_none() {
        // Recorded once its Secret exists: a generated one is created only while unrecorded.
        status.credentials_secret = Some(credentials_secret(db));
    }
    let taken = |step: &Step| error.is_none() && plan.step.as_ref() == Some(step);
    for finished in newly_finished(&status.backup.clone(), &observed.backups) {
        let (time, job) = if finished.succeeded {
            (
                &mut status.backup.last_successful_time,
                &mut status.backup.last_successful_job,
            )
        } else {
            (
                &mut status.backup.last_failed_time,
                &mut status.backup.last_failed_job,
            )
        };
        *time = Some(Time(finished.at));
        *job = Some(finished.job.name.clone());
    }
    if !deleting {
        status.upgrade.clone_from(&plan.upgrade);
        if let Some(upgrade) = &mut status.upgrade
            && let Some(step @ Step::CreateUpgradeJob { .. }) = &plan.step
            && !taken(step)
        {
            upgrade.job = None;
        }
        if let Some(step @ Step::StartBackup { tick, skipped }) = &plan.step
            && taken(step)
        {
            status.backup.last_schedule_time = Some(Time(*tick));
            status.backup.skipped_schedules = status
                .backup
                .skipped_schedules
                .saturating_add(i64::try_from(*skipped).unwrap_or(i64::MAX));
        }
        if let Some(step @ Step::BackUpNow { request, .. }) = &plan.step
            && taken(step)
        {
            status.backup.last_handled_request = Some(request.clone());
        }
        status.backup.next_schedule_time = plan.next_backup.map(Time);
    }
    if let Some(job) = &observed.final_snapshot_job {
        let record = status
            .final_snapshot
            .get_or_insert_with(|| FinalSnapshotStatus {
                job: job.name.clone(),
                start_time: job.created.clone(),
                completion_time: None,
            });
        if let Some((at, true)) = job.finished() {
            record.completion_time = Some(Time(at.unwrap_or(now)));
        }
    } else if let Some(step @ Step::CreateFinalSnapshotJob { .. }) = &plan.step
        && taken(step)
    {
        status.final_snapshot = Some(FinalSnapshotStatus {
            job: final_snapshot_job_name(
                &db.metadata.name.clone().unwrap_or_default(),
                db.metadata.uid.as_deref().unwrap_or_default(),
            ),
            start_time: Some(Time(now)),
            completion_time: None,
        });
    }
    let running = plan
        .database
        .as_ref()
        .is_some_and(|(_, replicas)| *replicas > 0)
        && observed.database.ready;
    let backup_failure = backup_failure(db, &status, observed);
    set_conditions(
        db,
        &mut status,
        plan,
        running,
        error,
        &Time(now),
        backup_failure,
    );
    status.phase = match plan.stage {
        Stage::Deleting | Stage::DeletionBlocked | Stage::Deleted => SampleDBPhase::Deleting,
        Stage::Upgrading => SampleDBPhase::Upgrading,
        Stage::InitFailed => SampleDBPhase::Failed,
        Stage::Live if status.current_version.is_some() => SampleDBPhase::Ready,
        Stage::Live if running => SampleDBPhase::Initializing,
        Stage::Live => SampleDBPhase::Pending,
    };
    status.observed_generation = db.metadata.generation;
    status
}

/// Why the last failed backup failed: "Backup Job … failed: <the Job's failure and what its
/// container said>", from the Job while it is kept, else as the condition said it before.
fn backup_failure(db: &SampleDB, status: &SampleDBStatus, observed: &Observed) -> Option<String> {
    let job = status.backup.last_failed_job.as_deref()?;
    let said = format!("Backup Job {job} failed");
    let seen = observed.backups.iter().find(|seen| seen.name == job);
    if let Some(SeenJob {
        state: JobState::Failed { message, .. },
        ..
    }) = seen
    {
        return Some(format!("{said}: {message}"));
    }
    let previous = db.status.as_ref()?.conditions.iter();
    previous
        .filter(|c| c.type_ == LAST_BACKUP_SUCCEEDED && c.message.starts_with(&said))
        .map(|c| c.message.clone())
        .next()
        .or(Some(said))
}

/// The conditions: Ready, Progressing, Degraded, Initialized, and LastBackupSucceeded once a
/// backup finished (`backup_failure`: why the last failed one failed).
fn set_conditions(
    db: &SampleDB,
    status: &mut SampleDBStatus,
    plan: &Plan,
    running: bool,
    error: Option<&Error>,
    now: &Time,
    backup_failure: Option<String>,
) {
    let previous = db
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    let generation = db.metadata.generation;
    let initialized = status.current_version.is_some();
    let ready = initialized && running && matches!(plan.stage, Stage::Live);
    let degraded = match (error, &plan.problem) {
        (Some(error), _) => conditions::degraded(Some(error), ""),
        (None, Some(problem)) => Desired {
            type_: DEGRADED,
            status: true,
            reason: problem.reason,
            message: problem.message.clone(),
        },
        (None, None) => conditions::degraded(None, "The database and its Jobs are as specified"),
    };
    let mut wanted = vec![
        Desired {
            type_: READY,
            status: ready,
            reason: if ready {
                "DatabaseReady"
            } else {
                "DatabaseNotReady"
            },
            message: if ready {
                "The database is initialized and serving".to_owned()
            } else {
                "The database is not initialized, not running, or stopped".to_owned()
            },
        },
        match &plan.progress {
            Some(progress) => Desired {
                type_: PROGRESSING,
                status: true,
                reason: progress.reason,
                message: progress.message.clone(),
            },
            None => Desired {
                type_: PROGRESSING,
                status: false,
                reason: "Settled",
                message: "Nothing is under way".to_owned(),
            },
        },
        degraded,
        Desired {
            type_: INITIALIZED,
            status: initialized,
            reason: if initialized {
                "Initialized"
            } else {
                "NotInitialized"
            },
            message: match &status.current_version {
                Some(version) => format!("The database was initialized; its data is at {version}"),
                None => "The init (or restore) Job has not succeeded yet".to_owned(),
            },
        },
    ];
    if let Some(succeeded) = last_backup_succeeded(status) {
        wanted.push(Desired {
            type_: LAST_BACKUP_SUCCEEDED,
            status: succeeded,
            reason: if succeeded {
                "BackupSucceeded"
            } else {
                "BackupFailed"
            },
            message: if succeeded {
                format!(
                    "Backup Job {} succeeded",
                    status.backup.last_successful_job.as_deref().unwrap_or("")
                )
            } else {
                backup_failure.unwrap_or_default()
            },
        });
    }
    status.conditions = wanted
        .into_iter()
        .map(|desired| set(&previous, desired, generation, now))
        .collect::<Vec<Condition>>();
}

/// Whether the latest finished backup succeeded; `None` before any finished.
fn last_backup_succeeded(status: &SampleDBStatus) -> Option<bool> {
    let backup = &status.backup;
    match (&backup.last_successful_time, &backup.last_failed_time) {
        (None, None) => None,
        (Some(_), None) => Some(true),
        (None, Some(_)) => Some(false),
        (Some(succeeded), Some(failed)) => Some(succeeded.0 >= failed.0),
    }
}

#[cfg(test)]
mod tests {
    use app_operator_api::sampledb::SampleDBSpec;

    use super::super::plan::{Problem, observed};
    use super::*;
    use crate::reconcile::jobs::JobState;

    fn db(status: SampleDBStatus) -> SampleDB {
        let spec: SampleDBSpec =
            serde_json::from_value(serde_json::json!({ "version": "16.4" })).unwrap();
        let mut db = SampleDB::new("db", spec);
        db.metadata.generation = Some(3);
        db.status = Some(status);
        db
    }

    fn condition<'a>(status: &'a SampleDBStatus, type_: &str) -> &'a Condition {
        status.conditions.iter().find(|c| c.type_ == type_).unwrap()
    }

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn running(current: Option<&str>) -> Plan {
        Plan {
            database: Some(("16.4".into(), 1)),
            current_version: current.map(str::to_owned),
            ..Plan::default()
        }
    }

    #[test]
    fn ready_only_once_initialized_and_running() {
        let mut seen = observed();
        seen.database.ready = true;
        let now = Timestamp::UNIX_EPOCH;
        let status = status(
            &db(SampleDBStatus::default()),
            &seen,
            &running(None),
            None,
            now,
        );
        assert_eq!(condition(&status, READY).status, "False");
        assert_eq!(status.phase, SampleDBPhase::Initializing);
        let status = status_of(&seen, &running(Some("16.4")));
        assert_eq!(condition(&status, READY).status, "True");
        assert_eq!(condition(&status, INITIALIZED).status, "True");
        assert_eq!(status.phase, SampleDBPhase::Ready);
        assert_eq!(status.observed_generation, Some(3));
        // Stopped for an upgrade: initialized, but not Ready.
        let stopped = Plan {
            database: Some(("16.4".into(), 0)),
            stage: Stage::Upgrading,
            ..running(Some("16.4"))
        };
        let status = status_of(&seen, &stopped);
        assert_eq!(condition(&status, READY).status, "False");
        assert_eq!(status.phase, SampleDBPhase::Upgrading);
    }

    fn status_of(seen: &Observed, plan: &Plan) -> SampleDBStatus {
        status(
            &db(SampleDBStatus::default()),
            seen,
            plan,
            None,
            Timestamp::UNIX_EPOCH,
        )
    }

    #[test]
    fn a_problem_is_degraded_with_its_reason_and_the_newest_backup_decides() {
        let mut previous = SampleDBStatus::default();
        previous.backup.last_successful_time = Some(Time(at("2026-11-23T10:00:05Z")));
        previous.backup.last_failed_time = Some(Time(at("2026-11-23T10:00:10Z")));
        let plan = Plan {
            problem: Some(Problem {
                reason: "InvalidSchedule",
                message: "bad".into(),
            }),
            ..running(Some("16.4"))
        };
        let status = status(
            &db(previous),
            &observed(),
            &plan,
            None,
            Timestamp::UNIX_EPOCH,
        );
        let degraded = condition(&status, DEGRADED);
        assert_eq!(
            (degraded.status.as_str(), degraded.reason.as_str()),
            ("True", "InvalidSchedule")
        );
        assert_eq!(condition(&status, LAST_BACKUP_SUCCEEDED).status, "False");
    }

    #[test]
    fn a_backup_tick_is_recorded_only_once_its_job_was_created() {
        let plan = Plan {
            step: Some(Step::StartBackup {
                tick: at("2026-11-23T03:00:00Z"),
                skipped: 2,
            }),
            ..running(Some("16.4"))
        };
        let taken = status_of(&observed(), &plan);
        assert_eq!(
            taken.backup.last_schedule_time,
            Some(Time(at("2026-11-23T03:00:00Z")))
        );
        assert_eq!(taken.backup.skipped_schedules, 2);
        let failed = status(
            &db(SampleDBStatus::default()),
            &observed(),
            &plan,
            Some(&Error::Random),
            Timestamp::UNIX_EPOCH,
        );
        assert_eq!(failed.backup.last_schedule_time, None);
        assert_eq!(failed.backup.skipped_schedules, 0);
        assert_eq!(condition(&failed, DEGRADED).status, "True");
    }

    #[test]
    fn finished_backups_are_recorded_newest_last_and_only_once() {
        let job = SeenJob::new;
        let done = |text: &str| JobState::Succeeded(Some(Time(at(text))));
        let mut seen = observed();
        seen.backups = vec![
            job("db-backup-2", done("2026-11-23T10:02:00Z")),
            job("db-backup-1", done("2026-11-23T10:01:00Z")),
            job(
                "db-backup-3",
                JobState::Failed {
                    at: Some(Time(at("2026-11-23T10:03:00Z"))),
                    reason: "BackoffLimitExceeded".into(),
                    message: "".into(),
                },
            ),
            job("db-backup-4", JobState::Running),
        ];
        let status = status_of(&seen, &running(Some("16.4")));
        assert_eq!(
            status.backup.last_successful_job.as_deref(),
            Some("db-backup-2")
        );
        assert_eq!(
            status.backup.last_failed_job.as_deref(),
            Some("db-backup-3")
        );
        assert_eq!(condition(&status, LAST_BACKUP_SUCCEEDED).status, "False");
        let names = |backup: &BackupStatus| {
            newly_finished(backup, &seen.backups)
                .iter()
                .map(|f| f.job.name.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(&BackupStatus::default()),
            ["db-backup-1", "db-backup-2", "db-backup-3"]
        );
        assert!(names(&status.backup).is_empty());
    }

    #[test]
    fn a_failed_backup_says_why_while_its_job_is_kept_and_after() {
        let mut seen = observed();
        seen.backups = vec![SeenJob::new(
            "db-backup-1",
            JobState::Failed {
                at: Some(Time(at("2026-11-23T10:03:00Z"))),
                reason: "BackoffLimitExceeded".into(),
                message:
                    "its container said: pg_dump: error: could not write: No space left on device"
                        .into(),
            },
        )];
        let failed = status_of(&seen, &running(Some("16.4")));
        let why = "Backup Job db-backup-1 failed: its container said: pg_dump: error: could not write: No space left on device";
        assert_eq!(condition(&failed, LAST_BACKUP_SUCCEEDED).message, why);
        // The Job deleted by retention: the condition keeps saying why.
        seen.backups.clear();
        let later = status(
            &db(failed),
            &seen,
            &running(Some("16.4")),
            None,
            Timestamp::UNIX_EPOCH,
        );
        assert_eq!(condition(&later, LAST_BACKUP_SUCCEEDED).message, why);
    }
}
