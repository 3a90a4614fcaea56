//! The etcd member runner: what a kubelet would do, on a control plane whose Pods run nowhere
//! (kwok), for the Pods that run the etcd image: EtcdCluster members and the Jobs that back them
//! up. It watches Pods and takes on those whose every container (init containers too) runs an
//! etcd image, running their commands with the pinned binaries of the same names (`etcd` of the
//! image's minor release, `etcdctl`, `etcdutl`):
//!
//! - A member Pod (a container `etcd` that runs `etcd`): its init containers first (a restore),
//!   in order, each to its end; then etcd, with the Pod's own command line (the operator's
//!   loopback addressing puts every member on its own `127.a.b.c`). It stops the process when
//!   the Pod goes, restarts it on the Pod's new image (an in-place upgrade, as a kubelet does),
//!   and marks the Pod `Failed` when an init container fails or the process dies
//!   (`restartPolicy: Never`).
//! - Any other such Pod (a backup Job's): its init containers, then its containers, in order,
//!   each to its end; the Pod then ends `Succeeded`, or `Failed` at the first command that does,
//!   with the exit codes in its container statuses. kwok's stage that completes Job Pods leaves
//!   these alone (see `local_cluster`'s stages). Their commands start once kwok has made the Pod
//!   `Running`, and not while the runner is held; deleting the Pod kills its command.
//!
//! Volumes: a container sees its volumes at their mount paths, so every argument (or
//! `--flag=value`) and env value under a mount path is rewritten to the volume's directory on
//! this machine: an `emptyDir` is `<dir>/<namespace>_<pod>/<volume>` (removed when the Pod is
//! deleted), a `persistentVolumeClaim` the bound PersistentVolume's `hostPath` (kept, as the
//! claim is). Other volumes (the service account token) are not mapped. Command output goes to
//! logs in `<dir>/<namespace>_<pod>/`.
//!
//! Before each member start it records the member list the cluster reports, so a test can show
//! that a member was added before its process started; every other command is recorded with its
//! exit code.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::net::SocketAddr;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Container, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::{oneshot, watch};

use crate::etcd::{EtcdProcess, http_request, log_tail};

/// How long a Pod's claim may take to be bound to a volume before the Pod fails.
const CLAIM_BIND_TIMEOUT: Duration = Duration::from_secs(60);

/// A member's data dir when its `--data-dir` is on no volume: its container's own filesystem,
/// which goes with the Pod. No volume is named so (volume names are DNS labels, without dots).
const OWN_DATA_DIR: &str = "etcd.data";

/// How many lines of a failed command's output its Pod's status message quotes.
const OUTPUT_TAIL_LINES: usize = 5;

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

/// One command that ran to its end: a container of a Pod other than a member (a backup Job's),
/// or a member's init container (a restore). A command killed because its Pod went is not one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Run {
    pub pod: String,
    pub container: String,
    /// The command line as run: the pinned binary, then the arguments with their paths mapped to
    /// this machine's directories.
    pub argv: Vec<String>,
    /// 128 + the signal for a command a signal ended, as a kubelet reports it.
    pub exit_code: i32,
}

struct Running {
    process: EtcdProcess,
    image: String,
    args: Vec<String>,
}

/// A Pod whose work runs in a task of its own: a member's init containers and start, or another
/// Pod's commands.
struct Pending {
    uid: String,
    /// Sending (or dropping) it cancels the task, killing the command it runs.
    cancel: oneshot::Sender<()>,
}

#[derive(Default)]
struct State {
    /// Member processes, by Pod (`namespace/name`).
    running: HashMap<String, Running>,
    /// Work under way, by Pod (`namespace/name`).
    pending: HashMap<String, Pending>,
    /// The UIDs of the Pods taken on: the watch shows a Pod many times, and it runs once.
    taken: HashSet<String>,
    starts: Vec<Start>,
    stops: Vec<Stop>,
    runs: Vec<Run>,
}

impl State {
    /// Ends the pending work of `key` if it is still that of the Pod `uid`; whether it was (it is
    /// not once the Pod went).
    fn settle(&mut self, key: &str, uid: &str) -> bool {
        let ours = self
            .pending
            .get(key)
            .is_some_and(|pending| pending.uid == uid);
        if ours {
            self.pending.remove(key);
        }
        ours
    }
}

/// Runs until dropped; every process it started is killed then.
pub struct MemberRunner {
    state: Arc<Mutex<State>>,
    held: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    dir: PathBuf,
}

impl MemberRunner {
    /// Runs the etcd Pods (members and Jobs) in `namespace` (all namespaces when `None`), keeping
    /// their emptyDirs, member data dirs and logs under `dir`. Returns once its Pod watch has
    /// started.
    pub async fn start(client: Client, namespace: Option<&str>, dir: &Path) -> MemberRunner {
        let pods: Api<Pod> = match namespace {
            Some(namespace) => Api::namespaced(client.clone(), namespace),
            None => Api::all(client.clone()),
        };
        let state = Arc::new(Mutex::new(State::default()));
        let (held, released) = watch::channel(false);
        let _ = std::fs::create_dir_all(dir);
        let runner = Runner {
            client,
            pods,
            state: state.clone(),
            dir: dir.to_owned(),
            held: released,
        };
        let watch = tokio::spawn(runner.clone().watch_pods());
        let reaper = tokio::spawn(runner.reap());
        MemberRunner {
            state,
            held,
            tasks: vec![watch, reaper],
            dir: dir.to_owned(),
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

    /// Every command other than a member's etcd that ran to its end, in order.
    pub fn runs(&self) -> Vec<Run> {
        lock(&self.state).runs.clone()
    }

    /// The Pods whose member process runs now.
    pub fn running(&self) -> Vec<String> {
        let mut pods: Vec<String> = lock(&self.state).running.keys().cloned().collect();
        pods.sort();
        pods
    }

    /// While held, the commands of Pods other than members do not start, as if their image were
    /// still being pulled; released, those waiting start.
    pub fn hold(&self, held: bool) {
        self.held.send_replace(held);
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
        let mut state = lock(&self.state);
        // Dropping the senders cancels the work under way, killing its commands; dropping the
        // processes kills them.
        state.pending.clear();
        state.running.clear();
        drop(state);
        remove_volumes(&self.dir);
    }
}

/// Removes every Pod's volumes and data under `dir` (etcd preallocates 64 MiB per WAL file, so a
/// test run would otherwise leave gigabytes behind), keeping the logs to read after a failure.
fn remove_volumes(dir: &Path) {
    let pod_dirs = std::fs::read_dir(dir).into_iter().flatten().flatten();
    for pod_dir in pod_dirs {
        let entries = std::fs::read_dir(pod_dir.path())
            .into_iter()
            .flatten()
            .flatten();
        for entry in entries.filter(|e| e.file_type().is_ok_and(|t| t.is_dir())) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
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

/// What the runner does with a Pod.
enum PodKind<'a> {
    /// An EtcdCluster member: its `etcd` container runs until the Pod goes.
    Member(&'a Container),
    /// Any other Pod on the etcd image (a backup Job's): each command runs to its end.
    RunToCompletion,
}

/// `None` for a Pod with a container on another image: the runner has no binaries for it.
fn kind(pod: &Pod) -> Option<PodKind<'_>> {
    let spec = pod.spec.as_ref()?;
    let on_etcd_image = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .all(|c| c.image.as_deref().is_some_and(is_etcd_image));
    if !on_etcd_image {
        return None;
    }
    Some(match spec.containers.iter().find(|c| is_member(c)) {
        Some(container) => PodKind::Member(container),
        None => PodKind::RunToCompletion,
    })
}

/// An image of etcd's (`[registry/]…/etcd:v3.6.16`, `etcd:3.5.0`): what kwok's Job completion
/// stage leaves to the runner, `(^|/)etcd:v?[0-9]`.
fn is_etcd_image(image: &str) -> bool {
    let name_and_tag = image.rsplit_once('/').map_or(image, |(_, last)| last);
    name_and_tag
        .strip_prefix("etcd:")
        .map(|tag| tag.strip_prefix('v').unwrap_or(tag))
        .is_some_and(|version| version.starts_with(|c: char| c.is_ascii_digit()))
}

fn is_member(container: &Container) -> bool {
    container.name == "etcd"
        && container
            .command
            .iter()
            .flatten()
            .next()
            .is_some_and(|program| program_name(program) == "etcd")
}

/// A program's file name: `etcdctl` for `/usr/local/bin/etcdctl`.
fn program_name(program: &str) -> &str {
    Path::new(program)
        .file_name()
        .and_then(|name| name.to_str())
        .unwrap_or(program)
}

fn init_containers(pod: &Pod) -> &[Container] {
    pod.spec
        .as_ref()
        .and_then(|spec| spec.init_containers.as_deref())
        .unwrap_or_default()
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

/// The pinned binary for a program of the etcd image: `etcd` of the image's release; the client
/// tools of the pinned release (they work with the releases the runner runs).
fn program_binary(program: &str, image: &str) -> Option<PathBuf> {
    match program_name(program) {
        "etcd" => binary_for(image).map(|(binary, _)| binary),
        name @ ("etcdctl" | "etcdutl") => {
            let binary = crate::tools().bin(name);
            binary.exists().then_some(binary)
        }
        _ => None,
    }
}

/// Where a container's volumes are on this machine: `(mount path, directory)`, longest mount
/// path first, so a mount inside another one wins.
#[derive(Debug)]
struct Mounts(Vec<(String, PathBuf)>);

impl Mounts {
    fn new(mounts: impl IntoIterator<Item = (String, PathBuf)>) -> Mounts {
        let mut mounts: Vec<(String, PathBuf)> = mounts
            .into_iter()
            .map(|(path, dir)| (path.trim_end_matches('/').to_owned(), dir))
            .collect();
        mounts.sort_by_key(|(path, _)| std::cmp::Reverse(path.len()));
        Mounts(mounts)
    }

    /// The mounts of `container`, for those of its volumes that have a directory in `volumes`.
    fn of(container: &Container, volumes: &HashMap<String, PathBuf>) -> Mounts {
        Mounts::new(
            container
                .volume_mounts
                .iter()
                .flatten()
                .filter_map(|mount| {
                    let dir = volumes.get(&mount.name)?;
                    let dir = match mount.sub_path.as_deref() {
                        Some(sub_path) if !sub_path.is_empty() => dir.join(sub_path),
                        _ => dir.clone(),
                    };
                    Some((mount.mount_path.clone(), dir))
                }),
        )
    }

    /// `path` on this machine, when it is under a mount path (`/backups` holds `/backups/a.db`,
    /// not `/backupsfoo`).
    fn host_path(&self, path: &str) -> Option<String> {
        self.0.iter().find_map(|(mount, dir)| {
            let rest = path.strip_prefix(mount.as_str())?;
            (rest.is_empty() || rest.starts_with('/')).then(|| format!("{}{rest}", dir.display()))
        })
    }

    /// An argument or env value with its path mapped: the whole of it, or a `--flag=` value.
    fn rewrite(&self, value: &str) -> String {
        if let Some(path) = self.host_path(value) {
            return path;
        }
        value
            .split_once('=')
            .filter(|(flag, _)| flag.starts_with('-'))
            .and_then(|(flag, path)| Some(format!("{flag}={}", self.host_path(path)?)))
            .unwrap_or_else(|| value.to_owned())
    }
}

/// A member's etcd arguments (after the program) with their paths mapped, and its data dir
/// (which [`EtcdProcess`] passes itself): where its `--data-dir` is on this machine.
fn member_args(container: &Container, mounts: &Mounts, pod_dir: &Path) -> (Vec<String>, PathBuf) {
    let mut data_dir = None;
    let mut args = Vec::new();
    let command = container.command.iter().flatten().skip(1);
    for arg in command.chain(container.args.iter().flatten()) {
        match arg.strip_prefix("--data-dir=") {
            Some(path) => data_dir = mounts.host_path(path).map(PathBuf::from),
            None => args.push(mounts.rewrite(arg)),
        }
    }
    (args, data_dir.unwrap_or_else(|| pod_dir.join(OWN_DATA_DIR)))
}

/// How one container's command ended.
struct Ended {
    container: String,
    init: bool,
    exit_code: i32,
}

/// What the runner's tasks share.
#[derive(Clone)]
struct Runner {
    client: Client,
    /// May span all namespaces.
    pods: Api<Pod>,
    state: Arc<Mutex<State>>,
    dir: PathBuf,
    /// Whether commands other than members' wait.
    held: watch::Receiver<bool>,
}

impl Runner {
    async fn watch_pods(self) {
        // Every Pod: which ones run the etcd image is in their spec, not in a label.
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
        let mut state = lock(&self.state);
        if !state.settle(&key, &pod.uid().unwrap_or_default()) {
            // The Pod went while it started: dropping the process kills it.
            return;
        }
        state.starts.push(Start {
            pod: pod_name(&args).to_owned(),
            version,
            cluster_state: flag(&args, "--initial-cluster-state")
                .unwrap_or("new")
                .to_owned(),
            members_before,
        });
        state.running.insert(
            key,
            Running {
                process,
                image,
                args,
            },
        );
    }

    /// Marks Pods whose member process died `Failed`, as a kubelet does for
    /// `restartPolicy: Never`.
    async fn reap(self) {
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

/// Marks the member Pod `key` (`namespace/name`) Failed with `message`, its etcd exited.
async fn fail(pods: &Api<Pod>, key: &str, message: &str) {
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
async fn report(pods: &Api<Pod>, key: &str, ended: &[Ended], failure: Option<&str>) {
    let Some((namespace, pod)) = key.split_once('/') else {
        return;
    };
    // `pods` may span all namespaces.
    let pods: Api<Pod> = Api::namespaced(pods.clone().into_client(), namespace);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn mounts() -> Mounts {
        Mounts::new([
            ("/backups".to_owned(), PathBuf::from("/tmp/hostpath_pv/1")),
            (
                "/var/etcd/".to_owned(),
                PathBuf::from("/runner/pod/etcd-data"),
            ),
            (
                "/var/etcd/data".to_owned(),
                PathBuf::from("/runner/pod/data"),
            ),
        ])
    }

    #[test]
    fn maps_paths_under_a_mount_to_its_directory() {
        let mounts = mounts();
        assert_eq!(mounts.rewrite("/backups/a.db"), "/tmp/hostpath_pv/1/a.db");
        assert_eq!(mounts.rewrite("/backups"), "/tmp/hostpath_pv/1");
        assert_eq!(
            mounts.rewrite("--data-dir=/var/etcd/other"),
            "--data-dir=/runner/pod/etcd-data/other",
            "a --flag= value; a trailing slash on the mount path is no matter"
        );
    }

    #[test]
    fn leaves_other_arguments_alone() {
        let mounts = mounts();
        for arg in [
            "/backupsfoo",
            "/backupsfoo/a.db",
            "snapshot",
            "--endpoints=http://127.1.2.3:2379",
            "--dial-timeout=5s",
            "-w",
            "/var/etcdx",
            "name=/backups/a.db",
        ] {
            assert_eq!(mounts.rewrite(arg), arg);
        }
    }

    #[test]
    fn the_longest_mount_wins() {
        let mounts = mounts();
        assert_eq!(
            mounts.rewrite("/var/etcd/data/member"),
            "/runner/pod/data/member"
        );
        assert_eq!(
            mounts.rewrite("/var/etcd/data2"),
            "/runner/pod/etcd-data/data2"
        );
    }

    #[test]
    fn knows_etcd_images() {
        for image in [
            "gcr.io/etcd-development/etcd:v3.6.16",
            "quay.io/coreos/etcd:v3.5.21",
            "etcd:3.5.0",
            "localhost:5000/etcd:v3.6.0@sha256:abcd",
        ] {
            assert!(is_etcd_image(image), "{image}");
        }
        for image in [
            "busybox:1",
            "myetcd:v3.6.0",
            "etcd:latest",
            "etcd",
            "etcd-backup:v1",
        ] {
            assert!(!is_etcd_image(image), "{image}");
        }
    }
}
