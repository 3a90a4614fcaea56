//! The floors of the stateful rounds start what the operator built, by hand: its objects copied
//! from its namespace into the floor's, as a person would with `kubectl get -o yaml`, an edit and
//! `kubectl create`.

use anyhow::{Context, Result, bail};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret, Service};
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// `object` for namespace `to`: its name, labels, annotations and content (`spec`, or a Secret's
/// or ConfigMap's data), without what the API server, the scheduler or the binding filled in,
/// and with cluster-DNS names in namespace `from` turned into names in `to`.
pub fn copied(object: &Value, from: &str, to: &str) -> Result<Value> {
    let mut copy = json!({ "apiVersion": object["apiVersion"], "kind": object["kind"] });
    for field in ["spec", "data", "binaryData", "stringData", "type"] {
        if !object[field].is_null() {
            copy[field] = object[field].clone();
        }
    }
    if let Some(spec) = copy["spec"].as_object_mut() {
        spec.remove("nodeName");
        spec.remove("volumeName");
        if spec.get("clusterIP").and_then(Value::as_str) != Some("None") {
            spec.remove("clusterIP");
            spec.remove("clusterIPs");
        }
    }
    let mut copy: Value = serde_json::from_str(
        &copy
            .to_string()
            .replace(&format!(".{from}."), &format!(".{to}.")),
    )?;
    let metadata = &object["metadata"];
    // A claim's annotations are its binding's: a copy that kept them would say it is bound.
    let annotations = if object["kind"] == "PersistentVolumeClaim" {
        Value::Null
    } else {
        metadata["annotations"].clone()
    };
    copy["metadata"] = json!({
        "name": metadata["name"], "labels": metadata["labels"], "annotations": annotations
    });
    Ok(copy)
}

/// A namespaced kind the harness reads and creates, typed.
pub trait Namespaced:
    kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
    + Clone
    + DeserializeOwned
    + serde::Serialize
    + std::fmt::Debug
{
}

impl<K> Namespaced for K where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug
{
}

/// Creates `copy` (from [`copied`]) in `namespace`.
pub async fn create(client: &Client, namespace: &str, copy: Value) -> Result<()> {
    async fn made<K: Namespaced>(client: &Client, namespace: &str, copy: Value) -> Result<()> {
        let object: K = serde_json::from_value(copy)?;
        let name = object.name_any();
        Api::<K>::namespaced(client.clone(), namespace)
            .create(&PostParams::default(), &object)
            .await
            .with_context(|| format!("creating the copy of {name}"))?;
        Ok(())
    }
    match copy["kind"].as_str().unwrap_or_default() {
        "Secret" => made::<Secret>(client, namespace, copy).await,
        "ConfigMap" => made::<ConfigMap>(client, namespace, copy).await,
        "PersistentVolumeClaim" => made::<PersistentVolumeClaim>(client, namespace, copy).await,
        "Service" => made::<Service>(client, namespace, copy).await,
        "StatefulSet" => made::<StatefulSet>(client, namespace, copy).await,
        "Pod" => made::<Pod>(client, namespace, copy).await,
        kind => bail!("no copy of a {kind} is made"),
    }
}

/// The Pod `job` runs, as a Pod of its own (named after the Job).
pub fn job_pod(job: &Job) -> Value {
    let template = job
        .spec
        .as_ref()
        .map(|spec| spec.template.clone())
        .unwrap_or_default();
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": job.metadata.name,
            "labels": template.metadata.as_ref().and_then(|m| m.labels.clone()),
        },
        "spec": template.spec,
    })
}

/// Waits until Pod `name` has run to the end; an error if it failed.
pub async fn until_succeeded(
    pods: &Api<Pod>,
    name: &str,
    timeout: std::time::Duration,
) -> Result<()> {
    let phase = super::cluster::wait_for(timeout, || async {
        let phase = pods.get(name).await.ok()?.status?.phase?;
        ["Succeeded", "Failed"]
            .contains(&phase.as_str())
            .then_some(phase)
    })
    .await
    .with_context(|| format!("Pod {name} did not finish"))?;
    if phase != "Succeeded" {
        bail!("Pod {name} failed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copied_claim_is_unbound_and_a_copied_secret_keeps_its_data() {
        let claim = json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": { "name": "c", "annotations": { "pv.kubernetes.io/bind-completed": "yes" } },
            "spec": { "volumeName": "pvc-1", "accessModes": ["ReadWriteOnce"] }
        });
        let copy = copied(&claim, "a", "b").unwrap();
        assert_eq!(copy["metadata"]["annotations"], Value::Null);
        assert_eq!(copy["spec"], json!({ "accessModes": ["ReadWriteOnce"] }));
        let secret = json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": { "name": "s" },
            "type": "Opaque", "data": { "password": "cA==" }
        });
        let copy = copied(&secret, "a", "b").unwrap();
        assert_eq!(
            (&copy["type"], &copy["data"]),
            (&json!("Opaque"), &json!({ "password": "cA==" }))
        );
    }
}
