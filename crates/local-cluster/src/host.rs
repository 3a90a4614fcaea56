//! What the real node changes on the machine, and how each change is undone: Debian packages it
//! needs, a lock (one real node per machine), sysctls, iptables chains, the bridge, mounts,
//! cgroups and files outside the node's directory.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::error::Error;
use crate::process;

/// The lock: the state directory of the cluster whose real node runs on this machine.
const LOCK: &str = "/run/lock/app-operator-real-node";

/// The programs the node runs and the Debian packages that have them.
const PACKAGES: &[(&str, &str)] = &[
    ("/usr/bin/containerd", "containerd"),
    ("/usr/sbin/runc", "runc"),
    ("/usr/lib/cni/bridge", "containernetworking-plugins"),
    ("/usr/sbin/iptables", "iptables"),
    ("/usr/bin/docker-registry", "docker-registry"),
];

/// Installs (apt-get) the Debian packages the node needs that are missing.
pub fn ensure_packages() -> Result<(), Error> {
    let missing: Vec<&str> = PACKAGES
        .iter()
        .filter(|(path, _)| !Path::new(path).exists())
        .map(|(_, package)| *package)
        .collect();
    install_debian_packages(&missing, "the real node")
}

/// `apt-get update` and `apt-get install` of `packages`, saying what for; nothing when empty.
pub fn install_debian_packages(packages: &[&str], what_for: &str) -> Result<(), Error> {
    if packages.is_empty() {
        return Ok(());
    }
    eprintln!("installing Debian's {} for {what_for}", packages.join(", "));
    let install = [&["install", "-y", "--no-install-recommends"][..], packages].concat();
    for args in [&["update"][..], &install] {
        process::run(
            Command::new("apt-get")
                .args(args)
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )
        .map_err(|error| {
            Error::Prerequisite(format!(
                "{what_for} needs Debian's {}, and `apt-get {}` failed: {error}",
                packages.join(", "),
                args.join(" ")
            ))
        })?;
    }
    Ok(())
}

/// Takes the machine's real-node lock for `state_dir`, refusing while another cluster's node runs.
pub fn take_lock(state_dir: &Path) -> Result<(), Error> {
    if let Ok(holder) = fs::read_to_string(LOCK) {
        let holder = PathBuf::from(holder.trim());
        let layout = crate::Layout {
            state_dir: holder.clone(),
        };
        if holder != state_dir && !layout.running().is_empty() {
            return Err(Error::Invalid(format!(
                "a real node already runs on this machine (the cluster in {}); one machine has \
                 one (its bridge, iptables chains and cgroups are the machine's). Stop it first: \
                 APP_OPERATOR_CLUSTER_DIR={} make cluster-down",
                holder.display(),
                holder.display()
            )));
        }
    }
    if let Some(dir) = Path::new(LOCK).parent() {
        fs::create_dir_all(dir).map_err(Error::io("creating", dir))?;
    }
    fs::write(LOCK, state_dir.display().to_string()).map_err(Error::io("writing", LOCK))
}

pub fn release_lock(state_dir: &Path) {
    if fs::read_to_string(LOCK).is_ok_and(|holder| Path::new(holder.trim()) == state_dir) {
        let _ = fs::remove_file(LOCK);
    }
}

/// The sysctls the kubelet and the bridge plugin change.
const SYSCTLS: &[&str] = &[
    "net/ipv4/ip_forward",
    "vm/overcommit_memory",
    "kernel/panic",
    "kernel/panic_on_oops",
];

/// Paths outside the node's directory that the kubelet, containerd or the CNI plugins create.
const CREATED_PATHS: &[&str] = &[
    "/var/lib/kubelet",
    "/var/log/containers",
    "/var/log/pods",
    "/var/lib/cni",
    "/run/containerd",
    "/run/netns",
    "/etc/cni",
    "/opt/cni",
];

/// The machine as it was before the node started: sysctl values, which of [`CREATED_PATHS`]
/// existed, and whether `/run/netns` was a mount point (containerd bind-mounts it onto itself).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HostRecord {
    pub sysctls: Vec<(String, String)>,
    pub existing_paths: Vec<String>,
    pub netns_was_mounted: bool,
}

impl HostRecord {
    pub fn capture() -> HostRecord {
        HostRecord {
            sysctls: SYSCTLS
                .iter()
                .filter_map(|name| {
                    let value = fs::read_to_string(format!("/proc/sys/{name}")).ok()?;
                    Some(((*name).to_owned(), value.trim().to_owned()))
                })
                .collect(),
            existing_paths: CREATED_PATHS
                .iter()
                .filter(|path| Path::new(path).exists())
                .map(|path| (*path).to_owned())
                .collect(),
            netns_was_mounted: !mounts_at(Path::new("/run/netns")).is_empty(),
        }
    }

    pub fn save(&self, path: &Path) -> Result<(), Error> {
        let text = serde_json::to_string_pretty(self)
            .map_err(|e| Error::Invalid(format!("recording the machine's state: {e}")))?;
        fs::write(path, text).map_err(Error::io("writing", path))
    }

    pub fn load(path: &Path) -> Option<HostRecord> {
        serde_json::from_str(&fs::read_to_string(path).ok()?).ok()
    }

    /// Puts back what was: sysctl values, the `/run/netns` mount, and removes what was created.
    pub fn restore(&self) {
        for (name, value) in &self.sysctls {
            let _ = fs::write(format!("/proc/sys/{name}"), value);
        }
        if !self.netns_was_mounted {
            for _ in mounts_at(Path::new("/run/netns")) {
                let _ = nix::mount::umount2("/run/netns", nix::mount::MntFlags::MNT_DETACH);
            }
        }
        for path in CREATED_PATHS {
            if !self.existing_paths.iter().any(|p| p == path) {
                let _ = fs::remove_dir_all(path);
            }
        }
    }
}

/// Refuses forwarding from the Pod network to anywhere but the Pod network itself: a Pod reaches
/// other Pods, Services (translated to Pods or to this machine's own addresses, which are not
/// forwarded) and this machine, and nothing beyond it.
pub fn keep_pod_traffic_here(pod_cidr: &str, bridge: &str, chain: &str) -> Result<(), Error> {
    let iptables = |args: &[&str]| process::run(Command::new("iptables").args(args));
    if iptables(&["-w", "-L", chain, "-n"]).is_err() {
        iptables(&["-w", "-N", chain])?;
    }
    iptables(&["-w", "-F", chain])?;
    iptables(&[
        "-w", "-A", chain, "-s", pod_cidr, "-o", bridge, "-j", "RETURN",
    ])?;
    iptables(&[
        "-w",
        "-A",
        chain,
        "-s",
        pod_cidr,
        "-m",
        "comment",
        "--comment",
        "app-operator real node: Pod traffic stays on this machine",
        "-j",
        "REJECT",
    ])?;
    if iptables(&["-w", "-C", "FORWARD", "-j", chain]).is_err() {
        iptables(&["-w", "-I", "FORWARD", "1", "-j", chain])?;
    }
    Ok(())
}

/// Pids of containerd shims serving the containerd at `socket` (they outlive containerd).
pub fn shims(socket: &Path) -> Vec<i32> {
    let address = socket.display().to_string();
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
                let cmdline = String::from_utf8_lossy(&cmdline);
                cmdline.contains("containerd-shim") && cmdline.contains(&address)
            })
        })
        .collect()
}

/// SIGKILLs the shims of the containerd at `socket` (and so their containers' init processes,
/// which the shims' subreaper role leaves to them).
pub fn kill_shims(socket: &Path) {
    for pid in shims(socket) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
}

/// The `(table, chain)` of every iptables (v4 and v6) chain whose name starts with one of
/// `prefixes`.
pub fn iptables_chains(prefixes: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for program in ["iptables-save", "ip6tables-save"] {
        let Ok(saved) = process::run(&mut Command::new(program)) else {
            continue;
        };
        let mut table = "";
        for line in saved.lines() {
            if let Some(name) = line.strip_prefix('*') {
                table = name;
            } else if let Some(chain) = line.strip_prefix(':') {
                let name = chain.split_whitespace().next().unwrap_or_default();
                if prefixes.iter().any(|prefix| name.starts_with(prefix)) {
                    found.push(format!("{program}: {table}/{name}"));
                }
            }
        }
    }
    found
}

/// Removes every iptables (v4 and v6) chain whose name starts with one of `prefixes`, and every
/// rule that jumps to one, leaving the machine's other rules as they are.
pub fn remove_iptables_chains(prefixes: &[&str]) -> Result<(), Error> {
    for (save, restore) in [
        ("iptables-save", "iptables-restore"),
        ("ip6tables-save", "ip6tables-restore"),
    ] {
        let Ok(saved) = process::run(&mut Command::new(save)) else {
            continue;
        };
        let kept = without_chains(&saved, prefixes);
        if kept != saved {
            process::run_with_input(Command::new(restore).arg("-w"), &kept)?;
        }
    }
    Ok(())
}

/// `iptables-save` output without the chains named by `prefixes` and the rules that use them.
fn without_chains(saved: &str, prefixes: &[&str]) -> String {
    let ours = |name: &str| prefixes.iter().any(|prefix| name.starts_with(prefix));
    saved
        .lines()
        .filter(|line| {
            if let Some(chain) = line.strip_prefix(':') {
                return !ours(chain.split_whitespace().next().unwrap_or_default());
            }
            if let Some(rule) = line.strip_prefix("-A ") {
                let mut words = rule.split_whitespace();
                if words.next().is_some_and(ours) {
                    return false;
                }
                let mut words = rule.split_whitespace().peekable();
                while let Some(word) = words.next() {
                    if (word == "-j" || word == "-g") && words.peek().is_some_and(|t| ours(t)) {
                        return false;
                    }
                }
            }
            true
        })
        .map(|line| format!("{line}\n"))
        .collect()
}

pub fn link_exists(name: &str) -> bool {
    Path::new("/sys/class/net").join(name).exists()
}

pub fn delete_link(name: &str) {
    if link_exists(name) {
        let _ = process::run(Command::new("ip").args(["link", "delete", name]));
    }
}

/// Mount points at `dir` or below it, deepest first.
pub fn mounts_below(dir: &Path) -> Vec<String> {
    let prefix = dir.display().to_string();
    let mut mounts: Vec<String> = mount_points()
        .into_iter()
        .filter(|point| point == &prefix || point.starts_with(&format!("{prefix}/")))
        .collect();
    mounts.sort_by_key(|point| std::cmp::Reverse(point.len()));
    mounts
}

fn mounts_at(dir: &Path) -> Vec<String> {
    let at = dir.display().to_string();
    mount_points().into_iter().filter(|p| *p == at).collect()
}

fn mount_points() -> Vec<String> {
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.split_whitespace().nth(4))
        .map(unescape_mount_point)
        .collect()
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape_mount_point(field: &str) -> String {
    field
        .replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

/// Unmounts everything at or below `dir` (deepest first; lazily, so a busy one goes too).
pub fn unmount_below(dir: &Path) {
    for mount in mounts_below(dir) {
        let _ = nix::mount::umount2(mount.as_str(), nix::mount::MntFlags::MNT_DETACH);
    }
}

/// Unmounts and removes the network namespaces the CNI plugins' sandboxes left in `/run/netns`.
pub fn unmount_pod_network_namespaces() {
    for mount in mounts_below(Path::new("/run/netns")) {
        if mount.contains("/cni-") {
            let _ = nix::mount::umount2(mount.as_str(), nix::mount::MntFlags::MNT_DETACH);
            let _ = fs::remove_file(&mount);
        }
    }
}

/// `<hierarchy>/<name>` in every cgroup hierarchy that has one.
pub fn cgroups(name: &str) -> Vec<PathBuf> {
    let Ok(hierarchies) = fs::read_dir("/sys/fs/cgroup") else {
        return Vec::new();
    };
    hierarchies
        .filter_map(Result::ok)
        .map(|hierarchy| hierarchy.path().join(name))
        .filter(|dir| dir.is_dir())
        .collect()
}

/// SIGKILLs every process in the cgroup `name` and those below it (every hierarchy holds them
/// all; the first is read).
pub fn kill_cgroup_processes(name: &str) {
    fn kill_below(dir: &Path) {
        let procs = fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs
            .lines()
            .filter_map(|line| line.trim().parse::<i32>().ok())
        {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        for child in fs::read_dir(dir)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
        {
            if child.file_type().is_ok_and(|t| t.is_dir()) {
                kill_below(&child.path());
            }
        }
    }
    if let Some(dir) = cgroups(name).first() {
        kill_below(dir);
    }
}

/// Removes the cgroup `name` (and those below it, deepest first) in every hierarchy.
pub fn remove_cgroups(name: &str) {
    for dir in cgroups(name) {
        remove_cgroup_tree(&dir);
    }
}

fn remove_cgroup_tree(dir: &Path) {
    if let Ok(children) = fs::read_dir(dir) {
        for child in children.filter_map(Result::ok) {
            if child.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup_tree(&child.path());
            }
        }
    }
    // A cgroup directory is removed with rmdir (its files are the kernel's).
    let _ = fs::remove_dir(dir);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removes_our_chains_and_the_rules_that_jump_to_them_only() {
        let saved = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:KUBE-FIREWALL - [0:0]\n:DOCKER - [0:0]\n-A INPUT -j KUBE-FIREWALL\n-A FORWARD -j APP-OPERATOR-NODE\n-A FORWARD -j DOCKER\n-A KUBE-FIREWALL -j DROP\n:APP-OPERATOR-NODE - [0:0]\nCOMMIT\n";
        let kept = without_chains(saved, &["KUBE-", "APP-OPERATOR-NODE"]);
        assert_eq!(
            kept,
            "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:DOCKER - [0:0]\n-A FORWARD -j DOCKER\nCOMMIT\n"
        );
    }

    #[test]
    fn reads_escaped_mount_points() {
        assert_eq!(unescape_mount_point("/a\\040b"), "/a b");
    }
}
