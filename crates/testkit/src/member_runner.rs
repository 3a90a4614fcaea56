//! The etcd member runner: what a kubelet would do for the EtcdCluster's Pods on a control plane
//! whose Pods run nowhere (kwok). It watches Pods labelled `app=etcd` and, for each, runs the
//! pinned `etcd` binary with the Pod's own command line (the operator's loopback addressing puts
//! every member on its own `127.a.b.c`), with a data dir of its own. It stops the process when
//! the Pod goes, restarts it on the Pod's new image (an in-place upgrade, as a kubelet does), and
//! marks the Pod `Failed` when the process dies (`restartPolicy: Never`).
//!
//! Before each start it records the member list the cluster reports, so a test can show that a
//! member was added before its process started.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::etcd::{EtcdProcess, http_request};

/// A member as the cluster listed it when another one was about to start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedMember {
    /// Empty for a member that has not started.
    pub name: String,
    pub peer_urls: Vec<String>,
    pub is_learner: bool,
}

/// One process start.
#[derive(Clone, Debug)]
pub struct Start {
    pub pod: String,
    /// The etcd binary's version (`3.6`, `3.5`).
    pub version: String,
    /// `new` or `existing`.
    pub cluster_state: String,
    /// The member list the existing members reported just before the start (`None`: none
    /// answered, as for the first member of a new cluster).
    pub members_before: Option<Vec<ListedMember>>,
}

/// One member process that ended: stopped because its Pod went away, or exited by itself (etcd
/// exits once it is removed from the cluster; or it crashed).
#[derive(Clone, Debug)]
pub struct Stop {
    pub pod: String,
    pub exited: bool,
    /// The member list the other running members reported just before the stop (for an exit:
    /// just after it was noticed).
    pub members_before: Option<Vec<ListedMember>>,
}

struct Running {
    process: EtcdProcess,
    image: String,
    args: Vec<String>,
    data_dir: PathBuf,
}

#[derive(Default)]
struct State {
    running: HashMap<String, Running>,
    starts: Vec<Start>,
    stops: Vec<Stop>,
}

/// Runs until dropped; every process it started is killed then.
pub struct MemberRunner {
    state: Arc<Mutex<State>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl MemberRunner {
    /// Runs the members of EtcdClusters in `namespace` (all namespaces when `None`), keeping data
    /// dirs and logs under `dir`. Returns once its Pod watch has started.
    pub async fn start(client: Client, namespace: Option<&str>, dir: &Path) -> MemberRunner {
        let pods: Api<Pod> = match namespace {
            Some(namespace) => Api::namespaced(client, namespace),
            None => Api::all(client),
        };
        let state = Arc::new(Mutex::new(State::default()));
        let dir = dir.to_owned();
        let _ = std::fs::create_dir_all(&dir);
        let watch = tokio::spawn(watch_pods(pods.clone(), state.clone(), dir));
        let reaper = tokio::spawn(reap(pods, state.clone()));
        MemberRunner {
            state,
            tasks: vec![watch, reaper],
        }
    }

    /// Every process start so far, in order.
    pub fn starts(&self) -> Vec<Start> {
        lock(&self.state).starts.clone()
    }

    /// Every member process that ended, in order.
    pub fn stops(&self) -> Vec<Stop> {
        lock(&self.state).stops.clone()
    }

    /// The Pods whose process runs now.
    pub fn running(&self) -> Vec<String> {
        let mut pods: Vec<String> = lock(&self.state).running.keys().cloned().collect();
        pods.sort();
        pods
    }

    /// SIGKILLs the process of `pod` (a crash): the runner then marks the Pod Failed.
    pub fn kill(&self, pod: &str) -> bool {
        let mut state = lock(&self.state);
        let Some(running) = state
            .running
            .values_mut()
            .find(|r| pod_name(&r.args) == pod)
        else {
            return false;
        };
        let pid = running.process.pid();
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        true
    }
}

impl Drop for MemberRunner {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
        // Dropping the processes kills them.
        lock(&self.state).running.clear();
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn key(pod: &Pod) -> String {
    format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any())
}

fn pod_name(args: &[String]) -> &str {
    flag(args, "--name").unwrap_or_default()
}

fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .find_map(|arg| arg.strip_prefix(name)?.strip_prefix('='))
}

/// The etcd container's image and command line (without the program and its data dir).
fn etcd_container(pod: &Pod) -> Option<(String, Vec<String>)> {
    let container = pod
        .spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == "etcd")?;
    let command = container.command.iter().flatten().skip(1);
    let args = command
        .chain(container.args.iter().flatten())
        .filter(|arg| !arg.starts_with("--data-dir="))
        .cloned()
        .collect();
    Some((container.image.clone()?, args))
}

/// The binary for an image tag: the pinned etcd for its minor release, `etcd-3.5` for 3.5.
fn binary_for(image: &str) -> Option<(PathBuf, String)> {
    let tag = image.rsplit_once(':')?.1.trim_start_matches('v');
    let mut parts = tag.split('.');
    let minor = format!("{}.{}", parts.next()?, parts.next()?);
    let name = if minor == "3.6" {
        "etcd".to_owned()
    } else {
        format!("etcd-{minor}")
    };
    let binary = crate::tools().bin(&name);
    binary.exists().then_some((binary, minor))
}

async fn watch_pods(pods: Api<Pod>, state: Arc<Mutex<State>>, dir: PathBuf) {
    let events =
        watcher(pods.clone(), watcher::Config::default().labels("app=etcd")).default_backoff();
    futures::pin_mut!(events);
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => {
                sync_pod(&pods, &state, &dir, &pod).await;
            }
            Ok(watcher::Event::Delete(pod)) => stop(&state, &key(&pod)).await,
            _ => {}
        }
    }
}

/// Stops the process of the Pod `key` (recording the member list just before); its data goes
/// with the Pod.
async fn stop(state: &Mutex<State>, key: &str) {
    let Some(args) = lock(state).running.get(key).map(|r| r.args.clone()) else {
        return;
    };
    let members_before = list_members(state, &args).await;
    let stopped = lock(state).running.remove(key);
    if let Some(mut stopped) = stopped {
        let _ = stopped.process.stop();
        let _ = std::fs::remove_dir_all(&stopped.data_dir);
        lock(state).stops.push(Stop {
            pod: pod_name(&args).to_owned(),
            exited: false,
            members_before,
        });
    }
}

/// Brings the process of `pod` in line with it: started, restarted on a new image, or stopped.
async fn sync_pod(pods: &Api<Pod>, state: &Arc<Mutex<State>>, dir: &Path, pod: &Pod) {
    let key = key(pod);
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    let gone =
        pod.metadata.deletion_timestamp.is_some() || matches!(phase, Some("Failed" | "Succeeded"));
    let Some((image, args)) = etcd_container(pod) else {
        return;
    };
    let running_image = lock(state).running.get(&key).map(|r| r.image.clone());
    match running_image {
        Some(_) if gone => stop(state, &key).await,
        Some(old) if old != image => {
            // An in-place image change: the same member, on the same data, on the new binary.
            let previous = lock(state).running.remove(&key);
            if let Some(mut previous) = previous {
                let _ = previous.process.stop();
                start(
                    pods,
                    state,
                    dir,
                    &key,
                    &image,
                    &args,
                    Some(previous.data_dir),
                )
                .await;
            }
        }
        Some(_) => {}
        None if gone => {}
        None => start(pods, state, dir, &key, &image, &args, None).await,
    }
}

async fn start(
    pods: &Api<Pod>,
    state: &Arc<Mutex<State>>,
    dir: &Path,
    key: &str,
    image: &str,
    args: &[String],
    data_dir: Option<PathBuf>,
) {
    let name = pod_name(args).to_owned();
    let Some((binary, version)) = binary_for(image) else {
        fail(pods, key, &format!("no etcd binary for image {image}")).await;
        return;
    };
    let members_before = match flag(args, "--initial-cluster-state") {
        Some("existing") => list_members(state, args).await,
        _ => None,
    };
    let data_dir = data_dir.unwrap_or_else(|| dir.join(key.replace('/', "_")).join("data"));
    let log = data_dir.with_file_name(format!("etcd-{version}.log"));
    let _ = std::fs::create_dir_all(log.parent().unwrap_or(dir));
    let process = match EtcdProcess::spawn_binary(&binary, args.to_vec(), &data_dir, &log) {
        Ok(process) => process,
        Err(error) => {
            fail(
                pods,
                key,
                &format!("starting {}: {error}", binary.display()),
            )
            .await;
            return;
        }
    };
    let mut state = lock(state);
    state.starts.push(Start {
        pod: name,
        version,
        cluster_state: flag(args, "--initial-cluster-state")
            .unwrap_or("new")
            .to_owned(),
        members_before,
    });
    state.running.insert(
        key.to_owned(),
        Running {
            process,
            image: image.to_owned(),
            args: args.to_vec(),
            data_dir,
        },
    );
}

/// The member list from the first other running member that answers.
async fn list_members(state: &Mutex<State>, args: &[String]) -> Option<Vec<ListedMember>> {
    let me = pod_name(args).to_owned();
    let others: Vec<String> = lock(state)
        .running
        .values()
        .filter(|r| pod_name(&r.args) != me)
        .filter_map(|r| flag(&r.args, "--advertise-client-urls").map(str::to_owned))
        .collect();
    for url in others {
        let Some(address) = url
            .strip_prefix("http://")
            .and_then(|host| host.parse::<SocketAddr>().ok())
        else {
            continue;
        };
        let Some((200, body)) =
            http_request(address, "POST", "/v3/cluster/member/list", "{}").await
        else {
            continue;
        };
        let Ok(list) = serde_json::from_str::<serde_json::Value>(&body) else {
            continue;
        };
        let members = list["members"].as_array().cloned().unwrap_or_default();
        return Some(
            members
                .iter()
                .map(|m| ListedMember {
                    name: m["name"].as_str().unwrap_or_default().to_owned(),
                    peer_urls: m["peerURLs"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|u| u.as_str().map(str::to_owned))
                        .collect(),
                    is_learner: m["isLearner"].as_bool().unwrap_or(false),
                })
                .collect(),
        );
    }
    None
}

/// Marks Pods whose process died `Failed`, as a kubelet does for `restartPolicy: Never`.
async fn reap(pods: Api<Pod>, state: Arc<Mutex<State>>) {
    // `pods` may span all namespaces; `fail` addresses each Pod in its own.
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let dead: Vec<(String, Vec<String>, String)> = {
            let mut state = lock(&state);
            let exited: Vec<String> = state
                .running
                .iter_mut()
                .filter_map(|(key, running)| running.process.exited().map(|_| key.clone()))
                .collect();
            exited
                .into_iter()
                .filter_map(|key| {
                    let running = state.running.remove(&key)?;
                    Some((key, running.args.clone(), running.process.log_tail(3)))
                })
                .collect()
        };
        for (key, args, log) in dead {
            // etcd ends its own process once it has been removed from the cluster.
            let members_before = list_members(&state, &args).await;
            lock(&state).stops.push(Stop {
                pod: pod_name(&args).to_owned(),
                exited: true,
                members_before,
            });
            fail(
                &pods,
                &key,
                &format!("etcd exited; its log ends with: {log}"),
            )
            .await;
        }
    }
}

/// Marks the Pod `key` (`namespace/name`) Failed with `message`.
async fn fail(pods: &Api<Pod>, key: &str, message: &str) {
    let Some((namespace, pod)) = key.split_once('/') else {
        return;
    };
    let pods: Api<Pod> = Api::namespaced(pods.clone().into_client(), namespace);
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let status = json!({ "status": {
        "phase": "Failed",
        "message": message,
        "conditions": [{ "type": "Ready", "status": "False", "lastTransitionTime": now }],
        "containerStatuses": [{
            "name": "etcd", "image": "", "imageID": "", "ready": false, "restartCount": 0,
            "state": { "terminated": { "exitCode": 1, "reason": "Error", "finishedAt": now } }
        }]
    }});
    let _ = pods
        .patch_status(pod, &PatchParams::default(), &Patch::Merge(&status))
        .await;
}
