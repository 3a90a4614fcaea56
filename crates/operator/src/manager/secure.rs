//! `--metrics-secure`: `/metrics` over HTTPS for callers the API server vouches for, as
//! controller-runtime's `WithAuthenticationAndAuthorization` filter does: the bearer token must
//! pass a TokenReview (else 401) and the caller must be allowed `get` on the non-resource URL
//! (a SubjectAccessReview; else 403).

use std::path::Path;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {path}: {source}")]
    Pem {
        path: String,
        source: rustls_pki_types::pem::Error,
    },
    #[error("generating a self-signed certificate: {0}")]
    SelfSigned(#[from] rcgen::Error),
    #[error("the metrics certificate is not usable: {0}")]
    Config(#[from] rustls::Error),
}

/// The server's TLS configuration: `tls.crt`/`tls.key` from `cert_dir`, else a self-signed
/// certificate made at start-up (kubebuilder's default).
pub fn tls_config(cert_dir: Option<&Path>) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let (chain, key) = match cert_dir {
        Some(dir) => {
            let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
            let pem = |path: &Path| {
                let path = path.display().to_string();
                move |source| TlsError::Pem { path, source }
            };
            let chain = CertificateDer::pem_file_iter(&cert)
                .map_err(pem(&cert))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(pem(&cert))?;
            (
                chain,
                PrivateKeyDer::from_pem_file(&key).map_err(pem(&key))?,
            )
        }
        None => {
            let certified = rcgen::generate_simple_self_signed(vec![
                "localhost".to_owned(),
                "127.0.0.1".to_owned(),
            ])?;
            let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
                certified.signing_key.serialize_der(),
            ));
            (vec![certified.cert.der().clone()], key)
        }
    };
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(chain, key)?;
    Ok(Arc::new(config))
}

/// Puts the TokenReview/SubjectAccessReview check in front of `routes`.
pub fn authorized(routes: Router, client: Client) -> Router {
    routes.layer(middleware::from_fn_with_state(client, authorize))
}

async fn authorize(State(client): State<Client>, request: Request, next: Next) -> Response {
    let token = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(str::to_owned);
    let Some(token) = token else {
        return (StatusCode::UNAUTHORIZED, "Unauthorized").into_response();
    };
    let verb = request.method().as_str().to_lowercase();
    match review(&client, token, request.uri().path(), &verb).await {
        Ok(Verdict::Allowed) => next.run(request).await,
        Ok(Verdict::Unauthenticated) => (StatusCode::UNAUTHORIZED, "Unauthorized").into_response(),
        Ok(Verdict::Forbidden) => (StatusCode::FORBIDDEN, "Forbidden").into_response(),
        Err(error) => {
            tracing::warn!(%error, "could not review a metrics request");
            (StatusCode::INTERNAL_SERVER_ERROR, "authorization failed").into_response()
        }
    }
}

enum Verdict {
    Allowed,
    Unauthenticated,
    Forbidden,
}

async fn review(
    client: &Client,
    token: String,
    path: &str,
    verb: &str,
) -> Result<Verdict, kube::Error> {
    let token_review = TokenReview {
        spec: TokenReviewSpec {
            token: Some(token),
            ..TokenReviewSpec::default()
        },
        ..TokenReview::default()
    };
    let reviewed = Api::<TokenReview>::all(client.clone())
        .create(&PostParams::default(), &token_review)
        .await?;
    let Some(user) = reviewed
        .status
        .filter(|s| s.authenticated == Some(true))
        .and_then(|s| s.user)
    else {
        return Ok(Verdict::Unauthenticated);
    };
    let access_review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: user.username,
            groups: user.groups,
            uid: user.uid,
            extra: user.extra,
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some(path.to_owned()),
                verb: Some(verb.to_owned()),
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let decided = Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &access_review)
        .await?;
    Ok(if decided.status.is_some_and(|s| s.allowed) {
        Verdict::Allowed
    } else {
        Verdict::Forbidden
    })
}

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
