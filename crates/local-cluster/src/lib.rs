//! A real, upstream Kubernetes control plane on this machine: etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler and kwok (fake nodes), built from pinned Go modules.
//!
//! Development only: tests, `make run` and benchmarks use it; the operator never does.

pub mod audit;
mod cluster;
mod error;
mod host;
pub mod images;
pub mod install;
mod kubeconfig;
pub mod node;
pub mod object_store;
pub mod oci;
mod pki;
mod process;
pub mod registry;
pub mod tools;

pub use cluster::{
    Cluster, ClusterOptions, Kubernetes, Layout, RunningCluster, Stop, admin_client,
};
pub use error::Error;
pub use object_store::ObjectStore;
pub use tools::Tools;

use std::path::PathBuf;

/// The repository this crate was built from; the tools module and the default state live there.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap_or_else(|_| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")))
}

/// Copies the directory `from` to `to`, files and subdirectories, creating `to` and its parents.
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) -> Result<(), Error> {
    std::fs::create_dir_all(to).map_err(Error::io("creating", to))?;
    for entry in std::fs::read_dir(from).map_err(Error::io("reading", from))? {
        let entry = entry.map_err(Error::io("reading", from))?;
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type().map_err(Error::io("reading", &source))?;
        if kind.is_dir() {
            copy_dir(&source, &target)?;
        } else {
            std::fs::copy(&source, &target).map_err(Error::io("copying", &source))?;
        }
    }
    Ok(())
}
