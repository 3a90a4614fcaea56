//! `--metrics-secure` as a scraper sees it: only a token bound to the metrics-reader role gets the
//! metrics (no token or a rejected one: 401; without the role: 403), repeated scrapes do not cost
//! the API server a TokenReview and a SubjectAccessReview each, and a rotated serving certificate
//! is served without restarting the operator.

// Test code: a failed expectation is a failed test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use app_operator::telemetry::metrics::requests_by_method;
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use support::TIMEOUT;
use support::process::OperatorProcess;
use testkit::{TestNamespace, eventually, kubectl_ok};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The operator serving secure metrics with the pair in `cert_dir`. One controller over an empty
/// namespace: the operator itself sends no POSTs, so every POST it counts is a review made for a
/// scrape.
fn secure_operator(cert_dir: &Path, ns: &TestNamespace) -> OperatorProcess {
    OperatorProcess::spawn(
        &testkit::kubeconfig(),
        &[
            "--metrics-secure",
            &format!("--metrics-cert-dir={}", cert_dir.display()),
            "--controllers=myapp",
            &format!("--watch-namespace={}", ns.name),
        ],
    )
}

/// A CA the test client trusts, issuing serving certificates for `localhost`.
struct Ca {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    pem: String,
}

impl Ca {
    fn new() -> Ca {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let pem = params.self_signed(&key).unwrap().pem();
        Ca {
            issuer: rcgen::Issuer::new(params, key),
            pem,
        }
    }

    /// A new serving pair: (certificate PEM, key PEM, certificate DER).
    fn issue(&self) -> (String, String, CertificateDer<'static>) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .signed_by(&key, &self.issuer)
            .unwrap();
        (cert.pem(), key.serialize_pem(), cert.der().clone())
    }

    /// A new TLS connection to `port`, verifying the server against this CA.
    async fn connect(&self, port: u16) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(self.pem.as_bytes()).unwrap())
            .unwrap();
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await
            .unwrap()
    }

    /// The certificate a new connection to `port` is served.
    async fn served(&self, port: u16) -> CertificateDer<'static> {
        let tls = self.connect(port).await;
        tls.get_ref().1.peer_certificates().unwrap()[0].clone()
    }

    /// GET `/metrics` on a new connection, with a bearer token if given: (status code, body).
    async fn scrape(&self, port: u16, token: Option<&str>) -> (u16, String) {
        let mut tls = self.connect(port).await;
        let authorization =
            token.map_or_else(String::new, |t| format!("Authorization: Bearer {t}\r\n"));
        tls.write_all(
            format!("GET /metrics HTTP/1.0\r\nHost: localhost\r\n{authorization}\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let mut response = Vec::new();
        let _ = tls.read_to_end(&mut response).await;
        let response = String::from_utf8_lossy(&response);
        let code = response
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let body = response
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default();
        (code, body)
    }
}

/// Writes `tls.crt`/`tls.key` into `dir` the way the kubelet updates a Secret volume: the files
/// are symlinks through `..data`, which is swapped atomically to a new timestamped directory.
fn publish(dir: &Path, version: &str, (cert, key, _): &(String, String, CertificateDer<'static>)) {
    let versioned = dir.join(format!("..{version}"));
    std::fs::create_dir_all(&versioned).unwrap();
    std::fs::write(versioned.join("tls.crt"), cert).unwrap();
    std::fs::write(versioned.join("tls.key"), key).unwrap();
    let staged = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&staged);
    std::os::unix::fs::symlink(format!("..{version}"), &staged).unwrap();
    std::fs::rename(&staged, dir.join("..data")).unwrap();
    for file in ["tls.crt", "tls.key"] {
        if std::fs::symlink_metadata(dir.join(file)).is_err() {
            std::os::unix::fs::symlink(format!("..data/{file}"), dir.join(file)).unwrap();
        }
    }
}

/// The operator's POSTs so far, as a `/metrics` body reports them.
fn posts(body: &str) -> u64 {
    requests_by_method(body).get("POST").copied().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_scrapes_reuse_the_token_and_access_reviews() {
    const SCRAPES: usize = 10;
    let ns = TestNamespace::new("secure-cache").await;
    support::install_crds().await;
    let ca = Ca::new();
    let dir = std::env::temp_dir().join(format!("{}-certs", ns.name));
    publish(&dir, "1", &ca.issue());
    let operator = secure_operator(&dir, &ns);
    operator.ready().await;

    let reader_role = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../config/rbac/metrics_reader_role.yaml"
    );
    kubectl_ok(&["apply", "-f", reader_role]);
    let binding = format!("metrics-reader-{}", ns.name);
    kubectl_ok(&[
        "create",
        "clusterrolebinding",
        &binding,
        "--clusterrole=metrics-reader",
        &format!("--serviceaccount={}:reader", ns.name),
    ]);
    let reader = testkit::service_account_token(&ns.name, "reader").await;
    let nobody = testkit::service_account_token(&ns.name, "nobody").await;
    // The new binding is in effect (asked as the admin, not through the operator, whose denial
    // would be remembered for 30 s).
    let reviews = Api::<SubjectAccessReview>::all(testkit::client().await);
    let allowed = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(format!("system:serviceaccount:{}:reader", ns.name)),
            non_resource_attributes: Some(NonResourceAttributes {
                path: Some("/metrics".to_owned()),
                verb: Some("get".to_owned()),
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    eventually(TIMEOUT, "the metrics-reader binding to apply", || async {
        let review = reviews
            .create(&PostParams::default(), &allowed)
            .await
            .ok()?;
        review.status.is_some_and(|s| s.allowed).then_some(())
    })
    .await;

    // The first scrape reviews the token and the access (2 POSTs, counted before the body is
    // written); the next ones reuse both answers.
    let mut seen = Vec::new();
    for _ in 0..SCRAPES {
        let (code, body) = ca.scrape(operator.metrics, Some(&reader)).await;
        assert_eq!(code, 200, "{body}");
        seen.push(posts(&body));
    }
    let first = seen[0];
    assert!(first >= 2, "the first scrape made no reviews: {seen:?}");
    assert_eq!(
        seen,
        vec![first; SCRAPES],
        "POSTs seen by {SCRAPES} scrapes with the same token"
    );

    // Without the role: 403 every time, for one TokenReview and one SubjectAccessReview.
    for _ in 0..SCRAPES {
        assert_eq!(ca.scrape(operator.metrics, Some(&nobody)).await.0, 403);
    }
    let (code, body) = ca.scrape(operator.metrics, Some(&reader)).await;
    assert_eq!(code, 200);
    assert_eq!(
        posts(&body),
        first + 2,
        "POSTs for {SCRAPES} forbidden scrapes"
    );

    // No token: 401, without asking the API server.
    assert_eq!(ca.scrape(operator.metrics, None).await.0, 401);

    // A token the API server rejects: 401 every time. Its rejection carries an error, which may be
    // transient, so (as in Kubernetes' delegating authenticator) it is asked again each time.
    for _ in 0..SCRAPES {
        assert_eq!(
            ca.scrape(operator.metrics, Some("not-a-token")).await.0,
            401
        );
    }
    let (_, body) = ca.scrape(operator.metrics, Some(&reader)).await;
    assert_eq!(posts(&body), first + 2 + SCRAPES as u64);

    kubectl_ok(&["delete", "clusterrolebinding", &binding]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_serving_certificate_is_served_without_a_restart() {
    let ns = TestNamespace::new("secure-rotate").await;
    support::install_crds().await;
    let ca = Ca::new();
    let dir = std::env::temp_dir().join(format!("{}-certs", ns.name));
    let first = ca.issue();
    publish(&dir, "1", &first);
    let operator = secure_operator(&dir, &ns);
    assert_eq!(ca.served(operator.metrics).await, first.2);

    // A Secret-volume style update: new connections get the new certificate within seconds.
    let second = ca.issue();
    publish(&dir, "2", &second);
    let rotated = Instant::now();
    eventually(
        Duration::from_secs(10),
        "the rotated certificate to be served",
        || async { (ca.served(operator.metrics).await == second.2).then_some(()) },
    )
    .await;
    println!(
        "new certificate served {:?} after the update",
        rotated.elapsed()
    );

    // A broken update (a certificate without its key): logged, and the last good pair is still
    // served.
    let third = ca.issue();
    std::fs::write(dir.join("tls.crt"), &third.0).unwrap();
    eventually(
        Duration::from_secs(10),
        "a warning about the unusable certificate",
        || async {
            assert_eq!(ca.served(operator.metrics).await, second.2);
            operator
                .log()
                .lines()
                .find(|l| {
                    l.contains("\"WARN\"") && l.contains("still serving the previous certificate")
                })
                .map(str::to_owned)
        },
    )
    .await;
    testkit::stays_for(
        Duration::from_secs(3),
        "the previous certificate served while the new pair is incomplete",
        || async {
            let served = ca.served(operator.metrics).await;
            (served == second.2)
                .then_some(())
                .ok_or_else(|| format!("served {served:?}"))
        },
    )
    .await;

    // Its key arrives: the third pair is served.
    std::fs::write(dir.join("tls.key"), &third.1).unwrap();
    eventually(
        Duration::from_secs(10),
        "the completed pair to be served",
        || async { (ca.served(operator.metrics).await == third.2).then_some(()) },
    )
    .await;
    let _ = std::fs::remove_dir_all(&dir);
}
