//! `rest_client_requests_total{method,code}` for every request the kube client sends, as
//! client-go reports it: one count per response (a watch counts once, when its stream opens),
//! `code="<error>"` when no response came.

use std::sync::Arc;
use std::task::{Context, Poll};

use futures::FutureExt;
use futures::future::BoxFuture;
use kube::Client;
use tower::{Layer, Service};

use crate::telemetry::metrics::Metrics;

/// A client whose every request is counted in `rest_client_requests_total`, each attempt of it
/// as client-go counts them: kube's own retry of 429/503/504 answers (up to 15 tries) sits
/// inside any layer added here, and throttling by API Priority and Fairness would not show, so
/// it is put back outside the count. (Retrying needs a service it can clone: the buffer makes the
/// counted stack one; it needs a Tokio runtime.)
pub fn counted_client(
    mut config: kube::Config,
    metrics: &Arc<Metrics>,
) -> Result<Client, kube::Error> {
    config.default_retry = false;
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&CountLayer(metrics.clone()))
        .with_layer(&tower::buffer::BufferLayer::new(REQUESTS_BUFFERED))
        .with_layer(&tower::retry::RetryLayer::new(
            kube::client::retry::RetryPolicy::server_retry(),
        ))
        .build())
}

/// Requests waiting to be handed to the connection pool (each waits only for its turn to be
/// sent, not for its answer): far above the workers and watches that send at once.
const REQUESTS_BUFFERED: usize = 1024;

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
pub struct Count<S> {
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
