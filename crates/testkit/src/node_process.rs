//! The processes of a Pod's containers on the real node, found from this machine (the node is
//! this machine): for faults a container's own tools cannot make, such as a SIGKILL or SIGSTOP of
//! its first process, which signals sent from inside its PID namespace never reach.

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// The processes whose command is `command` in the containers of the Pod with uid `pod_uid`
/// (kubelet puts them in cgroups named after the uid: `pod<uid>` with the cgroupfs driver).
pub fn processes(pod_uid: &str, command: &str) -> Vec<Pid> {
    let in_pod = format!("pod{pod_uid}");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
            comm.trim() == command && cgroup.contains(&in_pod)
        })
        .map(Pid::from_raw)
        .collect()
}

/// Sends `signal` to the processes `command` of the Pod `pod_uid`; how many were signalled.
pub fn signal(pod_uid: &str, command: &str, signal: Signal) -> usize {
    processes(pod_uid, command)
        .into_iter()
        .filter(|pid| kill(*pid, signal).is_ok())
        .count()
}

/// Runs `iptables args` in the network namespace of the Pod `pod_uid` (entered through its process
/// `command`): the Pod's own rules, the node's are untouched. Whether it succeeded.
pub fn iptables_in_pod(pod_uid: &str, command: &str, args: &[&str]) -> bool {
    let Some(pid) = processes(pod_uid, command).into_iter().next() else {
        return false;
    };
    std::process::Command::new("nsenter")
        .args(["-t", &pid.to_string(), "-n", "iptables", "-w"])
        .args(args)
        .status()
        .is_ok_and(|status| status.success())
}
