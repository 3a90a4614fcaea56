//! Children as the caches keep them: metadata typed, the rest as compact JSON.
//!
//! A typed child is mostly empty room: k8s-openapi's `Deployment` reserves every optional field
//! of a Pod template inline, so one of ours held 9.0 KB of heap in the store (managedFields
//! already dropped), 2.2 KB as JSON. Selectors, owners and names are read on every event, so the
//! metadata stays typed; the spec and status are read once per reconcile, by decoding.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer, Serialize};

/// A cached object of kind `K`: its metadata, and everything else as compact JSON.
pub struct Compact<K> {
    metadata: ObjectMeta,
    /// `K` serialized with its metadata left empty (`"metadata":{}`): `apiVersion`, `kind`,
    /// `spec`, `status`.
    body: Box<str>,
    kind: PhantomData<fn() -> K>,
}

impl<K: Resource + Serialize + DeserializeOwned> Compact<K> {
    /// `object` kept compact.
    pub fn new(mut object: K) -> Result<Compact<K>, serde_json::Error> {
        let metadata = std::mem::take(object.meta_mut());
        Ok(Compact {
            metadata,
            body: serde_json::to_string(&object)?.into_boxed_str(),
            kind: PhantomData,
        })
    }

    /// The whole object, typed again.
    pub fn decode(&self) -> Result<K, serde_json::Error> {
        let mut object: K = serde_json::from_str(&self.body)?;
        *object.meta_mut() = self.metadata.clone();
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

    /// What the cache keeps decodes to what the API server sent, every field of it.
    #[test]
    fn a_compact_child_decodes_to_the_object_it_was_made_from() {
        let sent: Deployment = serde_json::from_value(deployment()).expect("a Deployment");
        let cached: Compact<Deployment> =
            serde_json::from_value(deployment()).expect("a Deployment, compacted");
        assert_eq!(cached.meta().name.as_deref(), Some("web"));
        assert!(!cached.body.contains("ownerReferences"), "{}", cached.body);
        assert_eq!(cached.decode().expect("decodes"), sent);
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
