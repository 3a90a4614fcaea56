//! The child set: the children of one kind a reconcile wants, applied with server-side apply
//! (never taking over a foreign object), and the owned ones it no longer wants removed.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use kube::api::{Api, DeleteParams, PostParams, Preconditions, PropagationPolicy};
use kube::runtime::reflector::Store;
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;

use super::Error;
use super::apply::{Applied, apply_child, is_controlled_by};
use super::compact::Compact;
use super::runner::{Cached, cached};

/// What to do when a change touches a field the API server will not change in place (a Job's
/// template, a StatefulSet's `volumeClaimTemplates`, an immutable ConfigMap's data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnImmutable {
    /// Delete the child and create it anew.
    Recreate,
    /// Leave it, and report `ImmutableFieldChanged` until the change is undone.
    Refuse,
}

/// What one pass did to one child, for events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildChange {
    pub kind: String,
    pub name: String,
    pub verb: Verb,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Created,
    Updated,
    Deleted,
}

/// The operator's children of kind `C` (its label-selected cache, kept compact) and how they
/// are changed.
pub struct Owned<C: Cached> {
    store: Store<Compact<C>>,
    on_immutable: OnImmutable,
    /// `namespace/name` of children found taken by someone else's object: until that is gone,
    /// they are looked up, not applied (each try would touch the object, see `apply_child`).
    taken: Mutex<HashSet<String>>,
}

impl<C: Cached + Serialize> Owned<C> {
    pub fn new(store: Store<Compact<C>>, on_immutable: OnImmutable) -> Owned<C> {
        Owned {
            store,
            on_immutable,
            taken: Mutex::default(),
        }
    }

    /// The cached child `name` in `namespace`. One that does not decode (it was encoded from a
    /// `C` when cached, so it always should) is logged and taken as not cached: the apply then
    /// looks, as for a child the watch has not delivered yet.
    pub fn get(&self, namespace: &str, name: &str) -> Option<C> {
        let compact = cached(&self.store, name, namespace)?;
        compact
            .decode()
            .inspect_err(|error| {
                tracing::error!(kind = %C::kind(&()), namespace, name, %error, "a cached child does not decode");
            })
            .ok()
    }

    /// Applies `desired` (in its own namespace) for the owner with `owner_uid`; a change the API
    /// server refuses as immutable is handled by this kind's [`OnImmutable`].
    pub async fn apply(
        &self,
        client: &Client,
        owner_uid: &str,
        desired: &C,
    ) -> Result<(C, Option<ChildChange>), Error> {
        let namespace = desired
            .namespace()
            .ok_or(Error::MissingMetadata("namespace"))?;
        let api: Api<C> = Api::namespaced(client.clone(), &namespace);
        let current = self.get(&namespace, &desired.name_any());
        let key = format!("{namespace}/{}", desired.name_any());
        let taken = self.taken().contains(&key);
        let applied = apply_child(&api, desired, current.as_ref(), owner_uid, taken).await;
        match &applied {
            Err(Error::Conflict { .. }) => {
                self.taken().insert(key);
            }
            Ok(_) if taken => {
                self.taken().remove(&key);
            }
            _ => {}
        }
        let (applied, change) = match applied {
            Err(error) if error.is_immutable_field() => {
                self.replace(&api, desired, current.as_ref(), owner_uid, error)
                    .await?
            }
            other => other?,
        };
        let verb = match change {
            Applied::Created => Some(Verb::Created),
            Applied::Changed => Some(Verb::Updated),
            Applied::Unchanged => None,
        };
        let change = verb.map(|verb| ChildChange {
            kind: C::kind(&()).into_owned(),
            name: desired.name_any(),
            verb,
        });
        Ok((applied, change))
    }

    fn taken(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.taken
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// An immutable field changed: re-create the child, or refuse.
    async fn replace(
        &self,
        api: &Api<C>,
        desired: &C,
        current: Option<&C>,
        owner_uid: &str,
        refusal: Error,
    ) -> Result<(C, Applied), Error> {
        let name = desired.name_any();
        let kind = C::kind(&()).into_owned();
        let uid = current.and_then(|c| c.uid());
        match (self.on_immutable, uid) {
            (OnImmutable::Recreate, Some(uid)) => {
                delete_child(api, &name, Some(&uid)).await?;
                let (created, _) = apply_child(api, desired, None, owner_uid, false).await?;
                Ok((created, Applied::Changed))
            }
            _ => Err(Error::ImmutableFieldChanged {
                kind,
                name,
                message: refusal.to_string(),
            }),
        }
    }

    /// Applies every child in `wanted` and deletes the children of this kind that `owner`
    /// controls in `namespace` but no longer wants. Returns what changed.
    pub async fn sync(
        &self,
        client: &Client,
        owner_uid: &str,
        namespace: &str,
        wanted: &[C],
    ) -> Result<Vec<ChildChange>, Error> {
        let mut changes = Vec::new();
        for desired in wanted {
            let (_, change) = self.apply(client, owner_uid, desired).await?;
            changes.extend(change);
        }
        let api: Api<C> = Api::namespaced(client.clone(), namespace);
        for orphan in self.orphans(owner_uid, namespace, wanted) {
            let (Some(uid), name) = (orphan.uid(), orphan.name_any()) else {
                continue;
            };
            delete_child(&api, &name, Some(&uid)).await?;
            changes.push(ChildChange {
                kind: C::kind(&()).into_owned(),
                name,
                verb: Verb::Deleted,
            });
        }
        Ok(changes)
    }

    /// The cached children controlled by `owner_uid` in `namespace` that are not in `wanted`.
    fn orphans(&self, owner_uid: &str, namespace: &str, wanted: &[C]) -> Vec<Arc<Compact<C>>> {
        let wanted: Vec<String> = wanted.iter().map(ResourceExt::name_any).collect();
        self.store
            .state()
            .into_iter()
            .filter(|child| {
                child.namespace().as_deref() == Some(namespace)
                    && child.meta().deletion_timestamp.is_none()
                    && is_controlled_by(child.as_ref(), owner_uid)
                    && !wanted.contains(&child.name_any())
            })
            .collect()
    }
}

/// Creates `object` under the operator's field manager; one that already exists (made by an
/// earlier pass whose answer or status write was lost, or not cached yet) counts as created: it
/// is never overwritten.
pub async fn create_child<C: Cached + Serialize>(api: &Api<C>, object: &C) -> Result<(), Error> {
    let params = PostParams {
        field_manager: Some(super::FIELD_MANAGER.into()),
        ..PostParams::default()
    };
    match api.create(&params, object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(source) => Err(Error::Create {
            kind: C::kind(&()).into_owned(),
            name: object.name_any(),
            source,
        }),
    }
}

/// Deletes the child `name` (only the object with `uid`, when given, so a re-created one is not
/// hit); one already gone counts as deleted.
pub async fn delete_child<C: Cached>(
    api: &Api<C>,
    name: &str,
    uid: Option<&str>,
) -> Result<(), Error> {
    let params = DeleteParams {
        preconditions: uid.map(|uid| Preconditions {
            uid: Some(uid.to_owned()),
            resource_version: None,
        }),
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(source) => Err(Error::Delete {
            kind: C::kind(&()).into_owned(),
            name: name.to_owned(),
            source,
        }),
    }
}

/// One line per verb for a pass's changes, e.g. "Created Deployment web, Service web".
pub fn describe(changes: &[ChildChange]) -> Vec<(Verb, String)> {
    [Verb::Created, Verb::Updated, Verb::Deleted]
        .into_iter()
        .filter_map(|verb| {
            let children: Vec<String> = changes
                .iter()
                .filter(|change| change.verb == verb)
                .map(|change| format!("{} {}", change.kind, change.name))
                .collect();
            (!children.is_empty()).then(|| (verb, format!("{verb:?} {}", children.join(", "))))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(kind: &str, verb: Verb) -> ChildChange {
        ChildChange {
            kind: kind.into(),
            name: "web".into(),
            verb,
        }
    }

    #[test]
    fn one_line_per_verb_in_a_fixed_order() {
        let lines = describe(&[
            change("HorizontalPodAutoscaler", Verb::Deleted),
            change("Deployment", Verb::Created),
            change("Service", Verb::Created),
        ]);
        assert_eq!(
            lines,
            [
                (
                    Verb::Created,
                    "Created Deployment web, Service web".to_owned()
                ),
                (
                    Verb::Deleted,
                    "Deleted HorizontalPodAutoscaler web".to_owned()
                ),
            ]
        );
        assert!(describe(&[]).is_empty());
    }
}
