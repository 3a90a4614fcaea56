//! The process around the controllers: which ones run, where, with what concurrency; the health
//! and metrics endpoints; shutdown.

mod client_metrics;
pub mod leader;
mod secure;
mod server;
mod startup;

use std::net::SocketAddr;
use std::sync::Arc;

use clap::ValueEnum;
use kube::Client;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::controllers;
use crate::controllers::etcdcluster::EtcdSettings;
use crate::controllers::etcdcluster::address::Addressing;
use crate::etcd::{EtcdGateway, GatewaySettings};
use crate::reconcile::runner::Settings;
use crate::telemetry::metrics::Metrics;
use crate::telemetry::readiness::Readiness;
pub use client_metrics::counted_client;
pub use server::served_port;
pub use startup::{connect, identity, own_namespace, run_until_signalled};

/// The controllers this binary can run (`--controllers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ControllerKind {
    Myapp,
    Appcluster,
    Sample,
    Etcdcluster,
    Etcdbackup,
    Sampledb,
}

impl ControllerKind {
    pub const ALL: [ControllerKind; 6] = [
        ControllerKind::Myapp,
        ControllerKind::Appcluster,
        ControllerKind::Sample,
        ControllerKind::Etcdcluster,
        ControllerKind::Etcdbackup,
        ControllerKind::Sampledb,
    ];
}

#[derive(Debug, Clone)]
pub struct Options {
    pub namespace: Option<String>,
    pub controllers: Vec<ControllerKind>,
    pub concurrency: u16,
    pub metrics_address: Option<SocketAddr>,
    pub health_address: Option<SocketAddr>,
    /// Serve metrics over HTTPS to authenticated, authorized callers only.
    pub metrics_secure: bool,
    /// `tls.crt` and `tls.key` for the secure metrics server (self-signed when unset).
    pub metrics_cert_dir: Option<std::path::PathBuf>,
    /// Run the controllers only while holding this lease.
    pub leader_election: Option<leader::LeaderElection>,
    /// How the EtcdCluster and EtcdBackup controllers reach etcd members.
    pub etcd_addressing: Addressing,
    /// Test hook: the EtcdCluster controller cancels this right after adding a member and stops
    /// before creating its Pod, as if the process had died between the two.
    pub etcd_crash_after_member_add: Option<CancellationToken>,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("building the Kubernetes client: {source}")]
    Client { source: kube::Error },
    #[error("cannot listen on {address}: {source}")]
    Bind {
        address: SocketAddr,
        source: std::io::Error,
    },
    #[error("serving {address}: {source}")]
    Serve {
        address: SocketAddr,
        source: std::io::Error,
    },
    #[error("metrics TLS: {0}")]
    Tls(#[from] secure::TlsError),
    #[error("leader election lost")]
    LeadershipLost,
}

/// Starts the selected controllers; they stop (finishing in-flight reconciles) when `shutdown` is
/// cancelled. Returns their tasks.
pub fn start_controllers(
    client: Client,
    options: &Options,
    readiness: &Readiness,
    metrics: &Arc<Metrics>,
    shutdown: &CancellationToken,
) -> JoinSet<()> {
    let settings = Settings {
        client,
        namespace: options.namespace.clone(),
        concurrency: options.concurrency,
        readiness: readiness.clone(),
        metrics: metrics.clone(),
    };
    let mut tasks = JoinSet::new();
    for kind in &options.controllers {
        let settings = settings.clone();
        let stop = shutdown.clone().cancelled_owned();
        match kind {
            ControllerKind::Myapp => tasks.spawn(controllers::myapp::run(settings, stop)),
            ControllerKind::Appcluster => tasks.spawn(controllers::appcluster::run(settings, stop)),
            ControllerKind::Sample => tasks.spawn(controllers::sample::run(settings, stop)),
            ControllerKind::Sampledb => tasks.spawn(controllers::sampledb::run(settings, stop)),
            ControllerKind::Etcdcluster => {
                let etcd = EtcdSettings {
                    addressing: options.etcd_addressing,
                    client: Arc::new(EtcdGateway::new(GatewaySettings::default())),
                    crash_after_member_add: options.etcd_crash_after_member_add.clone(),
                };
                tasks.spawn(controllers::etcdcluster::run(settings, etcd, stop))
            }
            ControllerKind::Etcdbackup => tasks.spawn(controllers::etcdbackup::run(
                settings,
                options.etcd_addressing,
                Arc::new(EtcdGateway::new(GatewaySettings::default())),
                stop,
            )),
        };
    }
    tasks
}

/// Runs the manager until `shutdown` is cancelled: probes and metrics endpoints, the leader
/// election if asked, then the controllers. On shutdown the controllers finish their in-flight
/// reconciles before the lease is released. Losing the lease stops the controllers at once and
/// returns [`Error::LeadershipLost`] (the process should exit, as controller-runtime's does).
pub async fn run(
    config: kube::Config,
    options: Options,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let readiness = Readiness::default();
    let metrics = Arc::new(Metrics::default());
    let client = counted_client(config, &metrics).map_err(|source| Error::Client { source })?;
    let mut servers = JoinSet::new();
    if let Some(address) = options.health_address {
        let listener = server::bind(address, "health probes").await?;
        servers.spawn(server::serve(
            listener,
            server::health_routes(readiness.clone()),
            shutdown.clone(),
        ));
    }
    if let Some(address) = options.metrics_address {
        let listener = server::bind(address, "metrics").await?;
        let routes = server::metrics_routes(metrics.clone());
        if options.metrics_secure {
            let tls = secure::tls_config(options.metrics_cert_dir.as_deref())?;
            let routes = secure::authorized(routes, client.clone());
            let stop = shutdown.clone();
            servers.spawn(async move {
                secure::serve_tls(listener, routes, tls, stop).await;
                Ok(())
            });
        } else {
            servers.spawn(server::serve(listener, routes, shutdown.clone()));
        }
    }

    let (leading_tx, mut leading) = watch::channel(options.leader_election.is_none());
    let release = CancellationToken::new();
    let mut election = None;
    if let Some(config) = options.leader_election.clone() {
        metrics.set_leader(&config.lease_name, false);
        readiness.set_standby(true);
        tracing::info!(lease = %config.lease_name, namespace = %config.namespace, identity = %config.identity, "attempting to acquire leader lease");
        election = Some((
            config.lease_name.clone(),
            tokio::spawn(leader::run(
                client.clone(),
                config,
                leading_tx,
                release.clone(),
            )),
        ));
        tokio::select! {
            () = shutdown.cancelled() => {}
            _ = leading.wait_for(|leading| *leading) => {}
        }
    }

    let result = if *leading.borrow() && !shutdown.is_cancelled() {
        if let Some((lease, _)) = &election {
            metrics.set_leader(lease, true);
        }
        readiness.set_standby(false);
        let mut controllers = start_controllers(client, &options, &readiness, &metrics, &shutdown);
        tokio::select! {
            () = async { while controllers.join_next().await.is_some() {} } => Ok(()),
            _ = leading.wait_for(|leading| !*leading) => {
                controllers.abort_all();
                Err(Error::LeadershipLost)
            }
        }
    } else {
        Ok(())
    };
    release.cancel();
    if let Some((lease, task)) = election {
        let _ = task.await;
        metrics.set_leader(&lease, false);
    }
    shutdown.cancel();
    while let Some(joined) = servers.join_next().await {
        if let Ok(Err(error)) = joined {
            tracing::error!(%error, "server failed");
        }
    }
    result
}
