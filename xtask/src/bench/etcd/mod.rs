//! The stateful round on the real node: an EtcdCluster created with 3 members on etcd 3.5,
//! upgraded to 3.6, scaled to 5 and back to 3 by the operator, then the same steps by hand (the
//! floor): the operator's own member Pods and Services, copied into another namespace, started
//! and joined through etcd's member API one at a time as a person with `etcdctl` and `kubectl`
//! would (add a learner, start its Pod, promote it; remove a member, delete its Pod; set a
//! member Pod's image, the leader's last). Both are timed to the same end: every Pod Ready, none
//! terminating, and etcd listing exactly that many started voting members, each answering on the
//! step's version; the operator's also to its `Ready` condition, which is what its user waits
//! for.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use app_operator::api::EtcdCluster;
use app_operator::api::conditions::READY;
use app_operator::reconcile::conditions::is_true;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use testkit::etcd_store::EtcdStore;

use super::TimedStep;
use super::cluster::{delete_namespace, ensure_namespace, wait_for};
use super::copy;
use super::process::Operator;

mod backup;

const CLUSTER: &str = "bench-etcd";
const OPERATOR_NAMESPACE: &str = "bench-etcd-operator";
const FLOOR_NAMESPACE: &str = "bench-etcd-floor";
const FROM_VERSION: &str = "3.5.35";
const TO_VERSION: &str = "3.6.16";

#[derive(Clone, Copy)]
enum Step {
    /// The cluster's members and their etcd version.
    Members(usize, &'static str),
    /// [`backup::DATA_MIB`] written (not timed), then a snapshot of it taken to a claim.
    Backup,
    /// The cluster deleted (not timed), then one of the same size started from the snapshot.
    Restore,
}

/// What the cluster goes through, from none.
const STEPS: [Step; 6] = [
    Step::Members(3, FROM_VERSION),
    Step::Members(3, TO_VERSION),
    Step::Members(5, TO_VERSION),
    Step::Members(3, TO_VERSION),
    Step::Backup,
    Step::Restore,
];
/// Longest a step may take (image pulls are local; a member starts in seconds).
const STEP_TIMEOUT: Duration = Duration::from_secs(300);

/// What the operator built, for the floor to start by hand.
#[derive(Default)]
struct Built {
    services: Vec<Value>,
    /// Every member Pod the operator created, by name, as first seen.
    pods: BTreeMap<String, Value>,
    /// How each step ends.
    after: Vec<Shape>,
    /// The claim its EtcdBackup wrote to, and the Pod of the backup's Job.
    backup: Option<(Value, Value)>,
}

/// The cluster at the end of a step.
struct Shape {
    /// In the order etcd lists them.
    members: Vec<String>,
    /// The member Pods' image.
    image: String,
}

/// A 1-member EtcdCluster by the operator, not timed as a step: just after the CRDs are
/// installed the API server refuses owner references to an EtcdCluster for a while ("cannot
/// find RESTMapping", about 30 s on a fresh cluster), which is the cluster's warm-up, not the
/// operator's work. Returns its seconds.
pub async fn warm_up(admin: &Client, operator: &Operator) -> Result<f64> {
    let namespace = "bench-etcd-warm-up";
    delete_namespace(admin, namespace).await?;
    ensure_namespace(admin, namespace).await?;
    let started = Instant::now();
    let clusters: Api<EtcdCluster> = Api::namespaced(admin.clone(), namespace);
    clusters
        .create(
            &PostParams::default(),
            &cluster(1, TO_VERSION, json!(null))?,
        )
        .await?;
    wait_for(STEP_TIMEOUT, || ready_and_settled(&clusters, 1, TO_VERSION))
        .await
        .context("the warm-up EtcdCluster did not become Ready")?;
    let seconds = started.elapsed().as_secs_f64();
    delete_namespace(admin, namespace).await?;
    operator.until_idle(STEP_TIMEOUT).await?;
    Ok(seconds)
}

/// EtcdCluster [`CLUSTER`] of `size` members on `version`, restored as `restore` says (or not).
fn cluster(size: usize, version: &str, restore: Value) -> Result<EtcdCluster> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
        "metadata": { "name": CLUSTER },
        "spec": { "size": size, "version": version, "restore": restore }
    }))?)
}

/// One operator pass, then one floor pass of the same steps.
pub async fn etcd_pass(admin: &Client, operator: &Operator) -> Result<Vec<TimedStep>> {
    // What a pass that failed left behind.
    delete_namespace(admin, OPERATOR_NAMESPACE).await?;
    delete_namespace(admin, FLOOR_NAMESPACE).await?;
    let (operator_seconds, built) = by_operator(admin, operator).await?;
    let floor_seconds = by_hand(admin, &built).await?;
    let steps = step_names()
        .into_iter()
        .zip(operator_seconds.into_iter().zip(floor_seconds))
        .map(|(name, (operator_seconds, floor_seconds))| TimedStep {
            name,
            operator_seconds,
            floor_seconds,
        })
        .collect();
    Ok(steps)
}

/// Each step by what it changes: "0 → 3 members", "3.5.35 → 3.6.16", "backup of 100 MiB".
fn step_names() -> Vec<String> {
    let mut before = (0, FROM_VERSION);
    STEPS
        .iter()
        .map(|&step| match step {
            Step::Members(size, version) => {
                let name = if version == before.1 {
                    format!("{} → {size} members", before.0)
                } else {
                    format!("{} → {version}", before.1)
                };
                before = (size, version);
                name
            }
            Step::Backup => format!("backup of {} MiB", backup::DATA_MIB),
            Step::Restore => format!("restore into {} members", before.0),
        })
        .collect()
}

/// The members and version each step ends with.
fn shapes() -> Vec<(usize, &'static str)> {
    let mut now = (0, FROM_VERSION);
    STEPS
        .iter()
        .map(|&step| {
            if let Step::Members(size, version) = step {
                now = (size, version);
            }
            now
        })
        .collect()
}

async fn by_operator(admin: &Client, operator: &Operator) -> Result<(Vec<f64>, Built)> {
    ensure_namespace(admin, OPERATOR_NAMESPACE).await?;
    let clusters: Api<EtcdCluster> = Api::namespaced(admin.clone(), OPERATOR_NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), OPERATOR_NAMESPACE);
    let mut built = Built::default();
    let mut seconds = Vec::new();
    for (step, (size, version)) in STEPS.into_iter().zip(shapes()) {
        let until_settled = || async {
            wait_for(STEP_TIMEOUT, || async {
                ready_and_settled(&clusters, size, version).await?;
                settled(&pods, size, version).await
            })
            .await
            .with_context(|| {
                format!("the operator's EtcdCluster did not settle at {size} members on {version}")
            })
        };
        let taken = match step {
            Step::Members(..) => {
                let started = Instant::now();
                clusters
                    .patch(
                        CLUSTER,
                        &PatchParams::apply("app-operator-bench").force(),
                        &Patch::Apply(&cluster(size, version, json!(null))?),
                    )
                    .await?;
                until_settled().await?;
                started.elapsed()
            }
            Step::Backup => {
                let (taken, claim, job_pod) = backup::by_operator(admin, &pods).await?;
                built.backup = Some((claim, job_pod));
                taken
            }
            Step::Restore => {
                backup::delete_members(&pods, || async {
                    clusters.delete(CLUSTER, &DeleteParams::default()).await?;
                    Ok(())
                })
                .await?;
                let started = Instant::now();
                let restore = json!({ "backupName": backup::BACKUP });
                clusters
                    .create(&PostParams::default(), &cluster(size, version, restore)?)
                    .await?;
                until_settled().await?;
                let taken = started.elapsed();
                backup::holds_the_data(&pods).await?;
                taken
            }
        };
        seconds.push(taken.as_secs_f64());
        let listed = pods.list(&selector()).await?.items;
        let members = settled(&pods, size, version)
            .await
            .context("the operator's EtcdCluster after the step")?;
        let image = listed
            .iter()
            .find_map(image_of)
            .context("a member Pod's image")?;
        built.after.push(Shape {
            members,
            image: image.to_owned(),
        });
        for pod in listed {
            built
                .pods
                .entry(pod.name_any())
                .or_insert(serde_json::to_value(&pod)?);
        }
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

/// The EtcdCluster has seen its latest spec and says Ready with `size` ready members on
/// `version`.
async fn ready_and_settled(clusters: &Api<EtcdCluster>, size: usize, version: &str) -> Option<()> {
    let cluster = clusters.get(CLUSTER).await.ok()?;
    let status = cluster.status?;
    (is_true(&status.conditions, READY)
        && status.observed_generation == cluster.metadata.generation
        && usize::try_from(status.ready_members).ok() == Some(size)
        && status.current_version.as_deref() == Some(version))
    .then_some(())
}

fn selector() -> ListParams {
    ListParams::default().labels(&format!("etcd_cluster={CLUSTER}"))
}

/// Exactly `size` member Pods, all Ready and none terminating, each answering on `version`, and
/// etcd lists exactly `size` started voting members: their names, in the order etcd lists them.
async fn settled(pods: &Api<Pod>, size: usize, version: &str) -> Option<Vec<String>> {
    let pods = pods.list(&selector()).await.ok()?.items;
    let all_ready = pods
        .iter()
        .all(|pod| pod.metadata.deletion_timestamp.is_none() && testkit::running_and_ready(pod));
    if pods.len() != size || !all_ready {
        return None;
    }
    for endpoint in endpoints(&pods) {
        let status = EtcdStore::new(endpoint)
            .call("/v3/maintenance/status", json!({}))
            .await
            .ok()?;
        if status["version"] != version {
            return None;
        }
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
    for service in &built.services {
        copy::create(admin, FLOOR_NAMESPACE, copied(service)?).await?;
    }
    let mut seconds = Vec::new();
    let mut running: Vec<String> = Vec::new();
    for ((step, (_, version)), shape) in STEPS.into_iter().zip(shapes()).zip(&built.after) {
        let taken = match step {
            Step::Members(..) => {
                let started = Instant::now();
                reach(&pods, built, shape, version, &mut running).await?;
                started.elapsed()
            }
            Step::Backup => {
                let (claim, job_pod) = built.backup.as_ref().context("the operator's backup")?;
                backup::by_hand(admin, claim, job_pod).await?
            }
            Step::Restore => {
                backup::delete_members(&pods, || async {
                    pods.delete_collection(&DeleteParams::default(), &selector())
                        .await?;
                    Ok(())
                })
                .await?;
                running.clear();
                let started = Instant::now();
                reach(&pods, built, shape, version, &mut running).await?;
                let taken = started.elapsed();
                backup::holds_the_data(&pods).await?;
                taken
            }
        };
        seconds.push(taken.as_secs_f64());
    }
    delete_namespace(admin, FLOOR_NAMESPACE).await?;
    Ok(seconds)
}

/// Brings the floor's members to `shape`: those it lacks joined in the order the operator added
/// them (each knew the members before it), those it has no more removed, then every member moved
/// to the shape's image; until etcd lists them all, started, on `version`.
async fn reach(
    pods: &Api<Pod>,
    built: &Built,
    shape: &Shape,
    version: &str,
    running: &mut Vec<String>,
) -> Result<()> {
    let target = &shape.members;
    let mut joining = target
        .iter()
        .filter(|m| !running.contains(m))
        .map(|member| Some((member, built.pods.get(member)?)))
        .collect::<Option<Vec<_>>>()
        .context("a Pod of the operator's that was not seen")?;
    joining.sort_by_key(|(_, pod)| {
        flag(pod, "--initial-cluster").map(|members| members.split(',').count())
    });
    for (member, pod) in joining {
        join(pods, pod, running.is_empty()).await?;
        running.push(member.clone());
    }
    while running.len() > target.len() {
        let leaving = leave(pods, running, target).await?;
        running.retain(|m| *m != leaving);
    }
    upgrade(pods, &shape.image, version).await?;
    wait_for(STEP_TIMEOUT, || settled(pods, target.len(), version))
        .await
        .with_context(|| format!("the floor did not settle at {} members", target.len()))
        .map(drop)
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

/// Sets the image of every member Pod that runs another one, one member at a time and the leader
/// last (as `kubectl set image` would), each once it answers on `version` and its restarted
/// container is Ready (back in the client Service, as the operator waits for) before the next.
/// Until the kubelet reports the restart, the Pod still shows the old container's Ready.
async fn upgrade(pods: &Api<Pod>, image: &str, version: &str) -> Result<()> {
    loop {
        let listed = pods.list(&selector()).await?.items;
        let mut stale = Vec::new();
        for pod in listed.iter().filter(|pod| image_of(pod) != Some(image)) {
            let endpoint = endpoints(std::slice::from_ref(pod));
            let status = call_any(&endpoint, "/v3/maintenance/status", json!({})).await?;
            let leads = status["leader"] == status["header"]["member_id"];
            stale.push((leads, pod.name_any(), endpoint, container_id(pod)));
        }
        let Some((_, name, endpoint, old_container)) = stale.into_iter().min() else {
            return Ok(());
        };
        let patch = json!({ "spec": { "containers": [{ "name": "etcd", "image": image }] } });
        pods.patch(&name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await?;
        wait_for(STEP_TIMEOUT, || async {
            let status = call_any(&endpoint, "/v3/maintenance/status", json!({}))
                .await
                .ok()?;
            let pod = pods.get(&name).await.ok()?;
            let restarted = container_id(&pod).is_some() && container_id(&pod) != old_container;
            (status["version"] == version && restarted && testkit::running_and_ready(&pod))
                .then_some(())
        })
        .await
        .with_context(|| format!("{name} did not come back on {version}"))?;
    }
}

/// The ID of the member container the kubelet last reported.
fn container_id(pod: &Pod) -> Option<String> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == "etcd")?
        .container_id
        .clone()
}

fn image_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.containers.first()?.image.as_deref()
}

/// The value of `--name=value` in the first container's command.
fn flag(pod: &Value, name: &str) -> Option<String> {
    pod["spec"]["containers"][0]["command"]
        .as_array()?
        .iter()
        .find_map(|arg| arg.as_str()?.strip_prefix(name)?.strip_prefix('='))
        .map(str::to_owned)
}

/// `object`, as the operator built it, for the floor's namespace.
fn copied(object: &Value) -> Result<Value> {
    copy::copied(object, OPERATOR_NAMESPACE, FLOOR_NAMESPACE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_named_by_what_they_change() {
        assert_eq!(
            step_names(),
            [
                "0 → 3 members",
                "3.5.35 → 3.6.16",
                "3 → 5 members",
                "5 → 3 members",
                "backup of 100 MiB",
                "restore into 3 members"
            ]
        );
    }

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
