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

/// A client whose every request is counted in `rest_client_requests_total`.
pub fn counted_client(config: kube::Config, metrics: &Arc<Metrics>) -> Result<Client, kube::Error> {
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&CountLayer(metrics.clone()))
        .build())
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
