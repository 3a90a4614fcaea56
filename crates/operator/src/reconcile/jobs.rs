//! Jobs a controller runs (backups, restores, upgrades): where one stands, creating one exactly
//! once per name, keeping a bounded history of finished ones, announcing each finished one once.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::reflector::Store;
use serde_json::json;

use super::Error;
use super::apply::is_controlled_by;
use super::runner::cached;

/// Where a Job stands.
#[derive(Debug, Clone, PartialEq)]
pub enum JobState {
    Running,
    Succeeded(Option<Time>),
    /// When and why (the Job's `Failed` condition: `DeadlineExceeded`, `BackoffLimitExceeded`).
    Failed {
        at: Option<Time>,
        reason: String,
        message: String,
    },
}

pub fn job_state(job: &Job) -> JobState {
    let conditions = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten();
    for condition in conditions.filter(|c| c.status == "True") {
        match condition.type_.as_str() {
            "Complete" => {
                let at = job.status.as_ref().and_then(|s| s.completion_time.clone());
                return JobState::Succeeded(at.or_else(|| condition.last_transition_time.clone()));
            }
            "Failed" => {
                return JobState::Failed {
                    at: condition.last_transition_time.clone(),
                    reason: condition.reason.clone().unwrap_or_default(),
                    message: condition.message.clone().unwrap_or_default(),
                };
            }
            _ => {}
        }
    }
    JobState::Running
}

/// The Job `desired` names: the cached one, or created. A Job of that name that `is_ours` says
/// belongs to us (by label) but has no controller (made by hand, or left by a crash) is adopted;
/// any other is a conflict. Jobs are never updated: their template is immutable.
pub async fn ensure_job(
    jobs: &Store<Job>,
    api: &Api<Job>,
    desired: Job,
    is_ours: impl Fn(&Job) -> bool,
) -> Result<Job, Error> {
    let name = desired.name_any();
    let namespace = desired.namespace().unwrap_or_default();
    let existing = match cached(jobs, &name, &namespace) {
        Some(job) => job.as_ref().clone(),
        None => match api.create(&PostParams::default(), &desired).await {
            Ok(created) => {
                tracing::info!(job = %name, "created Job");
                return Ok(created);
            }
            Err(kube::Error::Api(status)) if status.code == 409 => {
                api.get(&name).await.map_err(|source| Error::Get {
                    kind: "Job".into(),
                    name: name.clone(),
                    source,
                })?
            }
            Err(source) => {
                return Err(Error::Create {
                    kind: "Job".into(),
                    name,
                    source,
                });
            }
        },
    };
    let controller = |job: &Job| {
        job.owner_references()
            .iter()
            .find(|r| r.controller == Some(true))
            .cloned()
    };
    let wanted = controller(&desired);
    let has_controller = controller(&existing).is_some();
    let conflict = || Error::Conflict {
        kind: "Job".into(),
        name: name.clone(),
    };
    if !is_ours(&existing) {
        return Err(conflict());
    }
    match wanted {
        Some(owner) if has_controller => {
            if is_controlled_by(&existing, &owner.uid) {
                Ok(existing)
            } else {
                Err(conflict())
            }
        }
        Some(owner) => {
            let patch = json!({ "metadata": {
                "ownerReferences": [owner],
                "resourceVersion": existing.resource_version(),
            }});
            let adopted = api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|source| Error::Apply {
                    kind: "Job".into(),
                    name: name.clone(),
                    source,
                })?;
            tracing::info!(job = %name, "adopted a Job of ours that had no owner");
            Ok(adopted)
        }
        None => Ok(existing),
    }
}

/// A Job as a plan sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct SeenJob {
    pub name: String,
    pub state: JobState,
    pub created: Option<Time>,
    /// While it runs: what its newest failed Pod said (a failure its pod failure policy lets
    /// a new Pod try again).
    pub retrying_after: Option<String>,
}

impl SeenJob {
    /// A Job of this name in this state, never seen to retry (for plans' tests).
    #[cfg(test)]
    pub fn new(name: &str, state: JobState) -> SeenJob {
        SeenJob {
            name: name.into(),
            state,
            created: None,
            retrying_after: None,
        }
    }

    pub fn of(job: &Job) -> SeenJob {
        SeenJob {
            name: job.name_any(),
            state: job_state(job),
            created: job.metadata.creation_timestamp.clone(),
            retrying_after: None,
        }
    }

    /// The Job as its Pods show it. A running Job one of whose Pods succeeded has succeeded,
    /// when that Pod's containers ended (ours run one completion): the Job controller writes
    /// `Complete` seconds later (it batches Pod updates for a second, then removes its tracking
    /// finalizers from the Pods before it writes the condition). A succeeded Job's time is its
    /// Pod's whenever the Pod is seen, so the time does not move when `Complete` arrives (nor
    /// the outcome, if the Job's deadline passed while it counted the Pod: the work was done). A
    /// failed Job's failure comes with what its container said last (the termination message of
    /// its newest failed Pod): "backup file … not found", not only "reached the specified
    /// backoff limit"; a running Job's, when a Pod of it failed, in `retrying_after`.
    pub fn with_pods<'a>(mut self, pods: impl IntoIterator<Item = &'a Pod> + Clone) -> SeenJob {
        if let Some(ended) = succeeded_at(pods.clone(), &self.name) {
            self.state = JobState::Succeeded(Some(ended));
            return self;
        }
        let said = last_words(pods, &self.name);
        match &mut self.state {
            JobState::Failed { message, .. } => {
                if let Some(said) = said {
                    *message = format!("{message}; its container said: {said}");
                }
            }
            JobState::Running => self.retrying_after = said,
            JobState::Succeeded(_) => {}
        }
        self
    }

    /// When it finished, and whether it succeeded; `None` while it runs.
    pub fn finished(&self) -> Option<(Option<Timestamp>, bool)> {
        match &self.state {
            JobState::Running => None,
            JobState::Succeeded(at) => Some((at.as_ref().map(|t| t.0), true)),
            JobState::Failed { at, .. } => Some((at.as_ref().map(|t| t.0), false)),
        }
    }
}

/// The Pods among `pods` that Job `job` made.
fn of_job<'a>(pods: impl IntoIterator<Item = &'a Pod>, job: &str) -> impl Iterator<Item = &'a Pod> {
    pods.into_iter().filter(move |pod| {
        pod.labels()
            .get("batch.kubernetes.io/job-name")
            .map(String::as_str)
            == Some(job)
    })
}

/// When the last container of a succeeded Pod of Job `job` ended.
fn succeeded_at<'a>(pods: impl IntoIterator<Item = &'a Pod>, job: &str) -> Option<Time> {
    of_job(pods, job)
        .filter_map(|pod| pod.status.as_ref())
        .filter(|status| status.phase.as_deref() == Some("Succeeded"))
        .filter_map(|status| {
            status
                .container_statuses
                .iter()
                .flatten()
                .filter_map(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at.clone())
                .max_by_key(|at| at.0)
        })
        .min_by_key(|at| at.0)
}

/// The last line a failed container of Job `job` left in its termination message (with
/// `FallbackToLogsOnError`, the tail of its log), from the newest such Pod.
fn last_words<'a>(pods: impl IntoIterator<Item = &'a Pod>, job: &str) -> Option<String> {
    of_job(pods, job)
        .filter_map(|pod| {
            let statuses = pod.status.as_ref()?;
            let containers = statuses
                .init_container_statuses
                .iter()
                .chain(&statuses.container_statuses)
                .flatten();
            let said = containers
                .filter_map(|c| c.state.as_ref()?.terminated.as_ref())
                .filter(|terminated| terminated.exit_code != 0)
                .filter_map(|terminated| terminated.message.as_deref())
                .filter_map(|message| message.lines().rev().find(|line| !line.trim().is_empty()))
                .next()?;
            Some((pod.creation_timestamp(), said.trim().to_owned()))
        })
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, said)| said)
}

/// The finished Jobs beyond the newest `keep_succeeded` succeeded and `keep_failed` failed: the
/// history to delete.
pub fn beyond_history<'a>(
    jobs: impl IntoIterator<Item = &'a SeenJob>,
    keep_succeeded: usize,
    keep_failed: usize,
) -> Vec<String> {
    let mut succeeded = Vec::new();
    let mut failed = Vec::new();
    for job in jobs {
        match job.finished() {
            Some((at, true)) => succeeded.push((at, job.name.as_str())),
            Some((at, false)) => failed.push((at, job.name.as_str())),
            None => {}
        }
    }
    let mut old = Vec::new();
    for (mut finished, keep) in [(succeeded, keep_succeeded), (failed, keep_failed)] {
        finished.sort_by(|a, b| b.cmp(a));
        old.extend(
            finished
                .iter()
                .skip(keep)
                .map(|(_, name)| (*name).to_owned()),
        );
    }
    old
}

/// A Job that finished after the last one of its outcome a status recorded.
pub struct NewlyFinished<'a, J> {
    pub job: &'a J,
    pub at: Timestamp,
    pub succeeded: bool,
}

/// The Jobs that finished after `last_succeeded` (if they succeeded) or `last_failed` (if they
/// failed), oldest first: the ones a status that recorded everything up to then has not. A Job
/// with no finish time is never recorded.
pub fn newly_finished<'a, J>(
    jobs: &'a [J],
    seen: impl Fn(&J) -> &SeenJob,
    last_succeeded: Option<&Time>,
    last_failed: Option<&Time>,
) -> Vec<NewlyFinished<'a, J>> {
    let mut newer: Vec<NewlyFinished<'a, J>> = jobs
        .iter()
        .filter_map(|job| {
            let (at, succeeded) = seen(job).finished()?;
            let at = at?;
            let recorded = if succeeded {
                last_succeeded
            } else {
                last_failed
            };
            (recorded.is_none_or(|t| at > t.0)).then_some(NewlyFinished { job, at, succeeded })
        })
        .collect();
    newer.sort_by_key(|finished| finished.at);
    newer
}

/// Which finished Jobs an object's events and metrics have announced, by when its latest
/// succeeded and failed Jobs finished. A pass reading the object from a cache that does not yet
/// show the status written with them records them again (the same status), but must not count or
/// announce them twice. Kept in the object's memory.
#[derive(Default)]
pub struct Announced {
    succeeded: Option<Timestamp>,
    failed: Option<Timestamp>,
}

#[derive(Clone, Copy)]
pub enum Outcome {
    Succeeded,
    Failed,
}

impl Announced {
    /// Whether the Job that ended with `outcome` at `at` is announced for the first time (and
    /// remembers it).
    pub fn first(&mut self, outcome: Outcome, at: Option<&Time>) -> bool {
        let at = at.map(|t| t.0);
        let slot = match outcome {
            Outcome::Succeeded => &mut self.succeeded,
            Outcome::Failed => &mut self.failed,
        };
        if at.is_some() && *slot >= at {
            return false;
        }
        *slot = at;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed_job() -> SeenJob {
        SeenJob::new(
            "db-restore",
            JobState::Failed {
                at: None,
                reason: "BackoffLimitExceeded".into(),
                message: "Job has reached the specified backoff limit".into(),
            },
        )
    }

    fn pod(job: &str, exit_code: i32, message: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": { "name": format!("{job}-x"), "labels": { "batch.kubernetes.io/job-name": job } },
            "status": { "containerStatuses": [{
                "name": "restore", "image": "postgres:15", "imageID": "", "ready": false, "restartCount": 0,
                "state": { "terminated": { "exitCode": exit_code, "message": message } }
            }]}
        }))
        .expect("a Pod")
    }

    fn succeeded_pod(job: &str, finished_at: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": { "name": format!("{job}-y"), "labels": { "batch.kubernetes.io/job-name": job } },
            "status": { "phase": "Succeeded", "containerStatuses": [{
                "name": "backup", "image": "etcd", "imageID": "", "ready": false, "restartCount": 0,
                "state": { "terminated": { "exitCode": 0, "finishedAt": finished_at } }
            }]}
        }))
        .expect("a Pod")
    }

    fn at(time: &str) -> Option<Time> {
        Some(Time(time.parse().expect("a time")))
    }

    #[test]
    fn a_job_whose_pod_succeeded_succeeded_then() {
        let pods = [
            succeeded_pod("backup-1", "2026-12-04T10:00:05Z"),
            succeeded_pod("other", "2026-12-04T09:00:00Z"),
        ];
        let running = SeenJob::new("backup-1", JobState::Running);
        assert_eq!(
            running.with_pods(&pods).state,
            JobState::Succeeded(at("2026-12-04T10:00:05Z")),
            "before the Job controller writes Complete"
        );
        let complete = SeenJob::new("backup-1", JobState::Succeeded(at("2026-12-04T10:00:07Z")));
        assert_eq!(
            complete.clone().with_pods(&pods).state,
            JobState::Succeeded(at("2026-12-04T10:00:05Z")),
            "the time recorded before Complete arrived does not move"
        );
        assert_eq!(
            complete.clone().with_pods(&pods[1..]).state,
            complete.state,
            "without its Pod, the Job's own completion"
        );
        let still =
            SeenJob::new("backup-1", JobState::Running).with_pods(&[pod("backup-1", 1, "x")]);
        assert_eq!(still.state, JobState::Running, "a failed Pod is no success");
    }

    #[test]
    fn a_failed_job_says_what_its_container_said_last() {
        let pods = [
            pod(
                "db-restore",
                1,
                "pg_restore: error\nrestore.sh: backup file /backups/x.dump not found\n",
            ),
            pod("other", 1, "not this one"),
        ];
        let JobState::Failed { message, .. } = failed_job().with_pods(&pods).state else {
            panic!("still failed");
        };
        assert_eq!(
            message,
            "Job has reached the specified backoff limit; its container said: restore.sh: backup file /backups/x.dump not found"
        );
        let quiet = [pod("db-restore", 0, "all good")];
        let JobState::Failed { message, .. } = failed_job().with_pods(&quiet).state else {
            panic!("still failed");
        };
        assert_eq!(
            message, "Job has reached the specified backoff limit",
            "a container that succeeded is no explanation"
        );
    }

    #[test]
    fn a_running_job_says_why_its_last_pod_failed() {
        let running = || SeenJob::new("db-restore", JobState::Running);
        let pods = [pod(
            "db-restore",
            75,
            "restore.sh: PostgreSQL at db:5432 did not accept connections within 60 s",
        )];
        assert_eq!(
            running().with_pods(&pods).retrying_after.as_deref(),
            Some("restore.sh: PostgreSQL at db:5432 did not accept connections within 60 s")
        );
        assert_eq!(running().with_pods(&[]).retrying_after, None);
    }
}
