//! app-operator: Kubernetes controllers for `MyApp`, `AppCluster`, `Sample`, `EtcdCluster`, `EtcdBackup`
//! and `SampleDB`.

pub mod controllers;
pub mod etcd;
pub mod manager;
pub mod mutation;
pub mod reconcile;
pub mod s3;
pub mod telemetry;

pub use app_operator_api as api;
