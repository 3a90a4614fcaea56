//! The status an EtcdBackup should show, from what one reconcile observed, planned and did. Pure.

use app_operator_api::EtcdBackup;
use app_operator_api::conditions::{DEGRADED, PROGRESSING, READY};
use app_operator_api::etcdbackup::EtcdBackupStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::plan::{BackupJob, Observed, Plan, Step};
use crate::reconcile::Error;
use crate::reconcile::conditions::{self, set};
use crate::reconcile::jobs::{self, JobState, NewlyFinished};

/// What taking the plan's step did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Taken {
    /// The step (if any) was taken, or failed (the reconcile's error says why).
    Done,
    /// The due backup did not start: another EtcdBackup's Job copies the cluster now.
    TurnedAway { other_job: String },
}

/// The Jobs that finished since `status` recorded, oldest first.
pub fn newly_finished<'a>(
    status: &EtcdBackupStatus,
    jobs: &'a [BackupJob],
) -> Vec<NewlyFinished<'a, BackupJob>> {
    jobs::newly_finished(
        jobs,
        |backup| &backup.job,
        status.last_success_date.as_ref(),
        status.last_failure_date.as_ref(),
    )
}

/// Why a finished Job failed, as the status and its Warning say it.
pub fn failure(backup: &BackupJob) -> String {
    let name = &backup.job.name;
    match &backup.job.state {
        JobState::Failed {
            reason, message, ..
        } => format!("Job {name} failed: {reason}: {message}"),
        _ => format!("Job {name} failed"),
    }
}

/// The whole status. The Jobs, not only the status, say which ticks were started and which
/// backups finished, so nothing is lost when a status write is; each is recorded once.
pub fn status(
    backup: &EtcdBackup,
    observed: &Observed,
    plan: &Plan,
    taken: &Taken,
    error: Option<&Error>,
    now: Timestamp,
) -> EtcdBackupStatus {
    let previous = backup.status.clone().unwrap_or_default();
    let mut status = previous.clone();
    let max = usize::try_from(
        backup
            .spec
            .backup_policy
            .as_ref()
            .map_or(1, |policy| policy.max_backups),
    )
    .unwrap_or(1)
    .max(1);

    // Ticks started: the Jobs' (newer than the status's), then the step's if it was taken.
    let mut ticks: Vec<(Timestamp, i64)> = observed
        .jobs
        .iter()
        .filter_map(|job| Some((job.tick?, job.skipped)))
        .collect();
    if let (Some(Step::Start { tick, skipped }), Taken::Done, None) = (&plan.step, taken, error) {
        ticks.push((*tick, i64::try_from(*skipped).unwrap_or(i64::MAX)));
    }
    ticks.sort();
    for (tick, skipped) in ticks {
        if status
            .last_schedule_time
            .as_ref()
            .is_none_or(|t| tick > t.0)
        {
            status.last_schedule_time = Some(Time(tick));
            status.skipped_schedules = status.skipped_schedules.saturating_add(skipped);
        }
    }

    for finished in newly_finished(&previous, &observed.jobs) {
        let job = finished.job;
        if finished.succeeded {
            let mut record = job.snapshot.clone();
            record.time = Time(finished.at);
            status.claim_name = job.claim.clone().or(status.claim_name.take());
            status.snapshots.retain(|kept| kept.file != record.file);
            status.snapshots.insert(0, record.clone());
            status.snapshots.truncate(max);
            status.last_success_date = Some(record.time.clone());
            status.etcd_revision = Some(record.etcd_revision);
            status.etcd_version = Some(record.etcd_version.clone());
        } else {
            status.last_failure_date = Some(Time(finished.at));
            status.reason = Some(failure(job));
        }
    }
    let when = |t: &Option<Time>| t.as_ref().map(|t| t.0);
    status.succeeded = status.last_success_date.is_some()
        && when(&status.last_success_date) >= when(&status.last_failure_date);
    if status.succeeded {
        status.reason = None;
    }
    if let Some(error @ Error::Waiting { .. }) = error {
        // The due backup could not start: that is the latest backup's outcome.
        status.succeeded = false;
        status.reason = Some(error.to_string());
    }
    if let Some(message) = &plan.invalid_schedule {
        status.succeeded = false;
        status.reason = Some(invalid_schedule(message));
    }
    status.next_schedule_time = plan.next_tick.map(Time);

    let busy = match taken {
        Taken::TurnedAway { other_job } => Some(other_job.as_str()),
        Taken::Done => observed.other_job.as_deref(),
    };
    set_conditions(
        backup,
        &mut status,
        plan,
        observed.running(),
        busy,
        error,
        &Time(now),
    );
    status
}

pub fn invalid_schedule(message: &str) -> String {
    format!("spec.backupPolicy.schedule: {message}; no backups run")
}

/// Ready (the latest backup succeeded and nothing is in the way), Progressing (a backup runs, or
/// waits for another one of the same cluster), Degraded (why backups fail or cannot start).
fn set_conditions(
    backup: &EtcdBackup,
    status: &mut EtcdBackupStatus,
    plan: &Plan,
    running: Option<&str>,
    busy: Option<&str>,
    error: Option<&Error>,
    now: &Time,
) {
    let desired = |type_, status: bool, reason, message: String| conditions::Desired {
        type_,
        status,
        reason,
        message,
    };
    let latest = status.snapshots.first();
    let reason = status.reason.clone().unwrap_or_default();
    let ready = match (error, latest) {
        (Some(error), _) => desired(READY, false, error.reason(), error.to_string()),
        (None, _) if plan.invalid_schedule.is_some() => {
            desired(READY, false, "InvalidSchedule", reason.clone())
        }
        (None, Some(latest)) if status.succeeded => desired(
            READY,
            true,
            "BackupSucceeded",
            format!(
                "snapshot {} at revision {} ({} kept)",
                latest.file,
                latest.etcd_revision,
                status.snapshots.len()
            ),
        ),
        (None, _) if status.last_failure_date.is_some() && !status.succeeded => {
            desired(READY, false, "BackupFailed", reason.clone())
        }
        (None, _) => desired(
            READY,
            false,
            "NoBackupYet",
            "no backup has finished yet".into(),
        ),
    };
    let progressing = match (running, busy) {
        (Some(job), _) => desired(
            PROGRESSING,
            true,
            "BackupRunning",
            format!("Job {job} is taking a snapshot"),
        ),
        (None, Some(job)) => desired(
            PROGRESSING,
            true,
            "WaitingForOtherBackup",
            format!(
                "Job {job} of another EtcdBackup is copying this cluster; one backup of a cluster runs at a time"
            ),
        ),
        (None, None) => desired(PROGRESSING, false, "Idle", "no backup is running".into()),
    };
    let degraded = match error {
        None if plan.invalid_schedule.is_some() => {
            desired(DEGRADED, true, "InvalidSchedule", reason)
        }
        None if !status.succeeded && status.last_failure_date.is_some() => {
            desired(DEGRADED, true, "BackupFailed", reason)
        }
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
    use app_operator_api::etcdbackup::EtcdBackupSpec;

    use super::super::plan::{Plan, backup_job};
    use super::*;

    fn backup(status: EtcdBackupStatus) -> EtcdBackup {
        let spec: EtcdBackupSpec = serde_json::from_value(serde_json::json!({
            "etcdCluster": { "name": "c" },
            "backupPolicy": { "maxBackups": 2 },
        }))
        .unwrap();
        let mut backup = EtcdBackup::new("b", spec);
        backup.status = Some(status);
        backup
    }

    fn seconds(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn job(name: &str, state: JobState, tick: i64, slot: usize) -> BackupJob {
        backup_job(name, state, tick, &format!("b-{slot}.db"))
    }

    fn observed(jobs: Vec<BackupJob>) -> Observed {
        Observed {
            jobs,
            last_tick: None,
            other_job: None,
            now: seconds(1000),
        }
    }

    fn condition(status: &EtcdBackupStatus, type_: &str) -> (String, String) {
        let found = status.conditions.iter().find(|c| c.type_ == type_).unwrap();
        (found.status.clone(), found.reason.clone())
    }

    fn done(at: i64) -> JobState {
        JobState::Succeeded(Some(Time(seconds(at))))
    }

    #[test]
    fn snapshots_are_recorded_newest_first_within_max_backups_once_each() {
        let seen = observed(vec![
            job("b-3", done(305), 300, 0),
            job("b-1", done(105), 100, 0),
            job("b-2", done(205), 200, 1),
        ]);
        let first = status(
            &backup(EtcdBackupStatus::default()),
            &seen,
            &Plan::default(),
            &Taken::Done,
            None,
            seconds(1000),
        );
        let files: Vec<&str> = first.snapshots.iter().map(|s| s.file.as_str()).collect();
        assert_eq!(files, ["b-0.db", "b-1.db"]);
        assert_eq!(first.snapshots[0].job, "b-3");
        assert_eq!(first.last_schedule_time, Some(Time(seconds(300))));
        assert_eq!(first.skipped_schedules, 3);
        assert_eq!(
            condition(&first, READY),
            ("True".into(), "BackupSucceeded".into())
        );
        // Read again from the status it wrote: nothing is counted twice.
        let again = status(
            &backup(first.clone()),
            &seen,
            &Plan::default(),
            &Taken::Done,
            None,
            seconds(1000),
        );
        assert_eq!(again.skipped_schedules, 3);
        assert_eq!(again.snapshots, first.snapshots);
    }

    #[test]
    fn a_failed_job_then_a_start_that_must_wait_are_degraded_with_the_reason() {
        let failed = JobState::Failed {
            at: Some(Time(seconds(110))),
            reason: "DeadlineExceeded".into(),
            message: "too slow".into(),
        };
        let seen = observed(vec![job("b-1", failed, 100, 0)]);
        let plan = Plan::default();
        let after = status(
            &backup(EtcdBackupStatus::default()),
            &seen,
            &plan,
            &Taken::Done,
            None,
            seconds(1000),
        );
        assert_eq!(
            after.reason.as_deref(),
            Some("Job b-1 failed: DeadlineExceeded: too slow")
        );
        assert_eq!(
            condition(&after, DEGRADED),
            ("True".into(), "BackupFailed".into())
        );
        let start = Plan {
            step: Some(Step::Start {
                tick: seconds(900),
                skipped: 0,
            }),
            ..Plan::default()
        };
        let waiting = Error::Waiting {
            reason: "NoQuorum",
            message: "no quorum".into(),
        };
        let after = status(
            &backup(EtcdBackupStatus::default()),
            &observed(vec![]),
            &start,
            &Taken::Done,
            Some(&waiting),
            seconds(1000),
        );
        assert_eq!(after.reason.as_deref(), Some("no quorum"));
        assert_eq!(
            after.last_schedule_time, None,
            "a start that failed is no tick"
        );
        assert_eq!(
            condition(&after, READY),
            ("False".into(), "NoQuorum".into())
        );
        let turned = status(
            &backup(EtcdBackupStatus::default()),
            &observed(vec![]),
            &start,
            &Taken::TurnedAway {
                other_job: "a-1".into(),
            },
            None,
            seconds(1000),
        );
        assert_eq!(turned.last_schedule_time, None);
        assert_eq!(
            condition(&turned, PROGRESSING),
            ("True".into(), "WaitingForOtherBackup".into())
        );
    }

    #[test]
    fn an_invalid_schedule_is_degraded_with_its_reason() {
        let plan = Plan {
            invalid_schedule: Some("\"x\" has 1 fields".into()),
            ..Plan::default()
        };
        let after = status(
            &backup(EtcdBackupStatus::default()),
            &observed(vec![]),
            &plan,
            &Taken::Done,
            None,
            seconds(1000),
        );
        assert_eq!(
            condition(&after, DEGRADED),
            ("True".into(), "InvalidSchedule".into())
        );
        assert!(after.reason.unwrap().contains("spec.backupPolicy.schedule"));
    }
}
