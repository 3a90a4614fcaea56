//! The process around the controllers: which ones run, where, with what concurrency; the health
//! and metrics endpoints; shutdown.

mod api_client;
pub mod leader;
mod secure;
mod server;
mod startup;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::controllers::Wiring;
use crate::controllers::etcdcluster::EtcdSettings;
use crate::etcd::address::Addressing;
use crate::etcd::{EtcdClient, MemberPods};
use crate::reconcile::runner::Settings;
use crate::telemetry::metrics::Metrics;
use crate::telemetry::readiness::Readiness;
pub use api_client::api_client;
pub use server::served_port;
pub use startup::{connect, identity, own_namespace, run_until_signalled};

pub use crate::controllers::ControllerKind;

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
    /// The client both talk to etcd with.
    pub etcd_client: EtcdClient,
    /// Where that client's resolver looks members up first: the EtcdCluster controller fills it.
    pub etcd_member_pods: MemberPods,
    /// The image backup Jobs and restoring Pods run `app-operator object-store` from; this
    /// Pod's own when unset and the operator runs in one.
    pub helper_image: Option<String>,
    pub timeouts: Timeouts,
}

/// How long the operator waits on the API server: no request, and no watch, can hang forever on
/// a half-open connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Every request but watches: no answer within this long fails it (and the caller retries).
    /// Above the API server's own 60 s limit, so a slow answer still arrives.
    pub request: Duration,
    /// Each watch asks the API server to end it after this long and is then renewed (from where
    /// it was, without a new list); one silent for 5 s longer is taken for a dead connection.
    pub watch: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            request: Duration::from_secs(70),
            watch: Duration::from_secs(60),
        }
    }
}

impl Timeouts {
    fn watch_secs(&self) -> u32 {
        u32::try_from(self.watch.as_secs())
            .unwrap_or(u32::MAX)
            .max(1)
    }
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
    /// A controller ended while the manager was running: the process exits so that it is
    /// restarted whole, instead of running on without that controller.
    #[error("controller {controller} stopped unexpectedly: {cause}")]
    ControllerStopped {
        controller: &'static str,
        cause: String,
    },
}

/// The running controllers: each task, and the controller it runs.
pub struct Controllers {
    tasks: JoinSet<()>,
    names: HashMap<tokio::task::Id, &'static str>,
}

impl Controllers {
    fn spawn(&mut self, name: &'static str, controller: impl Future<Output = ()> + Send + 'static) {
        let task = self.tasks.spawn(controller);
        self.names.insert(task.id(), name);
    }

    /// Waits until every controller has stopped. One that stops before `shutdown` (it returned
    /// or panicked) is an error, and the others are stopped too.
    pub async fn supervise(mut self, shutdown: &CancellationToken) -> Result<(), Error> {
        while let Some(joined) = self.tasks.join_next_with_id().await {
            if shutdown.is_cancelled() {
                continue;
            }
            let (id, cause) = match joined {
                Ok((id, ())) => (id, "it returned".to_owned()),
                Err(error) if error.is_panic() => (error.id(), "it panicked".to_owned()),
                Err(error) => (error.id(), error.to_string()),
            };
            let controller = self.names.get(&id).copied().unwrap_or("unknown");
            self.tasks.abort_all();
            return Err(Error::ControllerStopped { controller, cause });
        }
        Ok(())
    }
}

/// Starts the selected controllers; they stop (finishing in-flight reconciles) when `shutdown` is
/// cancelled.
pub fn start_controllers(
    client: Client,
    options: &Options,
    readiness: &Readiness,
    metrics: &Arc<Metrics>,
    shutdown: &CancellationToken,
) -> Controllers {
    let settings = Settings {
        client,
        namespace: options.namespace.clone(),
        concurrency: options.concurrency,
        readiness: readiness.clone(),
        metrics: metrics.clone(),
        watch_timeout_secs: options.timeouts.watch_secs(),
    };
    let mut running = Controllers {
        tasks: JoinSet::new(),
        names: HashMap::new(),
    };
    let wiring = Wiring {
        settings,
        etcd: EtcdSettings {
            addressing: options.etcd_addressing,
            client: options.etcd_client.0.clone(),
            member_pods: options.etcd_member_pods.clone(),
        },
        helper_image: options.helper_image.clone(),
    };
    for kind in &options.controllers {
        let stop = shutdown.clone().cancelled_owned();
        running.spawn(kind.name(), kind.run(wiring.clone(), stop));
    }
    running
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
    let client = api_client(config, options.timeouts.request, &metrics)
        .map_err(|source| Error::Client { source })?;
    let mut options = options;
    if options.helper_image.is_none() {
        options.helper_image = startup::own_image(&client).await;
    }
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
            if !address.ip().is_loopback() {
                tracing::warn!(
                    %address,
                    "serving /metrics over plain HTTP to every client that reaches {address}; --metrics-secure serves it over HTTPS to authorized clients only"
                );
            }
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
        let controllers = start_controllers(client, &options, &readiness, &metrics, &shutdown);
        // Losing the lease drops the controllers, which aborts their tasks at once.
        tokio::select! {
            result = controllers.supervise(&shutdown) => result,
            _ = leading.wait_for(|leading| !*leading) => Err(Error::LeadershipLost),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn controllers(
        tasks: Vec<(&'static str, futures::future::BoxFuture<'static, ()>)>,
    ) -> Controllers {
        let mut running = Controllers {
            tasks: JoinSet::new(),
            names: HashMap::new(),
        };
        for (name, task) in tasks {
            running.spawn(name, task);
        }
        running
    }

    #[tokio::test]
    async fn a_controller_that_panics_or_returns_stops_the_manager_with_its_name() {
        let shutdown = CancellationToken::new();
        let panicking = controllers(vec![
            ("steady", Box::pin(std::future::pending())),
            ("broken", Box::pin(async { panic!("a reconcile panicked") })),
        ]);
        let stopped = panicking
            .supervise(&shutdown)
            .await
            .unwrap_err()
            .to_string();
        assert_eq!(
            stopped,
            "controller broken stopped unexpectedly: it panicked"
        );
        let returning = controllers(vec![
            ("steady", Box::pin(std::future::pending())),
            ("quitter", Box::pin(async {})),
        ]);
        let stopped = returning
            .supervise(&shutdown)
            .await
            .unwrap_err()
            .to_string();
        assert_eq!(
            stopped,
            "controller quitter stopped unexpectedly: it returned"
        );
    }

    #[tokio::test]
    async fn controllers_that_stop_on_shutdown_stop_the_manager_cleanly() {
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        let running = controllers(vec![
            ("first", Box::pin(async move { stop.cancelled().await })),
            ("second", Box::pin(shutdown.clone().cancelled_owned())),
        ]);
        shutdown.cancel();
        assert!(running.supervise(&shutdown).await.is_ok());
    }
}
