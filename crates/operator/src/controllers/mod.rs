//! One module per kind. Each has a pure part (builders, plan, status) and a reconcile that the
//! shared runner (`reconcile::runner`) drives: a new controller is its module, one line in
//! [`registry!`] and one in [`has_status!`].

pub mod appcluster;
pub mod bucket;
pub mod etcdbackup;
pub mod etcdcluster;
pub mod myapp;
pub mod restricted;
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

use futures::future::BoxFuture;

use crate::reconcile::runner::{HasStatus, Settings};

/// What every controller is started with: the runner's settings, and how the etcd controllers
/// reach members (the others ignore it).
#[derive(Clone)]
pub struct Wiring {
    pub settings: Settings,
    pub etcd: etcdcluster::EtcdSettings,
    /// The operator's own image, which the Pods that move backups to and from buckets run
    /// (`app-operator object-store`); unknown outside a Pod without `--helper-image`.
    pub helper_image: Option<String>,
}

/// Every controller, once: its `--controllers` value (the variant, lower-cased) and its module,
/// whose `NAME` and `run(wiring, shutdown)` the manager uses.
macro_rules! registry {
    ($($kind:ident => $module:ident),* $(,)?) => {
        /// The controllers this binary can run (`--controllers`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
        pub enum ControllerKind {
            $($kind),*
        }

        impl ControllerKind {
            pub const ALL: &[ControllerKind] = &[$(ControllerKind::$kind),*];

            /// The controller's name in logs, metrics and events.
            pub fn name(self) -> &'static str {
                match self {
                    $(ControllerKind::$kind => $module::NAME),*
                }
            }

            /// The controller, running until `shutdown` completes.
            pub fn run(
                self,
                wiring: Wiring,
                shutdown: impl Future<Output = ()> + Send + Sync + 'static,
            ) -> BoxFuture<'static, ()> {
                match self {
                    $(ControllerKind::$kind => Box::pin($module::run(wiring, shutdown))),*
                }
            }
        }
    };
}

registry!(
    Myapp => myapp,
    Appcluster => appcluster,
    Sample => sample,
    Etcdcluster => etcdcluster,
    Etcdbackup => etcdbackup,
    Sampledb => sampledb,
);

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
