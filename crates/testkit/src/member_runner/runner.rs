//! Running a taken Pod's commands as its kubelet would, and reporting how they ended.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Container, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::{oneshot, watch};

use super::pods::{
    Mounts, PodKind, binary_for, flag, init_containers, key, kind, member_args, pod_name,
    program_binary,
};
use super::{
    CLAIM_BIND_TIMEOUT, ListedMember, OUTPUT_TAIL_LINES, OWN_DATA_DIR, Pending, Run, Running,
    Start, State, Stop, lock,
};
use crate::etcd::{EtcdProcess, http_request, log_tail};

/// How one container's command ended.
pub(super) struct Ended {
    container: String,
    init: bool,
    exit_code: i32,
}

/// What the runner's tasks share.
#[derive(Clone)]
pub(super) struct Runner {
    pub(super) client: Client,
    /// May span all namespaces.
    pub(super) pods: Api<Pod>,
    pub(super) state: Arc<Mutex<State>>,
    pub(super) dir: PathBuf,
    /// Whether commands other than members' wait.
    pub(super) held: watch::Receiver<bool>,
}

impl Runner {
    pub(super) async fn watch_pods(self) {
        // Every Pod: which ones run the etcd image is in their spec, not in a label. With the
        // backoff the stream never ends: an error is retried (and skipped below), not the end.
        let events = watcher(self.pods.clone(), watcher::Config::default()).default_backoff();
        futures::pin_mut!(events);
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => {
                    self.sync(&pod).await;
                }
                Ok(watcher::Event::Delete(pod)) if kind(&pod).is_some() => {
                    self.forget(&pod).await;
                    lock(&self.state)
                        .taken
                        .remove(&pod.uid().unwrap_or_default());
                }
                _ => {}
            }
        }
    }

    /// The Pod's own directory: its emptyDirs and logs.
    fn pod_dir(&self, pod: &Pod) -> PathBuf {
        self.dir.join(key(pod).replace('/', "_"))
    }

    /// Brings what runs for `pod` in line with it: started, restarted on a new image, or stopped.
    async fn sync(&self, pod: &Pod) {
        let Some(kind) = kind(pod) else {
            return;
        };
        if pod.metadata.deletion_timestamp.is_some() {
            self.forget(pod).await;
            return;
        }
        let key = key(pod);
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Failed" | "Succeeded")) {
            // Ended, by the runner's verdict or another's (a chaos stage): nothing of it runs on.
            self.cancel(&key);
            self.stop(&key).await;
            return;
        }
        match kind {
            PodKind::Member(container) => self.sync_member(pod, container).await,
            // A kubelet runs only the Pods scheduled to its node: kwok makes those Running. And
            // kwok's readiness patch must not land on the runner's final status.
            PodKind::RunToCompletion => {
                if phase == Some("Running") && self.take(pod) {
                    self.spawn_for(pod, self.clone().run_to_completion(pod.clone()));
                }
            }
        }
    }

    async fn sync_member(&self, pod: &Pod, container: &Container) {
        let key = key(pod);
        let image = container.image.clone().unwrap_or_default();
        let running_image = lock(&self.state).running.get(&key).map(|r| r.image.clone());
        match running_image {
            Some(old) if old != image => {
                // An in-place image change: the same member, on the same data, on the new
                // binary; as for a kubelet, its init containers do not run again.
                let previous = lock(&self.state).running.remove(&key);
                if let Some(mut previous) = previous {
                    let _ = previous.process.stop();
                    self.spawn_for(pod, self.clone().start_member(pod.clone(), false));
                }
            }
            Some(_) => {}
            None => {
                if self.take(pod) {
                    self.spawn_for(pod, self.clone().start_member(pod.clone(), true));
                }
            }
        }
    }

    /// Whether `pod` is new to the runner (which then takes it on).
    fn take(&self, pod: &Pod) -> bool {
        lock(&self.state)
            .taken
            .insert(pod.uid().unwrap_or_default())
    }

    /// Runs `work` for `pod` in a task of its own, cancelled when the Pod goes.
    fn spawn_for(&self, pod: &Pod, work: impl Future<Output = ()> + Send + 'static) {
        let key = key(pod);
        let uid = pod.uid().unwrap_or_default();
        let (cancel, cancelled) = oneshot::channel();
        let pending = Pending {
            uid: uid.clone(),
            cancel,
        };
        lock(&self.state).pending.insert(key.clone(), pending);
        let state = self.state.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = work => {}
                _ = cancelled => {}
            }
            lock(&state).settle(&key, &uid);
        });
    }

    /// Cancels the work under way for the Pod `key`; dropping it kills its command.
    fn cancel(&self, key: &str) {
        if let Some(pending) = lock(&self.state).pending.remove(key) {
            let _ = pending.cancel.send(());
        }
    }

    /// The Pod is going: nothing of it runs on, and its emptyDirs go with it (its logs stay, for
    /// a failed test).
    async fn forget(&self, pod: &Pod) {
        let key = key(pod);
        self.cancel(&key);
        self.stop(&key).await;
        let pod_dir = self.pod_dir(pod);
        let empty_dirs = pod
            .spec
            .iter()
            .flat_map(|spec| spec.volumes.iter().flatten())
            .filter(|volume| volume.empty_dir.is_some())
            .map(|volume| pod_dir.join(&volume.name));
        for dir in empty_dirs.chain([pod_dir.join(OWN_DATA_DIR)]) {
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    /// Stops the member process of the Pod `key`, if it runs (recording the member list just
    /// before).
    async fn stop(&self, key: &str) {
        let Some(args) = lock(&self.state).running.get(key).map(|r| r.args.clone()) else {
            return;
        };
        let members_before = list_members(&self.state, &args).await;
        let stopped = lock(&self.state).running.remove(key);
        if let Some(mut stopped) = stopped {
            let _ = stopped.process.stop();
            lock(&self.state).stops.push(Stop {
                pod: pod_name(&args).to_owned(),
                exited: false,
                members_before,
            });
        }
    }

    /// Where the Pod's volumes are on this machine, by name: an emptyDir in the Pod's directory,
    /// a claim's volume where the PersistentVolume says. Creates them, and the Pod's directory.
    async fn volume_dirs(&self, pod: &Pod) -> Result<HashMap<String, PathBuf>, String> {
        let pod_dir = self.pod_dir(pod);
        std::fs::create_dir_all(&pod_dir)
            .map_err(|error| format!("creating {}: {error}", pod_dir.display()))?;
        let namespace = pod.namespace().unwrap_or_default();
        let mut dirs = HashMap::new();
        for volume in pod
            .spec
            .iter()
            .flat_map(|spec| spec.volumes.iter().flatten())
        {
            let dir = if volume.empty_dir.is_some() {
                pod_dir.join(&volume.name)
            } else if let Some(claim) = &volume.persistent_volume_claim {
                self.claim_dir(&namespace, &claim.claim_name).await?
            } else {
                continue;
            };
            std::fs::create_dir_all(&dir).map_err(|error| {
                format!(
                    "creating {} for volume {}: {error}",
                    dir.display(),
                    volume.name
                )
            })?;
            dirs.insert(volume.name.clone(), dir);
        }
        Ok(dirs)
    }

    /// The directory of the volume bound to `claim`: its PersistentVolume's `hostPath` (what the
    /// local cluster's provisioner makes). Waits for the claim to be bound.
    async fn claim_dir(&self, namespace: &str, claim: &str) -> Result<PathBuf, String> {
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), namespace);
        let volumes: Api<PersistentVolume> = Api::all(self.client.clone());
        let deadline = Instant::now() + CLAIM_BIND_TIMEOUT;
        loop {
            let bound = claims
                .get_opt(claim)
                .await
                .ok()
                .flatten()
                .and_then(|claim| claim.spec?.volume_name);
            if let Some(name) = bound
                && let Some(volume) = volumes.get_opt(&name).await.ok().flatten()
            {
                return volume
                    .spec
                    .and_then(|spec| spec.host_path)
                    .map(|host_path| PathBuf::from(host_path.path))
                    .ok_or_else(|| {
                        format!("PersistentVolume {name} of claim {claim} is not a hostPath volume")
                    });
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "claim {claim} was not bound to a volume within {CLAIM_BIND_TIMEOUT:?}"
                ));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Runs `containers` (the Pod's init containers, or its containers) in order, each to its
    /// end, adding how each ended to `ended`; stops at the first that fails, saying why. With
    /// `held`, each waits while the runner is held.
    async fn run_in_order(
        &self,
        pod: &Pod,
        volumes: &HashMap<String, PathBuf>,
        containers: &[Container],
        init: bool,
        mut held: Option<&mut watch::Receiver<bool>>,
        ended: &mut Vec<Ended>,
    ) -> Result<(), String> {
        let kind = if init { "init container" } else { "container" };
        for container in containers {
            if let Some(held) = held.as_deref_mut() {
                // An error: the runner is gone, and this task is being cancelled.
                let _ = held.wait_for(|held| !held).await;
            }
            let log = self.pod_dir(pod).join(format!("{}.log", container.name));
            let exit_code = self
                .run_container(pod, volumes, container, &log)
                .await
                .map_err(|error| format!("{kind} {}: {error}", container.name))?;
            ended.push(Ended {
                container: container.name.clone(),
                init,
                exit_code,
            });
            if exit_code != 0 {
                return Err(format!(
                    "{kind} {} exited with {exit_code}; its output ends with:\n{}",
                    container.name,
                    log_tail(&log, OUTPUT_TAIL_LINES)
                ));
            }
        }
        Ok(())
    }

    /// Runs one container's command to its end, its output going to `log`; its exit code, or why
    /// it could not start.
    async fn run_container(
        &self,
        pod: &Pod,
        volumes: &HashMap<String, PathBuf>,
        container: &Container,
        log: &Path,
    ) -> Result<i32, String> {
        let image = container.image.as_deref().unwrap_or_default();
        let command: Vec<&String> = container
            .command
            .iter()
            .flatten()
            .chain(container.args.iter().flatten())
            .collect();
        let Some((program, args)) = command.split_first() else {
            return Err("no command".to_owned());
        };
        let binary = program_binary(program, image)
            .ok_or_else(|| format!("no pinned binary for {program} of {image}"))?;
        let mounts = Mounts::of(container, volumes);
        let args: Vec<String> = args.iter().map(|arg| mounts.rewrite(arg)).collect();
        let env = container.env.iter().flatten().filter_map(|var| {
            let value = var.value.as_deref()?;
            Some((var.name.clone(), mounts.rewrite(value)))
        });
        let output = std::fs::File::create(log)
            .map_err(|error| format!("creating {}: {error}", log.display()))?;
        let errors = output
            .try_clone()
            .map_err(|error| format!("opening {}: {error}", log.display()))?;
        let mut child = tokio::process::Command::new(&binary)
            .args(&args)
            .envs(env)
            .current_dir(self.pod_dir(pod))
            .stdin(Stdio::null())
            .stdout(output)
            .stderr(errors)
            // The task running it is dropped when the Pod goes; so is the command.
            .kill_on_drop(true)
            .spawn()
            .map_err(|error| format!("starting {}: {error}", binary.display()))?;
        let status = child
            .wait()
            .await
            .map_err(|error| format!("waiting for {}: {error}", binary.display()))?;
        let exit_code = status
            .code()
            .unwrap_or_else(|| 128 + status.signal().unwrap_or_default());
        lock(&self.state).runs.push(Run {
            pod: pod.name_any(),
            container: container.name.clone(),
            argv: std::iter::once(binary.display().to_string())
                .chain(args)
                .collect(),
            exit_code,
        });
        Ok(exit_code)
    }

    /// A Pod other than a member: its init containers, then its containers, each to its end;
    /// then its final status.
    async fn run_to_completion(self, pod: Pod) {
        let mut held = self.held.clone();
        let mut ended = Vec::new();
        let outcome = async {
            let volumes = self.volume_dirs(&pod).await?;
            let init = init_containers(&pod);
            self.run_in_order(&pod, &volumes, init, true, Some(&mut held), &mut ended)
                .await?;
            let containers = pod.spec.as_ref().map(|spec| spec.containers.as_slice());
            let containers = containers.unwrap_or_default();
            self.run_in_order(
                &pod,
                &volumes,
                containers,
                false,
                Some(&mut held),
                &mut ended,
            )
            .await
        }
        .await;
        report(&self.pods, &key(&pod), &ended, outcome.err().as_deref()).await;
    }

    /// A member: its init containers (unless `run_init` is false: a restart), then its etcd
    /// process.
    async fn start_member(self, pod: Pod, run_init: bool) {
        let key = key(&pod);
        let mut ended = Vec::new();
        let prepared = async {
            let volumes = self.volume_dirs(&pod).await?;
            if run_init {
                let init = init_containers(&pod);
                self.run_in_order(&pod, &volumes, init, true, None, &mut ended)
                    .await?;
            }
            Ok::<_, String>(volumes)
        }
        .await;
        let volumes = match prepared {
            Ok(volumes) => volumes,
            Err(message) => {
                report(&self.pods, &key, &ended, Some(&message)).await;
                return;
            }
        };
        let Some(PodKind::Member(container)) = kind(&pod) else {
            return;
        };
        let image = container.image.clone().unwrap_or_default();
        let Some((binary, version)) = binary_for(&image) else {
            fail(
                &self.pods,
                &key,
                &format!("no etcd binary for image {image}"),
            )
            .await;
            return;
        };
        let pod_dir = self.pod_dir(&pod);
        let (args, data_dir) = member_args(container, &Mounts::of(container, &volumes), &pod_dir);
        let members_before = match flag(&args, "--initial-cluster-state") {
            Some("existing") => list_members(&self.state, &args).await,
            _ => None,
        };
        let log = pod_dir.join(format!("etcd-{version}.log"));
        let process = match EtcdProcess::spawn_binary(&binary, args.clone(), &data_dir, &log) {
            Ok(process) => process,
            Err(error) => {
                let message = format!("starting {}: {error}", binary.display());
                fail(&self.pods, &key, &message).await;
                return;
            }
        };
        let started = {
            let mut state = lock(&self.state);
            // The Pod went while it started: dropping the process kills it.
            let current = state.settle(&key, &pod.uid().unwrap_or_default());
            if current {
                state.starts.push(Start {
                    pod: pod_name(&args).to_owned(),
                    version,
                    cluster_state: flag(&args, "--initial-cluster-state")
                        .unwrap_or("new")
                        .to_owned(),
                    members_before,
                });
                state.running.insert(
                    key.clone(),
                    Running {
                        process,
                        image: image.clone(),
                        args,
                    },
                );
            }
            current
        };
        if started && !run_init {
            // Its own task: settling the work above dropped what this one's end is tied to.
            let (pods, container) = (self.pods.clone(), container.name.clone());
            tokio::spawn(async move { restarted(&pods, &key, &container, &image).await });
        }
    }

    /// Marks Pods whose member process died `Failed`, as a kubelet does for
    /// `restartPolicy: Never`.
    pub(super) async fn reap(self) {
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let dead: Vec<(String, Vec<String>, String)> = {
                let mut state = lock(&self.state);
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
                let members_before = list_members(&self.state, &args).await;
                lock(&self.state).stops.push(Stop {
                    pod: pod_name(&args).to_owned(),
                    exited: true,
                    members_before,
                });
                fail(
                    &self.pods,
                    &key,
                    &format!("etcd exited; its log ends with: {log}"),
                )
                .await;
            }
        }
    }
}

/// The member list from the first other running member that answers.
pub(super) async fn list_members(
    state: &Mutex<State>,
    args: &[String],
) -> Option<Vec<ListedMember>> {
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

/// Marks the member Pod `key` (`namespace/name`) Failed with `message`, its etcd exited.
pub(super) async fn fail(pods: &Api<Pod>, key: &str, message: &str) {
    let etcd = Ended {
        container: "etcd".to_owned(),
        init: false,
        exit_code: 1,
    };
    report(pods, key, &[etcd], Some(message)).await;
}

/// Sets the status of the Pod `key` (`namespace/name`) as a kubelet does once it has ended:
/// `Failed` with `failure` as its message, else `Succeeded`; each container in `ended`
/// terminated with its exit code.
pub(super) async fn report(pods: &Api<Pod>, key: &str, ended: &[Ended], failure: Option<&str>) {
    let Some((pods, pod)) = of_namespace(pods, key) else {
        return;
    };
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let mut status = serde_json::Map::new();
    let phase = if failure.is_some() {
        "Failed"
    } else {
        "Succeeded"
    };
    status.insert("phase".to_owned(), phase.into());
    if let Some(message) = failure {
        status.insert("message".to_owned(), message.into());
    }
    status.insert(
        "conditions".to_owned(),
        json!([{ "type": "Ready", "status": "False", "lastTransitionTime": now }]),
    );
    for (field, init) in [
        ("initContainerStatuses", true),
        ("containerStatuses", false),
    ] {
        let statuses: Vec<serde_json::Value> = ended
            .iter()
            .filter(|e| e.init == init)
            .map(|e| {
                let reason = if e.exit_code == 0 {
                    "Completed"
                } else {
                    "Error"
                };
                json!({
                    "name": e.container, "image": "", "imageID": "", "ready": false,
                    "restartCount": 0,
                    "state": { "terminated": {
                        "exitCode": e.exit_code, "reason": reason, "finishedAt": now
                    } }
                })
            })
            .collect();
        if !statuses.is_empty() {
            status.insert(field.to_owned(), statuses.into());
        }
    }
    let patch = json!({ "status": status });
    let _ = pods
        .patch_status(pod, &PatchParams::default(), &Patch::Merge(&patch))
        .await;
}

/// Reports the Pod `key`'s `container` running on `image`, as a kubelet does once it has
/// restarted it after an in-place image change (until then the Pod shows the old container).
async fn restarted(pods: &Api<Pod>, key: &str, container: &str, image: &str) {
    let Some((pods, pod)) = of_namespace(pods, key) else {
        return;
    };
    let now = k8s_openapi::jiff::Timestamp::now();
    let patch = json!({ "status": { "containerStatuses": [{
        "name": container, "image": image, "imageID": "", "ready": true, "restartCount": 0,
        "containerID": format!("member-runner://{key}/{}", now.as_nanosecond()),
        "started": true, "state": { "running": { "startedAt": now.to_string() } }
    }]}});
    let _ = pods
        .patch_status(pod, &PatchParams::default(), &Patch::Merge(&patch))
        .await;
}

/// The Pods of the namespace of Pod `key` (`namespace/name`; `pods` may span all of them), and
/// its name.
fn of_namespace<'a>(pods: &Api<Pod>, key: &'a str) -> Option<(Api<Pod>, &'a str)> {
    let (namespace, pod) = key.split_once('/')?;
    Some((Api::namespaced(pods.clone().into_client(), namespace), pod))
}
