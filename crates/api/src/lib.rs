//! app-operator's custom resources. Types only: the CRDs are generated from them
//! (`app-operator crds`), so the Rust types are the single source of truth for the API.

// kube's derive takes one `printcolumn(...)` per column; clippy reads the repeats as duplicates.
#![allow(clippy::duplicated_attributes)]

pub mod appcluster;
pub mod conditions;
pub mod etcdbackup;
pub mod etcdcluster;
pub mod myapp;
pub mod quantity;
pub mod sample;
pub mod sampledb;
mod validation;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

pub use appcluster::{AppCluster, AppClusterSpec, AppClusterStatus};
pub use etcdbackup::{EtcdBackup, EtcdBackupSpec, EtcdBackupStatus};
pub use etcdcluster::{EtcdCluster, EtcdClusterSpec, EtcdClusterStatus};
pub use myapp::{MyApp, MyAppSpec, MyAppStatus};
pub use sample::{Sample, SampleFields, SampleStatus};
pub use sampledb::{SampleDB, SampleDBSpec, SampleDBStatus};

/// Asks for a reconcile now, as Flux's `reconcile.fluxcd.io/requestedAt`: any new value (`kubectl
/// app-operator retry` writes the time) makes the controller look at the object again, also one
/// whose last failure was permanent and that otherwise waits for its spec to change.
pub const RECONCILE_REQUESTED_AT: &str = "app-operator.example.com/reconcile-requested-at";

/// Every CRD this operator serves, in a stable order.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        MyApp::crd(),
        AppCluster::crd(),
        Sample::crd(),
        EtcdCluster::crd(),
        EtcdBackup::crd(),
        SampleDB::crd(),
    ]
}
