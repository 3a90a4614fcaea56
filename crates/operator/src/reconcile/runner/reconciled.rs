//! The contract of one reconcile: the object resolved once going in ([`Target`]), the status,
//! failure, events and requeue coming out ([`Reconciled`]).

use std::fmt::Debug;

use app_operator_api::conditions::HasConditions;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;

use super::{Cached, Shared, key};
use crate::reconcile::Error;
use crate::reconcile::apply::controller_reference;

/// A primary kind whose status the runner writes.
pub trait HasStatus {
    type Status: PartialEq + serde::Serialize + HasConditions + Send + Sync;

    fn status(&self) -> Option<&Self::Status>;

    /// Sets what changes only when the status is written (e.g. `lastUpdateTime`).
    fn stamp(_status: &mut Self::Status) {}
}

/// The object a reconcile works on, resolved once by the runner.
pub struct Target<'a, K> {
    pub object: &'a K,
    pub name: String,
    pub namespace: String,
    pub uid: String,
    /// The controller reference its children carry.
    pub owner: OwnerReference,
    /// `namespace/name`, the key of per-object state.
    pub key: String,
    pub shared: &'a Shared,
}

impl<'a, K: Cached> Target<'a, K> {
    pub(super) fn resolve(object: &'a K, shared: &'a Shared) -> Result<Target<'a, K>, Error> {
        let namespace = object
            .namespace()
            .ok_or(Error::MissingMetadata("namespace"))?;
        let uid = object.uid().ok_or(Error::MissingMetadata("uid"))?;
        let owner = controller_reference(object).ok_or(Error::MissingMetadata("uid"))?;
        Ok(Target {
            object,
            name: object.name_any(),
            key: key(object),
            namespace,
            uid,
            owner,
            shared,
        })
    }

    /// Being deleted.
    pub fn deleting(&self) -> bool {
        self.object.meta().deletion_timestamp.is_some()
    }
}

/// An event for the runner to publish on the reconciled object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Announcement {
    pub type_: EventType,
    pub reason: String,
    pub action: &'static str,
    pub note: String,
}

/// How a reconcile ended: the status to show (`None`: leave it, e.g. going away), its failure if
/// any, what to announce, and when to look again (on success).
pub struct Reconciled<S> {
    pub status: Option<S>,
    pub outcome: Result<(), Error>,
    pub announce: Vec<Announcement>,
    pub then: Action,
}

impl<S> Reconciled<S> {
    /// Shows `status`, reports `outcome`, then looks again as `then` says.
    pub fn status(status: S, outcome: Result<(), Error>, then: Action) -> Reconciled<S> {
        Reconciled {
            status: Some(status),
            outcome,
            announce: Vec::new(),
            then,
        }
    }

    /// Leaves the status as it is.
    pub fn unchanged(outcome: Result<Action, Error>) -> Reconciled<S> {
        let (outcome, then) = match outcome {
            Ok(then) => (Ok(()), then),
            Err(error) => (Err(error), Action::await_change()),
        };
        Reconciled {
            status: None,
            outcome,
            announce: Vec::new(),
            then,
        }
    }

    pub fn announcing(mut self, announce: Vec<Announcement>) -> Reconciled<S> {
        self.announce = announce;
        self
    }
}
