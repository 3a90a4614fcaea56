//! The conditions and phase a SampleDB should show, from what one reconcile found.

use app_operator_api::SampleDB;
use app_operator_api::conditions::{Condition, DEGRADED, PROGRESSING, READY};
use app_operator_api::sampledb::{SampleDBPhase, SampleDBStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::reconcile::Error;
use crate::reconcile::conditions::{self, Desired, set};

pub const INITIALIZED: &str = "Initialized";
pub const LAST_BACKUP_SUCCEEDED: &str = "LastBackupSucceeded";

/// Something wrong with the database itself (not with a reconcile): the `Degraded` reason and
/// message, and a Warning when it first appears.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub reason: &'static str,
    pub message: String,
}

/// What one reconcile found, for the conditions.
#[derive(Debug, Default)]
pub struct Findings {
    /// The database Pod is Ready.
    pub database_ready: bool,
    /// What the database is moving towards, as the `Progressing` reason and message.
    pub progress: Option<(&'static str, String)>,
    /// A failed init, restore or upgrade, or an invalid schedule.
    pub problem: Option<Problem>,
    /// Initialization failed (phase Failed until the Job is deleted and retried).
    pub init_failed: bool,
    pub upgrading: bool,
    pub deleting: bool,
}

/// Sets `status`'s conditions, phase and observed generation.
pub fn finish(
    db: &SampleDB,
    status: &mut SampleDBStatus,
    findings: &Findings,
    error: Option<&Error>,
    now: &Time,
) {
    let previous = db
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    let generation = db.metadata.generation;
    let initialized = status.current_version.is_some();
    let ready = initialized && findings.database_ready && !findings.upgrading && !findings.deleting;
    let degraded = match (error, &findings.problem) {
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
        match &findings.progress {
            Some((reason, message)) => Desired {
                type_: PROGRESSING,
                status: true,
                reason,
                message: message.clone(),
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
                format!(
                    "Backup Job {} failed",
                    status.backup.last_failed_job.as_deref().unwrap_or("")
                )
            },
        });
    }
    status.conditions = wanted
        .into_iter()
        .map(|desired| set(&previous, desired, generation, now))
        .collect::<Vec<Condition>>();
    status.phase = if findings.deleting {
        SampleDBPhase::Deleting
    } else if findings.upgrading {
        SampleDBPhase::Upgrading
    } else if findings.init_failed {
        SampleDBPhase::Failed
    } else if initialized {
        SampleDBPhase::Ready
    } else if findings.database_ready {
        SampleDBPhase::Initializing
    } else {
        SampleDBPhase::Pending
    };
    status.observed_generation = generation;
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
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    fn db() -> SampleDB {
        let spec: SampleDBSpec =
            serde_json::from_value(serde_json::json!({ "version": "16.4" })).unwrap();
        let mut db = SampleDB::new("db", spec);
        db.metadata.generation = Some(3);
        db
    }

    fn condition<'a>(status: &'a SampleDBStatus, type_: &str) -> &'a Condition {
        status.conditions.iter().find(|c| c.type_ == type_).unwrap()
    }

    #[test]
    fn ready_only_once_initialized_and_running() {
        let now = Time(Timestamp::UNIX_EPOCH);
        let mut status = SampleDBStatus::default();
        let running = Findings {
            database_ready: true,
            ..Findings::default()
        };
        finish(&db(), &mut status, &running, None, &now);
        assert_eq!(condition(&status, READY).status, "False");
        assert_eq!(status.phase, SampleDBPhase::Initializing);
        status.current_version = Some("16.4".into());
        finish(&db(), &mut status, &running, None, &now);
        assert_eq!(condition(&status, READY).status, "True");
        assert_eq!(condition(&status, INITIALIZED).status, "True");
        assert_eq!(status.phase, SampleDBPhase::Ready);
        assert_eq!(status.observed_generation, Some(3));
    }

    #[test]
    fn a_problem_is_degraded_with_its_reason_and_the_newest_backup_decides() {
        let now = Time(Timestamp::UNIX_EPOCH);
        let mut status = SampleDBStatus::default();
        status.backup.last_successful_time = Some(Time("2026-11-23T10:00:05Z".parse().unwrap()));
        status.backup.last_failed_time = Some(Time("2026-11-23T10:00:10Z".parse().unwrap()));
        let findings = Findings {
            problem: Some(Problem {
                reason: "InvalidSchedule",
                message: "bad".into(),
            }),
            ..Findings::default()
        };
        finish(&db(), &mut status, &findings, None, &now);
        let degraded = condition(&status, DEGRADED);
        assert_eq!(
            (degraded.status.as_str(), degraded.reason.as_str()),
            ("True", "InvalidSchedule")
        );
        assert_eq!(condition(&status, LAST_BACKUP_SUCCEEDED).status, "False");
    }
}
