//! The process around the controllers: which ones run, where, with what concurrency; the health
//! and metrics endpoints; shutdown.

pub mod metrics;
pub mod readiness;
mod server;

use std::net::SocketAddr;
use std::sync::Arc;

use clap::ValueEnum;
use kube::Client;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::controllers::{self, Settings};
use metrics::Metrics;
use readiness::Readiness;

/// The controllers this binary can run (`--controllers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ControllerKind {
    Myapp,
    Appcluster,
    Sample,
}

impl ControllerKind {
    pub const ALL: [ControllerKind; 3] = [
        ControllerKind::Myapp,
        ControllerKind::Appcluster,
        ControllerKind::Sample,
    ];
}

#[derive(Debug, Clone)]
pub struct Options {
    pub namespace: Option<String>,
    pub controllers: Vec<ControllerKind>,
    pub concurrency: u16,
    pub metrics_address: Option<SocketAddr>,
    pub health_address: Option<SocketAddr>,
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
}

/// A client whose every request is counted in `rest_client_requests_total`.
pub fn counted_client(config: kube::Config, metrics: &Arc<Metrics>) -> Result<Client, kube::Error> {
    let metrics = metrics.clone();
    let count =
        tower::util::MapRequestLayer::new(move |request: http::Request<kube::client::Body>| {
            metrics.api_request(request.method());
            request
        });
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&count)
        .build())
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
        };
    }
    tasks
}

/// Runs the manager until `shutdown` is cancelled: probes and metrics endpoints, then the
/// controllers; returns once every controller has stopped.
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
        let listener = server::bind(address).await?;
        servers.spawn(server::serve(
            listener,
            server::health_routes(readiness.clone()),
            shutdown.clone(),
        ));
    }
    if let Some(address) = options.metrics_address {
        let listener = server::bind(address).await?;
        servers.spawn(server::serve(
            listener,
            server::metrics_routes(metrics.clone()),
            shutdown.clone(),
        ));
    }
    let mut controllers = start_controllers(client, &options, &readiness, &metrics, &shutdown);
    while controllers.join_next().await.is_some() {}
    shutdown.cancel();
    while let Some(result) = servers.join_next().await {
        if let Ok(Err(error)) = result {
            tracing::error!(%error, "server failed");
        }
    }
    Ok(())
}
