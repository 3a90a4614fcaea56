//! Jobs a controller runs (backups, restores, upgrades): where one stands, creating one exactly
//! once per name, keeping a bounded history of finished ones, announcing each finished one once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::reflector::Store;
use serde_json::json;

use super::Error;
use super::apply::is_controlled_by;
use super::children::delete_child;
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

/// Finished Jobs, newest first, each with when it finished.
#[derive(Default)]
pub struct Finished {
    pub succeeded: Vec<(Option<Time>, Arc<Job>)>,
    pub failed: Vec<(Option<Time>, Arc<Job>)>,
}

impl Finished {
    pub fn of(jobs: &[(Arc<Job>, JobState)]) -> Finished {
        let mut finished = Finished::default();
        for (job, state) in jobs {
            match state {
                JobState::Succeeded(at) => finished.succeeded.push((at.clone(), job.clone())),
                JobState::Failed { at, .. } => finished.failed.push((at.clone(), job.clone())),
                JobState::Running => {}
            }
        }
        let newest_first = |a: &(Option<Time>, Arc<Job>), b: &(Option<Time>, Arc<Job>)| {
            b.0.as_ref().map(|t| t.0).cmp(&a.0.as_ref().map(|t| t.0))
        };
        finished.succeeded.sort_by(newest_first);
        finished.failed.sort_by(newest_first);
        finished
    }

    /// The succeeded (then failed) Jobs that finished after `after`, oldest first: the ones not
    /// recorded yet by a status that recorded everything up to `after`.
    pub fn newer(
        list: &[(Option<Time>, Arc<Job>)],
        after: Option<&Time>,
    ) -> Vec<(Option<Time>, Arc<Job>)> {
        let after = after.map(|t| t.0);
        list.iter()
            .rev()
            .filter(|(at, _)| at.as_ref().map(|t| t.0) > after)
            .cloned()
            .collect()
    }

    /// Deletes the Jobs beyond the newest `keep_succeeded` succeeded and `keep_failed` failed.
    pub async fn trim(
        &self,
        api: &Api<Job>,
        keep_succeeded: usize,
        keep_failed: usize,
    ) -> Result<(), Error> {
        let old = self
            .succeeded
            .iter()
            .skip(keep_succeeded)
            .chain(self.failed.iter().skip(keep_failed));
        for (_, job) in old {
            delete_child(api, &job.name_any(), job.uid().as_deref()).await?;
        }
        Ok(())
    }
}

/// Which finished Jobs each object's events and metrics have announced, by when its latest
/// succeeded and failed Jobs finished. A pass reading the object from a cache that does not yet
/// show the status written with them records them again (the same status), but must not count or
/// announce them twice.
#[derive(Default)]
pub struct Announced(Mutex<HashMap<String, Latest>>);

#[derive(Default)]
struct Latest {
    succeeded: Option<Timestamp>,
    failed: Option<Timestamp>,
}

#[derive(Clone, Copy)]
pub enum Outcome {
    Succeeded,
    Failed,
}

impl Announced {
    /// Whether the Job of `key` (`namespace/name`) that ended with `outcome` at `at` is announced
    /// for the first time (and remembers it).
    pub fn first(&self, key: &str, outcome: Outcome, at: Option<&Time>) -> bool {
        let at = at.map(|t| t.0);
        let mut announced = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let latest = announced.entry(key.to_owned()).or_default();
        let slot = match outcome {
            Outcome::Succeeded => &mut latest.succeeded,
            Outcome::Failed => &mut latest.failed,
        };
        if at.is_some() && *slot >= at {
            return false;
        }
        *slot = at;
        true
    }

    /// Drops what is remembered of `key` (the object is gone).
    pub fn forget(&self, key: &str) {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .remove(key);
    }
}
