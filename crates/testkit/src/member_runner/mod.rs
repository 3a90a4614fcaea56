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

mod pods;
mod runner;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::Api;
use tokio::sync::{oneshot, watch};

use crate::etcd::EtcdProcess;

use self::pods::pod_name;
use self::runner::Runner;

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
