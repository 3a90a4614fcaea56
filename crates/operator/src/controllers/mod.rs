//! One module per kind. Each has a pure part (builders, status) and a reconcile that the shared
//! runner (`reconcile::runner`) drives: a new controller is its module plus one line in
//! `manager::start_controllers`.

pub mod appcluster;
pub mod etcdbackup;
pub mod etcdcluster;
pub mod myapp;
pub mod sample;
pub mod sampledb;
