//! `/healthz`, `/readyz` and `/metrics` over plain HTTP.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::Error;
use crate::telemetry::metrics::Metrics;
use crate::telemetry::readiness::Readiness;

/// Binds `address` (port 0 picks a free port) and logs the address actually served.
pub async fn bind(address: SocketAddr, what: &'static str) -> Result<TcpListener, Error> {
    let listener = TcpListener::bind(address)
        .await
        .map_err(|source| Error::Bind { address, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| Error::Bind { address, source })?;
    tracing::info!(server = what, bind_address = %bound, "Serving");
    Ok(listener)
}

/// The port `server` (as named to [`bind`]) was bound to, read from the operator's JSON log:
/// tests and the benchmark start it on port 0, since ports picked outside could be taken twice.
pub fn served_port(json_log: &str, server: &str) -> Option<u16> {
    let line = json_log
        .lines()
        .find(|l| l.contains("\"Serving\"") && l.contains(&format!("\"server\":\"{server}\"")))?;
    let line: serde_json::Value = serde_json::from_str(line).ok()?;
    line.get("bind_address")?
        .as_str()?
        .rsplit(':')
        .next()?
        .parse()
        .ok()
}

pub async fn serve(
    listener: TcpListener,
    routes: Router,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let address = listener.local_addr().map_err(|source| Error::Serve {
        address: ([0, 0, 0, 0], 0).into(),
        source,
    })?;
    axum::serve(listener, routes)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
        .map_err(|source| Error::Serve { address, source })
}

pub fn health_routes(readiness: Readiness) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || {
                let readiness = readiness.clone();
                async move {
                    match readiness.not_ready() {
                        None => (StatusCode::OK, "ok".to_owned()),
                        Some(waiting) => (
                            StatusCode::SERVICE_UNAVAILABLE,
                            format!("caches not synced: {}", waiting.join(", ")),
                        ),
                    }
                }
            }),
        )
}

pub fn metrics_routes(metrics: Arc<Metrics>) -> Router {
    Router::new().route(
        "/metrics",
        get(move || {
            let metrics = metrics.clone();
            async move {
                match metrics.encode() {
                    Ok(text) => (
                        StatusCode::OK,
                        [(
                            header::CONTENT_TYPE,
                            "text/plain; version=0.0.4; charset=utf-8",
                        )],
                        text,
                    )
                        .into_response(),
                    Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
                }
            }
        }),
    )
}
