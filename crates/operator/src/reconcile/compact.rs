//! Children as the caches keep them: what every event reads typed, the rest as compact JSON.
//!
//! A typed child is mostly empty room: k8s-openapi's `Deployment` reserves every optional field
//! of a Pod template inline, so one of ours held 9.0 KB of heap in the store (managedFields
//! already dropped), 2.2 KB as JSON. Its labels and annotations, typed, are a B-tree node each
//! (room for eleven entries, about 0.5 KB, for the two or three a child has). Names, owners and
//! the deletion mark are read on every event (the store's key, the owner to wake, orphans), so
//! they stay typed; the rest is read once per reconcile, by decoding.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer, Serialize};

/// A cached object of kind `K`: the metadata every event reads, and everything else as
/// compact JSON.
pub struct Compact<K> {
    /// Name, namespace, uid, resourceVersion, owners and deletion timestamp; nothing else.
    metadata: ObjectMeta,
    /// `K` serialized with the rest of its metadata (labels, annotations, generation, …):
    /// `apiVersion`, `kind`, `metadata`, `spec`, `status`.
    body: Box<str>,
    kind: PhantomData<fn() -> K>,
}

impl<K: Resource + Serialize + DeserializeOwned> Compact<K> {
    /// `object` kept compact; its managed fields dropped, as every cache drops them (never read).
    pub fn new(mut object: K) -> Result<Compact<K>, serde_json::Error> {
        let rest = object.meta_mut();
        let metadata = ObjectMeta {
            name: rest.name.take(),
            namespace: rest.namespace.take(),
            uid: rest.uid.take(),
            resource_version: rest.resource_version.take(),
            owner_references: rest.owner_references.take(),
            deletion_timestamp: rest.deletion_timestamp.take(),
            ..ObjectMeta::default()
        };
        rest.managed_fields = None;
        Ok(Compact {
            metadata,
            body: serde_json::to_string(&object)?.into_boxed_str(),
            kind: PhantomData,
        })
    }

    /// The whole object, typed again.
    pub fn decode(&self) -> Result<K, serde_json::Error> {
        let mut object: K = serde_json::from_str(&self.body)?;
        let ObjectMeta {
            name,
            namespace,
            uid,
            resource_version,
            owner_references,
            deletion_timestamp,
            ..
        } = self.metadata.clone();
        let meta = object.meta_mut();
        meta.name = name;
        meta.namespace = namespace;
        meta.uid = uid;
        meta.resource_version = resource_version;
        meta.owner_references = owner_references;
        meta.deletion_timestamp = deletion_timestamp;
        Ok(object)
    }
}

/// Decodes as `K` does (an object that is not a valid `K` fails the same way), then compacts.
impl<'de, K: Resource + Serialize + DeserializeOwned> Deserialize<'de> for Compact<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let object = K::deserialize(deserializer)?;
        Compact::new(object).map_err(D::Error::custom)
    }
}

impl<K> Clone for Compact<K> {
    fn clone(&self) -> Self {
        Compact {
            metadata: self.metadata.clone(),
            body: self.body.clone(),
            kind: PhantomData,
        }
    }
}

impl<K> fmt::Debug for Compact<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Compact")
            .field("metadata", &self.metadata)
            .field("body", &self.body)
            .finish()
    }
}

/// The API of `K`: a watch of `Compact<K>` lists and watches `K`.
impl<K: Resource<DynamicType = ()>> Resource for Compact<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(_: &()) -> Cow<'_, str> {
        K::kind(&())
    }

    fn group(_: &()) -> Cow<'_, str> {
        K::group(&())
    }

    fn version(_: &()) -> Cow<'_, str> {
        K::version(&())
    }

    fn api_version(_: &()) -> Cow<'_, str> {
        K::api_version(&())
    }

    fn plural(_: &()) -> Cow<'_, str> {
        K::plural(&())
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::apps::v1::Deployment;
    use serde_json::{Value, json};

    use super::*;

    fn deployment() -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "web", "namespace": "demo", "uid": "u1",
                "labels": { "app.kubernetes.io/name": "web" },
                "ownerReferences": [{ "apiVersion": "example.com/v1", "kind": "MyApp",
                    "name": "web", "uid": "owner", "controller": true }],
            },
            "spec": {
                "replicas": 2,
                "selector": { "matchLabels": { "app.kubernetes.io/name": "web" } },
                "template": { "spec": { "containers": [{ "name": "app", "image": "nginx:1.27",
                    "terminationMessagePath": "/dev/termination-log" }] } },
            },
            "status": { "observedGeneration": 3, "readyReplicas": 2 },
        })
    }

    /// What the cache keeps decodes to what the API server sent, every field of it; what events
    /// read is typed, labels and annotations are not.
    #[test]
    fn a_compact_child_decodes_to_the_object_it_was_made_from() {
        let sent: Deployment = serde_json::from_value(deployment()).expect("a Deployment");
        let cached: Compact<Deployment> =
            serde_json::from_value(deployment()).expect("a Deployment, compacted");
        assert_eq!(cached.meta().name.as_deref(), Some("web"));
        assert_eq!(cached.meta().uid.as_deref(), Some("u1"));
        assert!(cached.meta().owner_references.is_some());
        assert_eq!(cached.meta().labels, None);
        assert!(!cached.body.contains("ownerReferences"), "{}", cached.body);
        assert!(
            cached.body.contains("app.kubernetes.io/name"),
            "{}",
            cached.body
        );
        assert_eq!(cached.decode().expect("decodes"), sent);
    }

    /// Managed fields are never read from a cache, so they are not kept, neither typed nor in
    /// the body.
    #[test]
    fn a_compact_child_keeps_no_managed_fields() {
        let mut sent = deployment();
        sent["metadata"]["managedFields"] = json!([{ "manager": "kubectl", "operation": "Update",
            "fieldsType": "FieldsV1", "fieldsV1": { "f:spec": { "f:replicas": {} } } }]);
        let cached: Compact<Deployment> =
            serde_json::from_value(sent).expect("a Deployment, compacted");
        assert!(!cached.body.contains("kubectl"), "{}", cached.body);
        let decoded = cached.decode().expect("decodes");
        assert_eq!(decoded.metadata.managed_fields, None);
        let without: Deployment = serde_json::from_value(deployment()).expect("a Deployment");
        assert_eq!(decoded, without);
    }

    /// An object that is not a valid `K` is refused as `K` refuses it.
    #[test]
    fn an_invalid_child_fails_to_decode_as_its_kind_does() {
        let mut invalid = deployment();
        invalid["spec"]["replicas"] = json!("two");
        assert!(serde_json::from_value::<Deployment>(invalid.clone()).is_err());
        assert!(serde_json::from_value::<Compact<Deployment>>(invalid).is_err());
    }
}
