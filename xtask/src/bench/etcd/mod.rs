//! The stateful round on the real node: an EtcdCluster scaled 0 → 3 → 5 → 3 members by the
//! operator, then the same steps by hand (the floor): the operator's own member Pods and Services,
//! copied into another namespace, started and joined through etcd's member API one at a time as
//! a person with `etcdctl` and `kubectl` would (add a learner, start its Pod, promote it; remove a
//! member, delete its Pod). Both are timed to the same end: every Pod Ready, none terminating,
//! and etcd listing exactly that many started voting members; the operator's also to its
//! `Ready` condition, which is what its user waits for.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use app_operator::api::EtcdCluster;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde::Serialize;
use serde_json::{Value, json};
use testkit::etcd_store::EtcdStore;

use super::cluster::{delete_namespace, ensure_namespace, wait_for};
use super::process::Operator;

const CLUSTER: &str = "bench-etcd";
const OPERATOR_NAMESPACE: &str = "bench-etcd-operator";
const FLOOR_NAMESPACE: &str = "bench-etcd-floor";
/// The sizes the cluster goes through, from none.
const SIZES: [usize; 3] = [3, 5, 3];
/// Longest a step may take (image pulls are local; a member starts in seconds).
const STEP_TIMEOUT: Duration = Duration::from_secs(300);

/// One pass: each step's seconds by the operator and by hand.
#[derive(Serialize)]
pub struct EtcdPass {
    pub steps: Vec<EtcdStep>,
}

#[derive(Serialize)]
pub struct EtcdStep {
    /// "0 → 3" and so on.
    pub name: String,
    pub operator_seconds: f64,
    pub floor_seconds: f64,
}

impl EtcdStep {
    pub fn ratio(&self) -> f64 {
        self.operator_seconds / self.floor_seconds
    }
}

/// The operator's member Pods and Services, as it built them, for the floor to start by hand.
#[derive(Default)]
struct Built {
    services: Vec<Value>,
    /// Every member Pod the operator created, by name.
    pods: BTreeMap<String, Value>,
    /// The members each step ends with, in the order the operator added them.
    members_after: Vec<Vec<String>>,
}

/// One operator pass, then one floor pass of the same steps.
pub async fn etcd_pass(admin: &Client, operator: &Operator) -> Result<EtcdPass> {
    // What a pass that failed left behind.
    delete_namespace(admin, OPERATOR_NAMESPACE).await?;
    delete_namespace(admin, FLOOR_NAMESPACE).await?;
    let (operator_seconds, built) = by_operator(admin, operator).await?;
    let floor_seconds = by_hand(admin, &built).await?;
    let mut from = 0;
    let steps = SIZES
        .iter()
        .zip(operator_seconds.into_iter().zip(floor_seconds))
        .map(|(&size, (operator_seconds, floor_seconds))| {
            let name = format!("{from} → {size}");
            from = size;
            EtcdStep {
                name,
                operator_seconds,
                floor_seconds,
            }
        })
        .collect();
    Ok(EtcdPass { steps })
}

async fn by_operator(admin: &Client, operator: &Operator) -> Result<(Vec<f64>, Built)> {
    ensure_namespace(admin, OPERATOR_NAMESPACE).await?;
    let clusters: Api<EtcdCluster> = Api::namespaced(admin.clone(), OPERATOR_NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), OPERATOR_NAMESPACE);
    let mut built = Built::default();
    let mut seconds = Vec::new();
    for size in SIZES {
        let started = Instant::now();
        let cluster = json!({
            "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
            "metadata": { "name": CLUSTER }, "spec": { "size": size }
        });
        clusters
            .patch(
                CLUSTER,
                &PatchParams::apply("app-operator-bench").force(),
                &Patch::Apply(&cluster),
            )
            .await?;
        let members = wait_for(STEP_TIMEOUT, || async {
            ready_and_settled(&clusters, size).await?;
            settled(&pods, size).await
        })
        .await
        .with_context(|| format!("the operator's EtcdCluster did not settle at {size} members"))?;
        seconds.push(started.elapsed().as_secs_f64());
        for pod in pods.list(&selector()).await? {
            built
                .pods
                .entry(pod.name_any())
                .or_insert(serde_json::to_value(&pod)?);
        }
        built.members_after.push(members);
        // The next step starts with the operator at rest, as the floor's does.
        operator.until_idle(STEP_TIMEOUT).await?;
    }
    let services: Api<Service> = Api::namespaced(admin.clone(), OPERATOR_NAMESPACE);
    for service in services.list(&ListParams::default()).await? {
        built.services.push(serde_json::to_value(&service)?);
    }
    delete_namespace(admin, OPERATOR_NAMESPACE).await?;
    Ok((seconds, built))
}

/// The EtcdCluster has seen its latest spec and says Ready with `size` ready members.
async fn ready_and_settled(clusters: &Api<EtcdCluster>, size: usize) -> Option<()> {
    let cluster = clusters.get(CLUSTER).await.ok()?;
    let status = cluster.status?;
    let ready = status
        .conditions
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    (ready
        && status.observed_generation == cluster.metadata.generation
        && usize::try_from(status.ready_members).ok() == Some(size))
    .then_some(())
}

fn selector() -> ListParams {
    ListParams::default().labels(&format!("etcd_cluster={CLUSTER}"))
}

/// Exactly `size` member Pods, all Ready and none terminating, and etcd lists exactly `size`
/// started voting members: their names, in the order etcd lists them.
async fn settled(pods: &Api<Pod>, size: usize) -> Option<Vec<String>> {
    let pods = pods.list(&selector()).await.ok()?.items;
    let all_ready = pods
        .iter()
        .all(|pod| pod.metadata.deletion_timestamp.is_none() && testkit::running_and_ready(pod));
    if pods.len() != size || !all_ready {
        return None;
    }
    let members = member_list(&endpoints(&pods)).await?;
    let voting: Vec<String> = members
        .iter()
        .filter(|m| m["isLearner"] != true)
        .filter_map(|m| m["name"].as_str().filter(|n| !n.is_empty()))
        .map(str::to_owned)
        .collect();
    (members.len() == size && voting.len() == size).then_some(voting)
}

/// The client URLs of `pods` by their addresses (routed on this machine).
fn endpoints(pods: &[Pod]) -> Vec<String> {
    pods.iter()
        .filter_map(|pod| pod.status.as_ref()?.pod_ip.clone())
        .map(|ip| format!("http://{ip}:2379"))
        .collect()
}

/// etcd's member list, from the first of `endpoints` that answers.
async fn member_list(endpoints: &[String]) -> Option<Vec<Value>> {
    let answer = call_any(endpoints, "/v3/cluster/member/list", json!({}))
        .await
        .ok()?;
    answer["members"].as_array().cloned()
}

/// `path` with `body` at the first of `endpoints` that accepts it.
async fn call_any(endpoints: &[String], path: &str, body: Value) -> Result<Value> {
    let mut refusals = Vec::new();
    for endpoint in endpoints {
        match EtcdStore::new(endpoint.clone())
            .call(path, body.clone())
            .await
        {
            Ok(answer) => return Ok(answer),
            Err(refusal) => refusals.push(format!("{endpoint}: {refusal}")),
        }
    }
    bail!("{path}: {}", refusals.join("; "))
}

/// The floor: the same steps by hand, each member as the operator built it.
async fn by_hand(admin: &Client, built: &Built) -> Result<Vec<f64>> {
    ensure_namespace(admin, FLOOR_NAMESPACE).await?;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), FLOOR_NAMESPACE);
    let services: Api<Service> = Api::namespaced(admin.clone(), FLOOR_NAMESPACE);
    let mut seconds = Vec::new();
    let mut running: Vec<String> = Vec::new();
    for (index, target) in built.members_after.iter().enumerate() {
        let started = Instant::now();
        if index == 0 {
            for service in &built.services {
                services
                    .create(
                        &PostParams::default(),
                        &serde_json::from_value(copied(service)?)?,
                    )
                    .await?;
            }
        }
        let mut joining = target
            .iter()
            .filter(|m| !running.contains(m))
            .map(|member| {
                let pod = built.pods.get(member);
                Some((member, pod?))
            })
            .collect::<Option<Vec<_>>>()
            .context("a Pod of the operator's that was not seen")?;
        // In the order the operator added them: each knew the members before it.
        joining.sort_by_key(|(_, pod)| {
            flag(pod, "--initial-cluster").map(|members| members.split(',').count())
        });
        for (member, pod) in joining {
            join(&pods, pod, running.is_empty()).await?;
            running.push(member.clone());
        }
        while running.len() > target.len() {
            let leaving = leave(&pods, &running, target).await?;
            running.retain(|m| *m != leaving);
        }
        wait_for(STEP_TIMEOUT, || settled(&pods, target.len()))
            .await
            .with_context(|| format!("the floor did not settle at {} members", target.len()))?;
        seconds.push(started.elapsed().as_secs_f64());
    }
    delete_namespace(admin, FLOOR_NAMESPACE).await?;
    Ok(seconds)
}

/// Starts `pod`: the first member founds the cluster; any other is added as a learner first and
/// promoted once it has caught up, as `etcdctl member add --learner` / `member promote` do.
async fn join(pods: &Api<Pod>, pod: &Value, first: bool) -> Result<()> {
    let copy = copied(pod)?;
    let peer_url = flag(&copy, "--initial-advertise-peer-urls");
    let pod: Pod = serde_json::from_value(copy)?;
    let name = pod.name_any();
    if first {
        pods.create(&PostParams::default(), &pod).await?;
        // Founded once it answers (its readiness probe would tell later).
        return wait_for(STEP_TIMEOUT, || async {
            let pod = pods.get(&name).await.ok()?;
            member_list(&endpoints(&[pod])).await.map(drop)
        })
        .await
        .with_context(|| format!("{name} did not start"));
    }
    let endpoints = endpoints(&pods.list(&selector()).await?.items);
    let peer_url = peer_url.with_context(|| format!("{name}'s peer URL"))?;
    // etcd refuses an add until the last promoted member has been connected for a while
    // ("unhealthy cluster"), and a promotion until the learner has caught up: ask until it
    // accepts, as a person with etcdctl would.
    let until_accepted = |path: &'static str, body: Value| {
        let endpoints = &endpoints;
        wait_for(STEP_TIMEOUT, move || {
            let body = body.clone();
            async move { call_any(endpoints, path, body).await.ok() }
        })
    };
    let added = until_accepted(
        "/v3/cluster/member/add",
        json!({ "peerURLs": [peer_url], "isLearner": true }),
    )
    .await
    .with_context(|| format!("{name} was not added"))?;
    pods.create(&PostParams::default(), &pod).await?;
    until_accepted(
        "/v3/cluster/member/promote",
        json!({ "ID": added["member"]["ID"] }),
    )
    .await
    .with_context(|| format!("{name} was not promoted"))
    .map(drop)
}

/// Removes one member that the target no longer has (not the leader, as the operator chooses),
/// then deletes its Pod; returns its name.
async fn leave(pods: &Api<Pod>, running: &[String], target: &[String]) -> Result<String> {
    let listed = pods.list(&selector()).await?.items;
    let endpoints = endpoints(&listed);
    let status = call_any(&endpoints, "/v3/maintenance/status", json!({})).await?;
    let members = member_list(&endpoints)
        .await
        .context("the floor's member list")?;
    let leaving = members
        .iter()
        .filter(|m| m["ID"] != status["leader"])
        .filter_map(|m| Some((m["name"].as_str()?.to_owned(), m["ID"].clone())))
        .filter(|(name, _)| running.contains(name))
        // The operator's choice first; another non-leader if that one leads here.
        .min_by_key(|(name, _)| target.contains(name))
        .context("a member to remove that is not the leader")?;
    call_any(
        &endpoints,
        "/v3/cluster/member/remove",
        json!({ "ID": leaving.1 }),
    )
    .await?;
    pods.delete(&leaving.0, &DeleteParams::default()).await?;
    Ok(leaving.0)
}

/// The value of `--name=value` in the first container's command.
fn flag(pod: &Value, name: &str) -> Option<String> {
    pod["spec"]["containers"][0]["command"]
        .as_array()?
        .iter()
        .find_map(|arg| arg.as_str()?.strip_prefix(name)?.strip_prefix('='))
        .map(str::to_owned)
}

/// `object` (a Pod or Service the operator built) for the floor's namespace: its name, labels,
/// annotations and spec, without what the API server or the scheduler filled in, and with the
/// operator namespace's cluster-DNS names turned into the floor's.
fn copied(object: &Value) -> Result<Value> {
    let mut spec = object["spec"].clone();
    if let Some(spec) = spec.as_object_mut() {
        spec.remove("nodeName");
        if spec.get("clusterIP").and_then(Value::as_str) != Some("None") {
            spec.remove("clusterIP");
            spec.remove("clusterIPs");
        }
    }
    let spec: Value = serde_json::from_str(&spec.to_string().replace(
        &format!(".{OPERATOR_NAMESPACE}."),
        &format!(".{FLOOR_NAMESPACE}."),
    ))?;
    let metadata = &object["metadata"];
    Ok(json!({
        "apiVersion": object["apiVersion"], "kind": object["kind"],
        "metadata": {
            "name": metadata["name"], "labels": metadata["labels"],
            "annotations": metadata["annotations"]
        },
        "spec": spec
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copied_member_pod_answers_at_the_floors_names_and_is_scheduled_again() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "bench-etcd-abc", "namespace": OPERATOR_NAMESPACE, "uid": "u",
                "labels": { "etcd_cluster": CLUSTER }, "ownerReferences": [{ "name": CLUSTER }]
            },
            "spec": {
                "nodeName": "node",
                "containers": [{ "command": [
                    "/usr/local/bin/etcd",
                    "--initial-advertise-peer-urls=http://bench-etcd-abc.bench-etcd.bench-etcd-operator.svc:2380"
                ]}]
            },
            "status": { "phase": "Running" }
        });
        let copy = copied(&pod).unwrap();
        assert_eq!(
            copy,
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {
                    "name": "bench-etcd-abc", "labels": { "etcd_cluster": CLUSTER },
                    "annotations": null
                },
                "spec": { "containers": [{ "command": [
                    "/usr/local/bin/etcd",
                    "--initial-advertise-peer-urls=http://bench-etcd-abc.bench-etcd.bench-etcd-floor.svc:2380"
                ]}]}
            })
        );
        assert_eq!(
            flag(&copy, "--initial-advertise-peer-urls").as_deref(),
            Some("http://bench-etcd-abc.bench-etcd.bench-etcd-floor.svc:2380")
        );
    }
}
