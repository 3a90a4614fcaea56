//! What the runner reads from a Pod, pure: whether and how it runs it, the binary for each
//! command, and where each volume mount is on this machine.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, Pod};
use kube::ResourceExt;

use super::OWN_DATA_DIR;

pub(super) fn key(pod: &Pod) -> String {
    format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any())
}

pub(super) fn pod_name(args: &[String]) -> &str {
    flag(args, "--name").unwrap_or_default()
}

pub(super) fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .find_map(|arg| arg.strip_prefix(name)?.strip_prefix('='))
}

/// What the runner does with a Pod.
pub(super) enum PodKind<'a> {
    /// An EtcdCluster member: its `etcd` container runs until the Pod goes.
    Member(&'a Container),
    /// Any other Pod on the etcd image (a backup Job's): each command runs to its end.
    RunToCompletion,
}

/// `None` for a Pod with a container on another image: the runner has no binaries for it.
pub(super) fn kind(pod: &Pod) -> Option<PodKind<'_>> {
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
pub(super) fn is_etcd_image(image: &str) -> bool {
    let name_and_tag = image.rsplit_once('/').map_or(image, |(_, last)| last);
    name_and_tag
        .strip_prefix("etcd:")
        .map(|tag| tag.strip_prefix('v').unwrap_or(tag))
        .is_some_and(|version| version.starts_with(|c: char| c.is_ascii_digit()))
}

pub(super) fn is_member(container: &Container) -> bool {
    container.name == "etcd"
        && container
            .command
            .iter()
            .flatten()
            .next()
            .is_some_and(|program| program_name(program) == "etcd")
}

/// A program's file name: `etcdctl` for `/usr/local/bin/etcdctl`.
pub(super) fn program_name(program: &str) -> &str {
    Path::new(program)
        .file_name()
        .and_then(|name| name.to_str())
        .unwrap_or(program)
}

pub(super) fn init_containers(pod: &Pod) -> &[Container] {
    pod.spec
        .as_ref()
        .and_then(|spec| spec.init_containers.as_deref())
        .unwrap_or_default()
}

/// The binary for an image tag: the pinned etcd for its minor release, `etcd-3.5` for 3.5.
pub(super) fn binary_for(image: &str) -> Option<(PathBuf, String)> {
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
pub(super) fn program_binary(program: &str, image: &str) -> Option<PathBuf> {
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
pub(super) struct Mounts(Vec<(String, PathBuf)>);

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
    pub(super) fn of(container: &Container, volumes: &HashMap<String, PathBuf>) -> Mounts {
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
    pub(super) fn rewrite(&self, value: &str) -> String {
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
pub(super) fn member_args(
    container: &Container,
    mounts: &Mounts,
    pod_dir: &Path,
) -> (Vec<String>, PathBuf) {
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
