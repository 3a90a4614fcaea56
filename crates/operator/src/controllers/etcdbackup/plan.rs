//! The one step an EtcdBackup reconcile takes, chosen from its Jobs and the status recorded so
//! far. Pure: no I/O, so every scheduling rule is a table test.
//!
//! First that applies wins: nothing while one of its Jobs runs, or another EtcdBackup's Job
//! copies the same cluster; start the backup that is due (the first one at once, then the latest
//! tick of the policy since the last one started, the ticks before it counted as skipped); trim
//! finished Jobs beyond the history. An invalid schedule starts nothing and says why.

use app_operator_api::etcdbackup::SnapshotRecord;
use k8s_openapi::jiff::Timestamp;

use crate::reconcile::jobs::{JobState, SeenJob, beyond_history};
use crate::reconcile::schedule::Schedule;

/// When backups repeat, as the spec gives it.
#[derive(Clone, Debug)]
pub enum Repeat {
    /// One backup, at once.
    Once,
    Every(Schedule),
    /// The schedule does not parse: why.
    Invalid(String),
}

#[derive(Clone, Debug)]
pub struct Desired {
    pub repeat: Repeat,
    /// Finished Jobs kept of each outcome.
    pub history: usize,
}

/// A backup Job of this EtcdBackup as the cache shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct BackupJob {
    pub job: SeenJob,
    /// The tick it backs up, and the earlier ticks it passed over (its annotations).
    pub tick: Option<Timestamp>,
    pub skipped: i64,
    /// What it saves, as the status records it once it succeeded.
    pub snapshot: SnapshotRecord,
    /// The claim it writes to (the spec's may have changed since).
    pub claim: Option<String>,
}

#[derive(Clone, Debug)]
pub struct Observed {
    pub jobs: Vec<BackupJob>,
    /// The tick of the last backup started (`status.lastScheduleTime`).
    pub last_tick: Option<Timestamp>,
    /// Another EtcdBackup's Job copying the same cluster now.
    pub other_job: Option<String>,
    pub now: Timestamp,
}

impl Observed {
    /// The tick of the last backup started: the status's, or a newer Job's (a pass reading a
    /// status older than its own last write still knows the Job it started).
    pub fn last_tick(&self) -> Option<Timestamp> {
        self.jobs
            .iter()
            .filter_map(|backup| backup.tick)
            .chain(self.last_tick)
            .max()
    }

    pub fn running(&self) -> Option<&str> {
        self.jobs
            .iter()
            .find(|backup| backup.job.state == JobState::Running)
            .map(|backup| backup.job.name.as_str())
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Start the backup of `tick` (`skipped` earlier ticks get none).
    Start { tick: Timestamp, skipped: u64 },
    /// Delete finished Jobs beyond the history.
    Trim { jobs: Vec<String> },
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    pub step: Option<Step>,
    /// The next tick, for periodic backups.
    pub next_tick: Option<Timestamp>,
    /// The schedule is invalid: why (`Degraded`, and no backup starts).
    pub invalid_schedule: Option<String>,
}

pub fn plan(desired: &Desired, observed: &Observed) -> Plan {
    let now = observed.now;
    let repeat = match &desired.repeat {
        Repeat::Invalid(message) => {
            return Plan {
                invalid_schedule: Some(message.clone()),
                ..Plan::default()
            };
        }
        Repeat::Once => None,
        Repeat::Every(schedule) => Some(schedule),
    };
    let last = observed.last_tick();
    let due = match last {
        None => Some((now, 0)),
        Some(last) => repeat
            .and_then(|r| r.due(last, now))
            .map(|due| (due.tick, due.skipped)),
    };
    let mut plan = Plan {
        next_tick: repeat.and_then(|r| r.next_after(last.unwrap_or(now).max(now))),
        ..Plan::default()
    };
    let busy = observed.running().is_some() || observed.other_job.is_some();
    plan.step = match due {
        Some((tick, skipped)) if !busy => Some(Step::Start { tick, skipped }),
        _ => {
            let jobs = beyond_history(
                observed.jobs.iter().map(|backup| &backup.job),
                desired.history,
                desired.history,
            );
            (!jobs.is_empty()).then_some(Step::Trim { jobs })
        }
    };
    plan
}

/// A backup Job of tick `tick` (seconds), saving `file` at revision `tick`, one tick skipped.
#[cfg(test)]
pub fn backup_job(name: &str, state: JobState, tick: i64, file: &str) -> BackupJob {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    let at = Timestamp::from_second(tick).unwrap_or(Timestamp::UNIX_EPOCH);
    BackupJob {
        job: SeenJob::new(name, state),
        tick: Some(at),
        skipped: 1,
        snapshot: SnapshotRecord {
            file: file.into(),
            time: Time(at),
            etcd_revision: tick,
            etcd_version: "3.6.16".into(),
            size_bytes: 1,
            job: name.into(),
        },
        claim: Some("b-snapshots".into()),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    const HOUR: i64 = 3600;

    fn seconds(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    fn job(name: &str, state: JobState, tick: i64) -> BackupJob {
        backup_job(name, state, tick, &format!("{name}.db"))
    }

    fn done(at: i64) -> JobState {
        JobState::Succeeded(Some(Time(seconds(at))))
    }

    fn hourly() -> Desired {
        Desired {
            repeat: Repeat::Every(Schedule::parse("0 * * * *").unwrap()),
            history: 2,
        }
    }

    fn at(now: i64, jobs: Vec<BackupJob>) -> Observed {
        Observed {
            jobs,
            last_tick: None,
            other_job: None,
            now: seconds(now),
        }
    }

    #[test]
    fn the_first_backup_starts_at_once_then_one_per_due_tick_never_two_at_once() {
        let once = Desired {
            repeat: Repeat::Once,
            history: 2,
        };
        let first = at(100, vec![]);
        let ran = at(5 * HOUR + 100, vec![job("b-1", done(110), 100)]);
        let running = at(5 * HOUR, vec![job("b-1", JobState::Running, 100)]);
        let mut other = at(5 * HOUR, vec![job("b-1", done(110), 100)]);
        other.other_job = Some("a-2".into());
        let hourly = hourly();
        let mut recorded = at(HOUR + 100, vec![]);
        recorded.last_tick = Some(seconds(HOUR));
        let cases: Vec<(&str, &Desired, &Observed, Option<Step>)> = vec![
            (
                "first, once",
                &once,
                &first,
                Some(Step::Start {
                    tick: seconds(100),
                    skipped: 0,
                }),
            ),
            (
                "first, periodic",
                &hourly,
                &first,
                Some(Step::Start {
                    tick: seconds(100),
                    skipped: 0,
                }),
            ),
            ("once, done", &once, &ran, None),
            // Ticks at 1h..5h: the latest is backed up, the four before it are skipped.
            (
                "catch up once",
                &hourly,
                &ran,
                Some(Step::Start {
                    tick: seconds(5 * HOUR),
                    skipped: 4,
                }),
            ),
            ("its own Job runs", &hourly, &running, None),
            ("another backup copies the cluster", &hourly, &other, None),
            ("not due (status)", &hourly, &recorded, None),
        ];
        for (case, desired, observed, step) in cases {
            assert_eq!(plan(desired, observed).step, step, "{case}");
        }
        assert_eq!(plan(&hourly, &recorded).next_tick, Some(seconds(2 * HOUR)));
        assert_eq!(plan(&once, &ran).next_tick, None);
    }

    #[test]
    fn finished_jobs_beyond_the_history_are_trimmed_when_nothing_is_due() {
        let failed = JobState::Failed {
            at: Some(Time(seconds(50))),
            reason: "BackoffLimitExceeded".into(),
            message: String::new(),
        };
        let jobs = vec![
            job("b-1", done(10), 1),
            job("b-2", done(20), 2),
            job("b-3", done(30), 3),
            job("b-4", failed, 4),
        ];
        let mut observed = at(100, jobs);
        observed.last_tick = Some(seconds(100));
        assert_eq!(
            plan(&hourly(), &observed).step,
            Some(Step::Trim {
                jobs: vec!["b-1".into()]
            })
        );
    }

    #[test]
    fn an_invalid_schedule_starts_nothing_and_says_why() {
        let invalid = Desired {
            repeat: Repeat::Invalid("\"x\" has 1 fields".into()),
            history: 2,
        };
        let plan = plan(&invalid, &at(100, vec![]));
        assert_eq!(plan.step, None);
        assert_eq!(plan.invalid_schedule.as_deref(), Some("\"x\" has 1 fields"));
    }
}
