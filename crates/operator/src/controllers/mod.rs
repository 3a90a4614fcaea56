//! One module per kind. Each has a pure part (builders, status) and a reconcile that the shared
//! runner (`reconcile::runner`) drives: a new controller is its module plus one line in
//! `manager::start_controllers`.

pub mod appcluster;
pub mod etcdbackup;
pub mod etcdcluster;
pub mod myapp;
pub mod sample;
pub mod sampledb;

use app_operator_api::etcdbackup::EtcdBackupStatus;
use app_operator_api::etcdcluster::EtcdClusterStatus;
use app_operator_api::sampledb::SampleDBStatus;
use app_operator_api::{
    AppCluster, AppClusterStatus, EtcdBackup, EtcdCluster, MyApp, MyAppStatus, Sample, SampleDB,
    SampleStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::reconcile::runner::HasStatus;

/// Each kind's status, for the runner to write.
macro_rules! has_status {
    ($($kind:ty => $status:ty),* $(,)?) => {
        $(impl HasStatus for $kind {
            type Status = $status;

            fn status(&self) -> Option<&$status> {
                self.status.as_ref()
            }
        })*
    };
}

has_status!(
    AppCluster => AppClusterStatus,
    EtcdBackup => EtcdBackupStatus,
    EtcdCluster => EtcdClusterStatus,
    Sample => SampleStatus,
    SampleDB => SampleDBStatus,
);

impl HasStatus for MyApp {
    type Status = MyAppStatus;

    fn status(&self) -> Option<&MyAppStatus> {
        self.status.as_ref()
    }

    /// `lastUpdateTime` says when the status last changed.
    fn stamp(status: &mut MyAppStatus) {
        status.last_update_time = Some(Time(Timestamp::now()));
    }
}
