//! `--metrics-secure`: `/metrics` over HTTPS for callers the API server vouches for, as
//! controller-runtime's `WithAuthenticationAndAuthorization` filter does: the bearer token must
//! pass a TokenReview (else 401) and the caller must be allowed `get` on the non-resource URL
//! (a SubjectAccessReview; else 403). Both answers are cached with controller-runtime's TTLs, so
//! a scraper costs the API server two requests per TTL, not two per scrape. A serving certificate
//! from `--metrics-cert-dir` is re-read when its files change, as controller-runtime's certwatcher
//! does, so a rotated certificate is served without a restart.

mod review;
mod tls;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use self::review::authorized;
pub use self::tls::{TlsError, tls_config};

/// Serves `routes` over TLS until `shutdown`.
pub async fn serve_tls(
    listener: TcpListener,
    routes: Router,
    tls: Arc<rustls::ServerConfig>,
    shutdown: CancellationToken,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let Ok((stream, _)) = accepted else { continue };
        let (acceptor, routes) = (acceptor.clone(), routes.clone());
        tokio::spawn(async move {
            let Ok(stream) = acceptor.accept(stream).await else {
                return;
            };
            let service = TowerToHyperService::new(routes);
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            if let Err(error) = builder
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%error, "metrics connection ended with an error");
            }
        });
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere while holding the lock cannot leave a cache or the watcher inconsistent
    // (each update is a single assignment or map operation): keep using it.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
