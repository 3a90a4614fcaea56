//! Applying children with server-side apply, and refusing to take over objects we do not own.

use std::fmt::Debug;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Error, FIELD_MANAGER};

/// How applying a child changed it, for events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    Created,
    Changed,
    Unchanged,
}

/// Whether `object` is controlled by the owner with `owner_uid`.
pub fn is_controlled_by(object: &impl Resource, owner_uid: &str) -> bool {
    object
        .owner_references()
        .iter()
        .any(|r| r.controller == Some(true) && r.uid == owner_uid)
}

/// A controller ownerReference to `owner` (`blockOwnerDeletion`, so foreground deletion of the
/// owner waits for the child).
pub fn controller_reference<K: Resource<DynamicType = ()>>(owner: &K) -> Option<OwnerReference> {
    let mut reference = owner.controller_owner_ref(&())?;
    reference.block_owner_deletion = Some(true);
    Some(reference)
}

/// Server-side applies `desired` (forcing our field manager's ownership, which reverts drift).
///
/// `cached` is what the watch cache holds under that name. An object that exists but is not
/// controlled by `owner_uid` is never taken over: that is [`Error::Conflict`]. When the cache has
/// nothing, one GET rules out an object the cache does not select (e.g. made by hand).
pub async fn apply_child<K>(
    api: &Api<K>,
    desired: &K,
    cached: Option<&K>,
    owner_uid: &str,
) -> Result<(K, Applied), Error>
where
    K: Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned,
{
    let name = desired.name_any();
    let existing = match cached {
        Some(object) => Some(object.clone()),
        None => api.get_opt(&name).await.map_err(|source| Error::Get {
            kind: K::kind(&()).into_owned(),
            name: name.clone(),
            source,
        })?,
    };
    if let Some(existing) = &existing
        && !is_controlled_by(existing, owner_uid)
    {
        return Err(Error::Conflict {
            kind: K::kind(&()).into_owned(),
            name,
        });
    }
    let applied = api
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(desired),
        )
        .await
        .map_err(|source| Error::Apply {
            kind: K::kind(&()).into_owned(),
            name: name.clone(),
            source,
        })?;
    let change = match existing {
        None => Applied::Created,
        Some(before) if revision(&before) != revision(&applied) => Applied::Changed,
        Some(_) => Applied::Unchanged,
    };
    Ok((applied, change))
}

/// What changes when a child's desired state changes: the generation where the kind has one
/// (status updates by other controllers do not move it), else the resourceVersion.
fn revision(object: &impl Resource) -> Option<String> {
    let meta = object.meta();
    meta.generation
        .map(|g| g.to_string())
        .or_else(|| meta.resource_version.clone())
}

/// Server-side applies `status` to the status subresource of `object`.
pub async fn apply_status<K, S>(client: &kube::Client, object: &K, status: &S) -> Result<(), Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + Debug
        + DeserializeOwned,
    S: Serialize,
{
    let namespace = object
        .namespace()
        .ok_or(Error::MissingMetadata("namespace"))?;
    let api: Api<K> = Api::namespaced(client.clone(), &namespace);
    let patch = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    api.patch_status(
        &object.name_any(),
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await
    .map(|_| ())
    .map_err(|source| Error::Status { source })
}
