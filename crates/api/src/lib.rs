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

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSON,
};
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

/// Asks a SampleDB for a backup now: any new value (`kubectl app-operator backup` writes the
/// time) starts one backup Job, annotated with the same value, once the database is up and no
/// other backup runs; `status.backup.lastHandledRequest` then shows the value.
pub const BACKUP_REQUESTED_AT: &str = "app-operator.example.com/backup-requested-at";

/// Every CRD this operator serves, in a stable order.
pub fn crds() -> Vec<CustomResourceDefinition> {
    let mut crds = vec![
        MyApp::crd(),
        AppCluster::crd(),
        Sample::crd(),
        EtcdCluster::crd(),
        EtcdBackup::crd(),
        SampleDB::crd(),
    ];
    for crd in &mut crds {
        default_status_to_unobserved(crd);
    }
    crds
}

/// Gives an object the status `{observedGeneration: 0}` until the operator writes one (the API
/// server defaults it on every read). Generations start at 1, so GitOps tools that judge health by
/// kstatus's rules (Flux, Argo CD) read a just-applied object as in progress, not as current as
/// they read an object with no status at all.
fn default_status_to_unobserved(crd: &mut CustomResourceDefinition) {
    for version in &mut crd.spec.versions {
        let status = version
            .schema
            .as_mut()
            .and_then(|schema| schema.open_api_v3_schema.as_mut())
            .and_then(|root| root.properties.as_mut())
            .and_then(|properties| properties.get_mut("status"));
        if let Some(status) = status {
            status.default = Some(JSON(serde_json::json!({ "observedGeneration": 0 })));
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    /// The status a kind's CRD defaults to.
    fn defaulted_status(kind: &str) -> serde_json::Value {
        let crd = crds()
            .into_iter()
            .find(|crd| crd.spec.names.kind == kind)
            .unwrap();
        let version = crd.spec.versions.first().unwrap();
        let root = version.schema.as_ref().unwrap().open_api_v3_schema.as_ref();
        let status = &root.unwrap().properties.as_ref().unwrap()["status"];
        status.default.clone().expect(kind).0
    }

    #[test]
    fn every_kind_reads_its_defaulted_status_as_generation_0() {
        let generations = [
            serde_json::from_value::<MyAppStatus>(defaulted_status("MyApp"))
                .map(|s| s.observed_generation),
            serde_json::from_value::<AppClusterStatus>(defaulted_status("AppCluster"))
                .map(|s| s.observed_generation),
            serde_json::from_value::<SampleStatus>(defaulted_status("Sample"))
                .map(|s| s.observed_generation),
            serde_json::from_value::<EtcdClusterStatus>(defaulted_status("EtcdCluster"))
                .map(|s| s.observed_generation),
            serde_json::from_value::<EtcdBackupStatus>(defaulted_status("EtcdBackup"))
                .map(|s| s.observed_generation),
            serde_json::from_value::<SampleDBStatus>(defaulted_status("SampleDB"))
                .map(|s| s.observed_generation),
        ];
        for generation in generations {
            assert_eq!(generation.unwrap(), Some(0));
        }
    }
}
