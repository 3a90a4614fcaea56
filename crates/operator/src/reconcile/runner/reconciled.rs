//! The contract of one reconcile: the object resolved once going in ([`Target`]), the status,
//! failure, events and requeue coming out ([`Reconciled`]).

use std::fmt::Debug;

use app_operator_api::conditions::HasConditions;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;

use super::{Cached, Remembered, Shared, key};
use crate::reconcile::Error;
use crate::reconcile::apply::controller_reference;
use crate::reconcile::memory::PerObject;

/// A primary kind whose status the runner writes.
pub trait HasStatus {
    type Status: PartialEq + serde::Serialize + HasConditions + Send + Sync;

    fn status(&self) -> Option<&Self::Status>;

    /// Sets what changes only when the status is written (e.g. `lastUpdateTime`).
    fn stamp(_status: &mut Self::Status) {}
}

/// The object a reconcile works on, resolved once by the runner, with what its controller
/// remembers (`M`, see [`Target::remember`]).
pub struct Target<'a, K, M = ()> {
    pub object: &'a K,
    pub name: String,
    pub namespace: String,
    pub uid: String,
    /// The controller reference its children carry.
    pub owner: OwnerReference,
    /// `namespace/name`, the key of per-object state.
    pub key: String,
    pub shared: &'a Shared,
    memory: &'a PerObject<Remembered<M>>,
}

impl<'a, K: Cached, M: Default> Target<'a, K, M> {
    pub(super) fn resolve(
        object: &'a K,
        shared: &'a Shared,
        memory: &'a PerObject<Remembered<M>>,
    ) -> Result<Target<'a, K, M>, Error> {
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
            memory,
        })
    }

    /// Runs `f` on what the controller remembers about this object (dropped with the object).
    pub fn remember<R>(&self, f: impl FnOnce(&mut M) -> R) -> R {
        self.memory
            .with(&self.key, |remembered| f(&mut remembered.own))
    }

    /// Runs `f` on what the controller remembers about this object and, in the same step,
    /// about each of its other objects (by key).
    pub fn remember_among<R>(
        &self,
        f: impl FnOnce(&mut M, &mut dyn Iterator<Item = (&str, &mut M)>) -> R,
    ) -> R {
        self.memory.each(|all| {
            let mut own = all.remove(&self.key).unwrap_or_default();
            let mut others = all
                .iter_mut()
                .map(|(key, remembered)| (key.as_str(), &mut remembered.own));
            let result = f(&mut own.own, &mut others);
            all.insert(self.key.clone(), own);
            result
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
