//! Process concerns around the manager: connecting to the API server, who this process is,
//! signals, and the bounded wait for in-flight reconciles on shutdown.

use std::path::Path;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use tokio_util::sync::CancellationToken;

use super::Options;

/// In-flight reconciles get this long after SIGTERM: less than the default 10 s grace period.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(7);

/// The client configuration (from `kubeconfig`, else in-cluster or `$KUBECONFIG`), after checking
/// that the API server answers: fail fast and clearly instead of retrying watches forever.
pub async fn connect(kubeconfig: Option<&Path>) -> Result<Config, String> {
    let config = match kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .map_err(|e| format!("reading kubeconfig {}: {e}", path.display()))?;
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|e| format!("kubeconfig {}: {e}", path.display()))?
        }
        None => Config::infer()
            .await
            .map_err(|e| format!("no Kubernetes configuration found: {e}"))?,
    };
    let server = config.cluster_url.clone();
    let client = Client::try_from(config.clone())
        .map_err(|e| format!("building the Kubernetes client: {e}"))?;
    match tokio::time::timeout(Duration::from_secs(10), client.apiserver_version()).await {
        Ok(Ok(_)) => Ok(config),
        Ok(Err(error)) => Err(format!(
            "cannot reach the Kubernetes API server at {server}: {error}"
        )),
        Err(_) => Err(format!(
            "cannot reach the Kubernetes API server at {server}: timed out after 10s"
        )),
    }
}

/// Runs the manager until SIGTERM or Ctrl-C, then gives in-flight reconciles
/// [`SHUTDOWN_TIMEOUT`] to finish.
pub async fn run_until_signalled(config: Config, options: Options) -> Result<(), String> {
    tracing::info!(controllers = ?options.controllers, namespace = ?options.namespace, "starting manager");
    let shutdown = CancellationToken::new();
    let signalled = shutdown.clone();
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("Stopping and waiting for in-flight reconciles");
        signalled.cancel();
    });
    let manager = super::run(config, options, shutdown.clone());
    tokio::pin!(manager);
    tokio::select! {
        result = &mut manager => result.map_err(|e| e.to_string()),
        () = async { shutdown.cancelled().await; tokio::time::sleep(SHUTDOWN_TIMEOUT).await } => {
            tracing::warn!("in-flight reconciles did not finish in {SHUTDOWN_TIMEOUT:?}; exiting");
            Ok(())
        }
    }
}

/// The image of this Pod's first container (the manager's), when the operator runs in a Pod
/// (`POD_NAME`): what backup Jobs run `app-operator object-store` from. Outside a Pod, or when
/// the Pod cannot be read, none (and backups to a bucket say how to give one).
pub async fn own_image(client: &kube::Client) -> Option<String> {
    let name = std::env::var("POD_NAME").ok().filter(|n| !n.is_empty())?;
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(client.clone(), &own_namespace());
    match pods.get(&name).await {
        Ok(pod) => {
            let image = pod.spec?.containers.into_iter().next()?.image;
            tracing::info!(
                image = image.as_deref().unwrap_or(""),
                "helper image from this Pod"
            );
            image
        }
        Err(error) => {
            tracing::warn!(%error, pod = %name, "cannot read this Pod for its image; backups to a bucket wait for --helper-image");
            None
        }
    }
}

/// The namespace this Pod runs in (from its service account), else `default`.
pub fn own_namespace() -> String {
    std::env::var("POD_NAMESPACE")
        .ok()
        .or_else(|| {
            std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace").ok()
        })
        .map(|n| n.trim().to_owned())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".into())
}

/// A leader election identity unique to this process: the Pod name (`POD_NAME`, else the host
/// name, which is the Pod name in a cluster) and a random suffix, as client-go uses. The leader
/// writes policy (config/fencing/leader_writes_policy.yaml) reads the Pod name back from it.
pub fn identity() -> String {
    let host = std::env::var("POD_NAME")
        .ok()
        .filter(|name| !name.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
        })
        .unwrap_or_default();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{host}_{:08x}{:08x}", std::process::id(), nanos)
}

async fn wait_for_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::error!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = terminate => {}
    }
}
