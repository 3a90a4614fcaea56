//! The operator's Kubernetes client, built as client-go builds its own rather than by kube's
//! default stack:
//! - **HTTP/2 with keep-alive pings** (client-go: a ping after 30 s without a frame, the
//!   connection dropped when its answer takes over 15 s). kube's default speaks HTTP/1.1, where a
//!   silently dead connection (half-open, blackholed) is found only by a timeout on whatever
//!   request happens to use it next, one pooled connection after another. With pings, every
//!   stream on a dead connection fails within 45 s and the next request opens a new one.
//! - **A deadline on every request but watches** (the request timeout): with streams sharing one
//!   connection, a timeout on the connection's reads can no longer bound one request. Watches
//!   are bounded by the runner, which replaces one that stays silent past its timeout.
//! - **`rest_client_requests_total{method,code}`** for every attempt, as client-go counts them: a
//!   watch counts once, when its stream opens; `code="<error>"` when no answer came. kube's
//!   retry of 429/503/504 answers sits outside the count, so throttling by API Priority and
//!   Fairness shows. (Retrying needs a service it can clone: the buffer makes the stack one.)

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::Client;
use kube::client::ConfigExt;
use tower::{BoxError, Layer, Service, ServiceBuilder};

use crate::mutation::{self, Mutation};
use crate::telemetry::metrics::Metrics;

/// A connection silent this long is pinged (client-go's `ReadIdleTimeout`).
const PING_AFTER: Duration = Duration::from_secs(30);
/// A ping unanswered this long closes the connection (client-go's `PingTimeout`).
const PING_TIMEOUT: Duration = Duration::from_secs(15);
/// Requests waiting to be handed to the connection (each waits only for its turn to be sent, not
/// for its answer): far above the workers and watches that send at once.
const REQUESTS_BUFFERED: usize = 1024;

/// Builds the client every controller shares; `request_timeout` bounds each request but
/// watches.
pub fn api_client(
    config: kube::Config,
    request_timeout: Duration,
    metrics: &Arc<Metrics>,
) -> Result<Client, kube::Error> {
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_connect_timeout(config.connect_timeout);
    tcp.set_nodelay(true);
    let mut tls = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config.rustls_client_config()?)
        .https_or_http();
    if let Some(name) = &config.tls_server_name {
        let name = rustls_pki_types::ServerName::try_from(name.clone()).map_err(|error| {
            kube::Error::Service(format!("invalid tls-server-name {name:?}: {error}").into())
        })?;
        tls = tls.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name));
    }
    let connector = tls.enable_http1().enable_http2().wrap_connector(tcp);
    let mut http = hyper_util::client::legacy::Client::builder(TokioExecutor::new());
    http.timer(TokioTimer::new());
    if !mutation::active(Mutation::NoKeepAlive) {
        http.http2_keep_alive_interval(PING_AFTER)
            .http2_keep_alive_timeout(PING_TIMEOUT)
            .http2_keep_alive_while_idle(true);
    }
    let http = http.build(connector);
    let retry = !mutation::active(Mutation::ThrottledIsPermanent);
    let service = ServiceBuilder::new()
        .option_layer(retry.then(|| {
            tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry())
        }))
        .layer(tower::buffer::BufferLayer::new(REQUESTS_BUFFERED))
        .layer(CountLayer(metrics.clone()))
        .layer(DeadlineLayer(request_timeout))
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(http);
    Ok(Client::new(service, config.default_namespace))
}

/// Whether `request` opens a watch (`?watch=true`), which runs for as long as it is allowed to.
fn is_watch<B>(request: &http::Request<B>) -> bool {
    request.uri().query().is_some_and(|query| {
        query
            .split('&')
            .any(|pair| pair == "watch=true" || pair == "watch=1")
    })
}

struct DeadlineLayer(Duration);

impl<S> Layer<S> for DeadlineLayer {
    type Service = Deadline<S>;

    fn layer(&self, inner: S) -> Deadline<S> {
        Deadline {
            inner,
            timeout: self.0,
        }
    }
}

/// Fails a request (not a watch) whose answer has not begun within `timeout`.
#[derive(Clone)]
struct Deadline<S> {
    inner: S,
    timeout: Duration,
}

#[derive(Debug, thiserror::Error)]
#[error("no answer from the API server within {0:?}")]
struct NoAnswer(Duration);

impl<S, B> Service<http::Request<B>> for Deadline<S>
where
    S: Service<http::Request<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<S::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let watch = is_watch(&request);
        let answer = self.inner.call(request);
        let timeout = self.timeout;
        async move {
            if watch {
                return answer.await.map_err(Into::into);
            }
            match tokio::time::timeout(timeout, answer).await {
                Ok(answer) => answer.map_err(Into::into),
                Err(_) => Err(NoAnswer(timeout).into()),
            }
        }
        .boxed()
    }
}

struct CountLayer(Arc<Metrics>);

impl<S> Layer<S> for CountLayer {
    type Service = Count<S>;

    fn layer(&self, inner: S) -> Count<S> {
        Count {
            inner,
            metrics: self.0.clone(),
        }
    }
}

#[derive(Clone)]
struct Count<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

impl<S, B, R> Service<http::Request<B>> for Count<S>
where
    S: Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let method = request.method().clone();
        let metrics = self.metrics.clone();
        self.inner
            .call(request)
            .inspect(move |result| {
                let status = result.as_ref().ok().map(http::Response::status);
                metrics.api_request(&method, status);
            })
            .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(uri: &str) -> http::Request<()> {
        http::Request::get(uri).body(()).unwrap_or_default()
    }

    #[test]
    fn only_watches_escape_the_request_deadline() {
        assert!(is_watch(&request(
            "/api/v1/pods?resourceVersion=10&watch=true&timeoutSeconds=60"
        )));
        assert!(is_watch(&request("/apis/apps/v1/deployments?watch=1")));
        assert!(!is_watch(&request("/api/v1/pods?limit=500")));
        assert!(!is_watch(&request("/api/v1/pods?watch=false")));
        assert!(!is_watch(&request("/api/v1/namespaces/watch")));
    }
}
