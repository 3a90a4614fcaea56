//! Applying children with server-side apply, and refusing to take over objects we do not own.

use std::fmt::Debug;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, GetParams, Patch};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{Error, FIELD_MANAGER, apply_params};

/// Annotation holding a digest of the configuration last applied to a child. With the child's
/// cached state it tells whether an apply would change anything, so reconciles woken by a
/// child's status (a Deployment rolling out) send no request at all.
pub const APPLIED_DIGEST_ANNOTATION: &str = "app-operator.example.com/applied-digest";

/// How applying a child changed it, for events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    Created,
    Changed,
    Unchanged,
}

/// Whether `object` is controlled by the owner with `owner_uid`.
pub fn is_controlled_by(object: &impl Resource, owner_uid: &str) -> bool {
    controls(object.meta(), owner_uid)
}

/// The cached objects in `namespace` controlled by the owner with `owner_uid`.
pub fn controlled<C>(
    store: &kube::runtime::reflector::Store<C>,
    namespace: &str,
    owner_uid: &str,
) -> Vec<std::sync::Arc<C>>
where
    C: Resource + Clone,
    C::DynamicType: Eq + std::hash::Hash + Clone,
{
    store
        .state()
        .into_iter()
        .filter(|object| {
            object.meta().namespace.as_deref() == Some(namespace)
                && is_controlled_by(object.as_ref(), owner_uid)
        })
        .collect()
}

fn controls(meta: &ObjectMeta, owner_uid: &str) -> bool {
    meta.owner_references
        .iter()
        .flatten()
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
/// nothing, the child is almost always new, so it is applied without force and without a lookup
/// first (see [`apply_new`]): one request creates it. `lookup_first` is for a name known to be
/// taken by someone else's object: it is looked up (GET) instead, and left alone.
///
/// No request is sent when the cached object is ours, was last applied with this very
/// configuration (its digest annotation) and still holds every field of it (no drift): such an
/// apply is a no-op. The digest catches what the field check cannot: a field we stopped setting.
pub async fn apply_child<K>(
    api: &Api<K>,
    desired: &K,
    cached: Option<&K>,
    owner_uid: &str,
    lookup_first: bool,
) -> Result<(K, Applied), Error>
where
    K: Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned,
{
    let name = desired.name_any();
    let desired = with_digest(desired)?;
    if let Some(object) = cached
        && is_controlled_by(object, owner_uid)
        && already_applied(object, &desired)?
    {
        return Ok((object.clone(), Applied::Unchanged));
    }
    let existing = match cached {
        Some(object) => Some(object.meta().clone()),
        None if lookup_first => lookup(api, &name).await?,
        None => match apply_new(api, &desired).await {
            Ok(New::Created(created)) => return Ok((created, Applied::Created)),
            Ok(New::Ours(applied)) => return Ok((applied, Applied::Unchanged)),
            Ok(New::Foreign) => {
                return Err(Error::Conflict {
                    kind: K::kind(&()).into_owned(),
                    name,
                });
            }
            Err(source) => {
                let refused = Error::Apply {
                    kind: K::kind(&()).into_owned(),
                    name: name.clone(),
                    source,
                };
                // Nothing can be created in a namespace being deleted (or gone), so a lookup and a
                // forced apply would only be refused again (bench at N = 3000: 1.4 GETs per MyApp
                // while its namespace was deleted).
                if refused.is_namespace_gone() {
                    return Err(refused);
                }
                // A field conflict or an invalid object: look at what is there, as below. Any
                // other refusal (a shed request, a deadline) takes the same path; logged, as it
                // costs a GET.
                tracing::debug!(%refused, "unforced apply refused; looking up");
                lookup(api, &name).await?
            }
        },
    };
    if let Some(existing) = &existing
        && !controls(existing, owner_uid)
    {
        return Err(Error::Conflict {
            kind: K::kind(&()).into_owned(),
            name,
        });
    }
    let applied = api
        .patch(&name, &apply_params().force(), &Patch::Apply(&desired))
        .await
        .map_err(|source| Error::Apply {
            kind: K::kind(&()).into_owned(),
            name: name.clone(),
            source,
        })?;
    let change = match existing {
        None => Applied::Created,
        Some(before) if revision(&before) != revision(applied.meta()) => Applied::Changed,
        Some(_) => Applied::Unchanged,
    };
    Ok((applied, change))
}

/// The metadata of the object `name`, if there is one: served from the API server's watch cache,
/// which is as fresh as ours and spares etcd a read.
async fn lookup<K>(api: &Api<K>, name: &str) -> Result<Option<ObjectMeta>, Error>
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned,
{
    Ok(api
        .get_metadata_opt_with(name, &GetParams::any())
        .await
        .map_err(|source| Error::Get {
            kind: K::kind(&()).into_owned(),
            name: name.to_owned(),
            source,
        })?
        .map(|object| object.metadata))
}

/// What applying a child the cache does not hold found.
enum New<K> {
    /// Nothing: this request created it.
    Created(K),
    /// Ours: made by an earlier pass, not delivered by the watch yet.
    Ours(K),
    /// Someone else's object of that name with the same values as ours (different ones conflict):
    /// our fields were released again.
    Foreign,
}

/// Server-side applies a child the cache does not hold, without force: on a name that is free
/// (the usual case) it is created (201), with no lookup first. An object of that name (the cache
/// selects only our children, so one made by hand would not show) whose fields hold other values
/// under another manager fails the apply as a conflict, and an object with another controller
/// fails it as invalid (one controller only): the caller then looks at what is there. One whose
/// values all equal ours gets our fields merged in; unless the object is ours, they are released
/// again at once, so it is never taken over.
async fn apply_new<K>(api: &Api<K>, desired: &K) -> Result<New<K>, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned,
{
    let name = desired.name_any();
    let request = kube::core::Request::new(api.resource_url())
        .patch(&name, &apply_params(), &Patch::Apply(desired))
        .map_err(kube::Error::BuildRequest)?;
    let client = api.clone().into_client();
    let response = client.send(request.map(kube::client::Body::from)).await?;
    let status = response.status();
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await?
        .to_bytes();
    if status.is_client_error() || status.is_server_error() {
        let refusal = serde_json::from_slice::<kube::core::Status>(&body).unwrap_or_else(|_| {
            kube::core::Status::failure(&String::from_utf8_lossy(&body), "")
                .with_code(status.as_u16())
        });
        return Err(kube::Error::Api(refusal.boxed()));
    }
    let applied: K = serde_json::from_slice(&body).map_err(kube::Error::SerdeError)?;
    if status == http::StatusCode::CREATED {
        return Ok(New::Created(applied));
    }
    if !shares_fields_with_another_manager(applied.meta()) {
        return Ok(New::Ours(applied));
    }
    // Applying no fields gives up ours: fields only we held (our ownerReference, labels and
    // digest) go, the ones we shared with the object's manager stay as they were.
    let release = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": { "name": name },
    });
    api.patch(&name, &apply_params(), &Patch::Apply(&release))
        .await?;
    Ok(New::Foreign)
}

/// Whether a field manager that is not ours owns, on the object itself (not a subresource such
/// as status), a field that our apply owns too: a manager of an object made by someone else.
/// Other managers of our own children (the Deployment controller's revision annotation, an
/// autoscaler) own fields we do not set.
fn shares_fields_with_another_manager(meta: &ObjectMeta) -> bool {
    let entries: Vec<_> = meta
        .managed_fields
        .iter()
        .flatten()
        .filter(|entry| entry.subresource.as_deref().unwrap_or_default().is_empty())
        .collect();
    let leaves_of =
        |entry: &&k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry| {
            let mut leaves = std::collections::HashSet::new();
            if let Some(fields) = &entry.fields_v1 {
                field_leaves(&fields.0, String::new(), &mut leaves);
            }
            leaves
        };
    let ours: std::collections::HashSet<String> = entries
        .iter()
        .filter(|entry| entry.manager.as_deref() == Some(FIELD_MANAGER))
        .flat_map(leaves_of)
        .collect();
    entries
        .iter()
        .filter(|entry| {
            !entry
                .manager
                .as_deref()
                .is_some_and(|manager| manager.starts_with(FIELD_MANAGER))
        })
        .any(|entry| !leaves_of(entry).is_disjoint(&ours))
}

/// The paths of the fields a `fieldsV1` set names (`.` marks the set's own parent: skipped, as
/// two managers of one map's keys both have it).
fn field_leaves(set: &Value, path: String, leaves: &mut std::collections::HashSet<String>) {
    let Value::Object(fields) = set else {
        return;
    };
    for (key, inner) in fields {
        if key == "." {
            continue;
        }
        let path = format!("{path}/{key}");
        match inner {
            Value::Object(children) if !children.is_empty() => field_leaves(inner, path, leaves),
            _ => {
                leaves.insert(path);
            }
        }
    }
}

/// `desired` with the digest of its serialization in [`APPLIED_DIGEST_ANNOTATION`].
fn with_digest<K: Resource + Clone + Serialize>(desired: &K) -> Result<K, Error> {
    let bytes = serde_json::to_vec(desired).map_err(Error::Encode)?;
    let digest = ring::digest::digest(&ring::digest::SHA256, &bytes);
    // 128 bits name a configuration well enough, and keep the annotation short.
    let hex: String = digest
        .as_ref()
        .iter()
        .take(16)
        .map(|byte| format!("{byte:02x}"))
        .collect();
    let mut object = desired.clone();
    object
        .annotations_mut()
        .insert(APPLIED_DIGEST_ANNOTATION.to_owned(), hex);
    Ok(object)
}

/// Whether applying `desired` (with its digest) to `existing` would change nothing.
fn already_applied<K: Resource + Serialize>(existing: &K, desired: &K) -> Result<bool, Error> {
    let digest = |object: &K| object.annotations().get(APPLIED_DIGEST_ANNOTATION).cloned();
    if digest(existing).is_none() || digest(existing) != digest(desired) {
        return Ok(false);
    }
    let existing = serde_json::to_value(existing).map_err(Error::Encode)?;
    let desired = serde_json::to_value(desired).map_err(Error::Encode)?;
    Ok(holds(&existing, &desired))
}

/// Whether `existing` has every field of `desired` with the same value. Fields the API server
/// defaulted (present only in `existing`) do not count; lists must match element by element.
pub fn holds(existing: &Value, desired: &Value) -> bool {
    match (existing, desired) {
        (Value::Object(existing), Value::Object(desired)) => desired
            .iter()
            .all(|(key, want)| existing.get(key).is_some_and(|have| holds(have, want))),
        (Value::Array(existing), Value::Array(desired)) => {
            existing.len() == desired.len()
                && existing
                    .iter()
                    .zip(desired)
                    .all(|(have, want)| holds(have, want))
        }
        (existing, desired) => existing == desired,
    }
}

/// What changes when a child's desired state changes: the generation where the kind has one
/// (status updates by other controllers do not move it), else the resourceVersion.
fn revision(meta: &ObjectMeta) -> Option<String> {
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
        &apply_params().force(),
        &Patch::Apply(&patch),
    )
    .await
    .map(|_| ())
    .map_err(|source| Error::Status { source })
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use k8s_openapi::api::apps::v1::Deployment;
    use kube::api::{Api, ObjectMeta};
    use serde_json::json;

    use super::{apply_child, holds};
    use crate::reconcile::error::tests::namespace_refusal;

    /// A client whose API server refuses every request as the NamespaceLifecycle admission
    /// plugin does in a namespace being deleted, and keeps each request's method.
    fn namespace_being_deleted() -> (kube::Client, Arc<Mutex<Vec<String>>>) {
        let methods = Arc::new(Mutex::new(Vec::new()));
        let seen = methods.clone();
        let server = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            if let Ok(mut seen) = seen.lock() {
                seen.push(request.method().to_string());
            }
            let refusal = namespace_refusal("NamespaceTerminating");
            let response = http::Response::builder()
                .status(403)
                .header("content-type", "application/json")
                .body(kube::client::Body::from(refusal.to_string().into_bytes()));
            async move { response }
        });
        (kube::Client::new(server, "demo"), methods)
    }

    #[tokio::test]
    async fn a_child_refused_because_its_namespace_is_going_costs_one_request() {
        let (client, methods) = namespace_being_deleted();
        let desired = Deployment {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("demo".into()),
                ..ObjectMeta::default()
            },
            ..Deployment::default()
        };
        let api: Api<Deployment> = Api::namespaced(client, "demo");
        let refused = apply_child(&api, &desired, None, "owner-uid", false).await;
        assert!(
            refused.is_err_and(|error| error.is_namespace_gone()),
            "the refusal is returned as it came"
        );
        let methods = methods.lock().map(|m| m.clone()).unwrap_or_default();
        assert_eq!(methods, ["PATCH"], "no lookup, no forced apply");
    }

    #[test]
    fn server_defaults_beside_our_fields_still_hold() {
        let existing = json!({
            "spec": { "replicas": 2, "strategy": { "type": "RollingUpdate" },
                      "ports": [{ "port": 80, "protocol": "TCP" }] }
        });
        let desired = json!({ "spec": { "replicas": 2, "ports": [{ "port": 80 }] } });
        assert!(holds(&existing, &desired));
    }

    #[test]
    fn a_changed_missing_or_extra_list_element_does_not_hold() {
        let desired = json!({ "spec": { "replicas": 2, "ports": [{ "port": 80 }] } });
        for existing in [
            json!({ "spec": { "replicas": 5, "ports": [{ "port": 80 }] } }),
            json!({ "spec": { "ports": [{ "port": 80 }] } }),
            json!({ "spec": { "replicas": 2, "ports": [{ "port": 80 }, { "port": 81 }] } }),
            json!({ "spec": { "replicas": 2, "ports": [{ "port": 9999 }] } }),
        ] {
            assert!(!holds(&existing, &desired), "{existing}");
        }
    }
}
