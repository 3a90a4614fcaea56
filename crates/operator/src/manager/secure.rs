//! `--metrics-secure`: `/metrics` over HTTPS for callers the API server vouches for, as
//! controller-runtime's `WithAuthenticationAndAuthorization` filter does: the bearer token must
//! pass a TokenReview (else 401) and the caller must be allowed `get` on the non-resource URL
//! (a SubjectAccessReview; else 403). Both answers are cached with controller-runtime's TTLs, so
//! a scraper costs the API server two requests per TTL, not two per scrape. A serving certificate
//! from `--metrics-cert-dir` is re-read when its files change, as controller-runtime's certwatcher
//! does, so a rotated certificate is served without a restart.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use k8s_openapi::api::authentication::v1::{
    TokenReview, TokenReviewSpec, TokenReviewStatus, UserInfo,
};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};
use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// How long a TokenReview's answer is reused, authenticated or not (controller-runtime's
/// `DelegatingAuthenticatorConfig.CacheTTL`).
const AUTHENTICATION_TTL: Duration = Duration::from_secs(60);
/// How long an allowing SubjectAccessReview is reused (controller-runtime's `AllowCacheTTL`).
const ALLOWED_TTL: Duration = Duration::from_secs(5 * 60);
/// How long a denying one is: short, so a newly granted role works soon (`DenyCacheTTL`).
const DENIED_TTL: Duration = Duration::from_secs(30);
/// Entries per cache: callers choose the tokens and paths, so the memory they can pin must be
/// bounded.
const CACHE_CAPACITY: usize = 1024;
/// How often a handshake may look at the certificate files: two small reads at most this often,
/// whatever the connection rate.
const CERT_CHECK_INTERVAL: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
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

/// The server's TLS configuration: `tls.crt`/`tls.key` from `cert_dir` (re-read when they
/// change), else a self-signed certificate made at start-up (kubebuilder's default).
pub fn tls_config(cert_dir: Option<&Path>) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth();
    let config = match cert_dir {
        Some(dir) => {
            let watcher = CertWatcher::new(dir, provider, Instant::now())?;
            builder.with_cert_resolver(Arc::new(watcher))
        }
        None => {
            let certified = rcgen::generate_simple_self_signed(vec![
                "localhost".to_owned(),
                "127.0.0.1".to_owned(),
            ])?;
            let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
                certified.signing_key.serialize_der(),
            ));
            builder.with_single_cert(vec![certified.cert.der().clone()], key)?
        }
    };
    Ok(Arc::new(config))
}

/// Serves the pair in a certificate directory, re-reading it when the files change, as
/// controller-runtime's certwatcher does. The files are looked at on a handshake, at most every
/// [`CERT_CHECK_INTERVAL`], and compared by content: modification times can miss an in-place
/// rewrite within the file system's timestamp granularity. A changed pair that cannot be used
/// (half written, mismatched, garbage, missing) is logged once and the previous certificate
/// stays in service.
#[derive(Debug)]
struct CertWatcher {
    cert: PathBuf,
    key: PathBuf,
    provider: Arc<CryptoProvider>,
    state: Mutex<WatchState>,
}

#[derive(Debug)]
struct WatchState {
    current: Arc<CertifiedKey>,
    /// The digest of the files being served.
    loaded: Vec<u8>,
    /// The last content that could not be used, so it is reported (and parsed) once.
    failed: Option<Seen>,
    checked: Instant,
}

/// What a check found in the directory, when it was not usable.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    Pair(Vec<u8>),
    Unreadable(String),
}

impl CertWatcher {
    /// Loads the pair in `dir`; unlike a reload, failing here is an error (there is nothing to
    /// serve instead).
    fn new(dir: &Path, provider: Arc<CryptoProvider>, now: Instant) -> Result<Self, TlsError> {
        let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
        let files = read_files(&cert, &key)?;
        let current = Arc::new(parse_pair(&cert, &key, &files, &provider)?);
        Ok(CertWatcher {
            cert,
            key,
            provider,
            state: Mutex::new(WatchState {
                current,
                loaded: files_digest(&files),
                failed: None,
                checked: now,
            }),
        })
    }

    /// The pair to serve at `now`, re-read first if it is time to look and the files changed.
    fn current_at(&self, now: Instant) -> Arc<CertifiedKey> {
        let mut state = lock(&self.state);
        if now.saturating_duration_since(state.checked) >= CERT_CHECK_INTERVAL {
            state.checked = now;
            self.refresh(&mut state);
        }
        state.current.clone()
    }

    fn refresh(&self, state: &mut WatchState) {
        let files = match read_files(&self.cert, &self.key) {
            Ok(files) => files,
            Err(error) => return unusable(state, Seen::Unreadable(error.to_string()), &error),
        };
        let digest = files_digest(&files);
        if digest == state.loaded {
            // Unchanged, or restored to the pair in service.
            state.failed = None;
            return;
        }
        if matches!(&state.failed, Some(Seen::Pair(failed)) if *failed == digest) {
            return;
        }
        match parse_pair(&self.cert, &self.key, &files, &self.provider) {
            Ok(pair) => {
                tracing::info!(cert = %self.cert.display(), "reloaded the metrics serving certificate");
                state.current = Arc::new(pair);
                state.loaded = digest;
                state.failed = None;
            }
            Err(error) => unusable(state, Seen::Pair(digest), &error),
        }
    }
}

fn unusable(state: &mut WatchState, seen: Seen, error: &TlsError) {
    if state.failed.as_ref() != Some(&seen) {
        tracing::warn!(%error, "the metrics certificate files changed but cannot be used; still serving the previous certificate");
        state.failed = Some(seen);
    }
}

impl ResolvesServerCert for CertWatcher {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current_at(Instant::now()))
    }
}

/// The contents of (`tls.crt`, `tls.key`).
type Files = (Vec<u8>, Vec<u8>);

fn read_files(cert: &Path, key: &Path) -> Result<Files, TlsError> {
    let read = |path: &Path| {
        std::fs::read(path).map_err(|source| TlsError::Read {
            path: path.display().to_string(),
            source,
        })
    };
    Ok((read(cert)?, read(key)?))
}

/// A SHA-256 of both files (the certificate's length first, so the boundary is part of it): to
/// notice a change without keeping a second copy of the private key.
fn files_digest((cert, key): &Files) -> Vec<u8> {
    let mut context = ring::digest::Context::new(&ring::digest::SHA256);
    context.update(&u64::try_from(cert.len()).unwrap_or(u64::MAX).to_be_bytes());
    context.update(cert);
    context.update(key);
    context.finish().as_ref().to_vec()
}

/// Parses a PEM chain and key and checks that they belong together.
fn parse_pair(
    cert_path: &Path,
    key_path: &Path,
    (cert, key): &Files,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let pem = |path: &Path| {
        let path = path.display().to_string();
        move |source| TlsError::Pem { path, source }
    };
    let chain = CertificateDer::pem_slice_iter(cert)
        .collect::<Result<Vec<_>, _>>()
        .map_err(pem(cert_path))?;
    let key = PrivateKeyDer::from_pem_slice(key).map_err(pem(key_path))?;
    Ok(CertifiedKey::from_der(chain, key, provider)?)
}

/// A cache whose entries expire, holding at most `capacity` of them. Time is passed in, so the
/// expiry is testable.
#[derive(Debug)]
struct TtlCache<K, V> {
    entries: HashMap<K, (V, Instant)>,
    capacity: usize,
}

impl<K: Hash + Eq, V: Clone> TtlCache<K, V> {
    fn new(capacity: usize) -> Self {
        TtlCache {
            entries: HashMap::new(),
            capacity,
        }
    }

    fn get(&mut self, key: &K, now: Instant) -> Option<V> {
        match self.entries.get(key) {
            Some((value, expires)) if now < *expires => Some(value.clone()),
            Some(_) => {
                self.entries.remove(key);
                None
            }
            None => None,
        }
    }

    fn insert(&mut self, key: K, value: V, ttl: Duration, now: Instant) {
        // A TTL past the end of time: not worth caching, and adding it would panic.
        let Some(expires) = now.checked_add(ttl) else {
            return;
        };
        if self.entries.len() >= self.capacity && !self.entries.contains_key(&key) {
            self.entries.retain(|_, (_, expires)| now < *expires);
            // Still full of live answers: drop those that would expire first.
            if self.entries.len() >= self.capacity {
                let soonest = self.entries.values().map(|(_, expires)| *expires).min();
                if let Some(soonest) = soonest {
                    self.entries.retain(|_, (_, expires)| *expires > soonest);
                }
            }
        }
        self.entries.insert(key, (value, expires));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere while holding the lock cannot leave a cache or the watcher inconsistent
    // (each update is a single assignment or map operation): keep using it.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The TokenReview cache key: a SHA-256 of the token, so the cache never holds the credential.
fn token_key(token: &str) -> Vec<u8> {
    ring::digest::digest(&ring::digest::SHA256, token.as_bytes())
        .as_ref()
        .to_vec()
}

/// A TokenReview's answer: the identity if authenticated, and whether the answer may be cached.
/// An `error` without an identity may be transient (an authentication webhook that is down), so
/// as in Kubernetes' delegating authenticator it is not reused.
fn token_verdict(status: Option<TokenReviewStatus>) -> (Option<UserInfo>, bool) {
    let status = status.unwrap_or_default();
    let user = status.user.filter(|_| status.authenticated == Some(true));
    let definite = user.is_some() || status.error.as_deref().is_none_or(str::is_empty);
    (user, definite)
}

/// Everything a SubjectAccessReview is asked about: equal keys get the same answer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct AccessKey {
    user: Option<String>,
    uid: Option<String>,
    groups: Option<Vec<String>>,
    extra: Option<BTreeMap<String, Vec<String>>>,
    verb: String,
    path: String,
}

/// The API client and the cached answers of the reviews it made.
struct Reviewer {
    client: Client,
    tokens: Mutex<TtlCache<Vec<u8>, Option<UserInfo>>>,
    access: Mutex<TtlCache<AccessKey, bool>>,
}

impl Reviewer {
    fn new(client: Client) -> Self {
        Reviewer {
            client,
            tokens: Mutex::new(TtlCache::new(CACHE_CAPACITY)),
            access: Mutex::new(TtlCache::new(CACHE_CAPACITY)),
        }
    }

    async fn review(&self, token: String, path: &str, verb: &str) -> Result<Verdict, kube::Error> {
        let Some(user) = self.authenticate(token).await? else {
            return Ok(Verdict::Unauthenticated);
        };
        let key = AccessKey {
            user: user.username,
            uid: user.uid,
            groups: user.groups,
            extra: user.extra,
            verb: verb.to_owned(),
            path: path.to_owned(),
        };
        Ok(if self.authorize(key).await? {
            Verdict::Allowed
        } else {
            Verdict::Forbidden
        })
    }

    async fn authenticate(&self, token: String) -> Result<Option<UserInfo>, kube::Error> {
        let key = token_key(&token);
        if let Some(known) = lock(&self.tokens).get(&key, Instant::now()) {
            return Ok(known);
        }
        let token_review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token),
                ..TokenReviewSpec::default()
            },
            ..TokenReview::default()
        };
        let reviewed = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &token_review)
            .await?;
        let (user, definite) = token_verdict(reviewed.status);
        if definite {
            lock(&self.tokens).insert(key, user.clone(), AUTHENTICATION_TTL, Instant::now());
        }
        Ok(user)
    }

    async fn authorize(&self, key: AccessKey) -> Result<bool, kube::Error> {
        if let Some(known) = lock(&self.access).get(&key, Instant::now()) {
            return Ok(known);
        }
        let access_review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: key.user.clone(),
                groups: key.groups.clone(),
                uid: key.uid.clone(),
                extra: key.extra.clone(),
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(key.path.clone()),
                    verb: Some(key.verb.clone()),
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let decided = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &access_review)
            .await?;
        let allowed = decided.status.is_some_and(|s| s.allowed);
        let ttl = if allowed { ALLOWED_TTL } else { DENIED_TTL };
        lock(&self.access).insert(key, allowed, ttl, Instant::now());
        Ok(allowed)
    }
}

/// Puts the TokenReview/SubjectAccessReview check in front of `routes`.
pub fn authorized(routes: Router, client: Client) -> Router {
    let reviewer = Arc::new(Reviewer::new(client));
    routes.layer(middleware::from_fn_with_state(reviewer, authorize))
}

async fn authorize(
    State(reviewer): State<Arc<Reviewer>>,
    request: Request,
    next: Next,
) -> Response {
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
    match reviewer.review(token, request.uri().path(), &verb).await {
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn an_answer_is_reused_until_its_ttl_and_not_after() {
        let start = Instant::now();
        let mut cache = TtlCache::new(8);
        cache.insert("allowed", true, ALLOWED_TTL, start);
        cache.insert("denied", false, DENIED_TTL, start);
        assert_eq!(cache.get(&"allowed", start), Some(true));
        assert_eq!(
            cache.get(&"denied", start + DENIED_TTL - SECOND),
            Some(false)
        );
        assert_eq!(cache.get(&"denied", start + DENIED_TTL), None);
        assert_eq!(cache.get(&"allowed", start + DENIED_TTL), Some(true));
        assert_eq!(
            cache.get(&"allowed", start + ALLOWED_TTL - SECOND),
            Some(true)
        );
        assert_eq!(cache.get(&"allowed", start + ALLOWED_TTL), None);
        assert_eq!(cache.len(), 0, "expired entries are dropped when looked up");
        assert_eq!(cache.get(&"never", start), None);
    }

    #[test]
    fn a_new_answer_replaces_the_old_one_and_its_expiry() {
        let start = Instant::now();
        let mut cache = TtlCache::new(8);
        cache.insert("user", false, DENIED_TTL, start);
        cache.insert("user", true, ALLOWED_TTL, start + 10 * SECOND);
        assert_eq!(cache.get(&"user", start + DENIED_TTL + SECOND), Some(true));
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn a_full_cache_drops_expired_answers_first_then_the_soonest_to_expire() {
        let start = Instant::now();
        let mut cache = TtlCache::new(3);
        cache.insert(1, (), 10 * SECOND, start);
        cache.insert(2, (), 20 * SECOND, start);
        cache.insert(3, (), 30 * SECOND, start);
        // 1 has expired: it goes, the live ones stay.
        cache.insert(4, (), 30 * SECOND, start + 15 * SECOND);
        assert_eq!(cache.len(), 3);
        let now = start + 16 * SECOND;
        assert!(cache.get(&1, now).is_none());
        assert!(cache.get(&2, now).is_some() && cache.get(&3, now).is_some());
        // None has expired: 2 would have first, so it makes room.
        cache.insert(5, (), 30 * SECOND, now);
        assert_eq!(cache.len(), 3);
        assert!(cache.get(&2, now).is_none());
        assert!([3, 4, 5].iter().all(|k| cache.get(k, now).is_some()));
        // Updating a present key never evicts.
        cache.insert(3, (), 30 * SECOND, now);
        assert_eq!(cache.len(), 3);
    }

    #[test]
    fn random_tokens_cannot_grow_the_cache_past_its_capacity() {
        let start = Instant::now();
        let mut cache = TtlCache::new(CACHE_CAPACITY);
        for i in 0..10 * CACHE_CAPACITY {
            cache.insert(
                token_key(&format!("token-{i}")),
                None::<UserInfo>,
                AUTHENTICATION_TTL,
                start,
            );
            assert!(cache.len() <= CACHE_CAPACITY);
        }
    }

    #[test]
    fn a_ttl_past_the_end_of_time_is_not_cached_rather_than_panicking() {
        let mut cache = TtlCache::new(2);
        cache.insert("k", 1, Duration::MAX, Instant::now());
        assert_eq!(cache.len(), 0);
    }

    #[test]
    fn the_token_key_is_a_digest_not_the_token() {
        let key = token_key("secret-token");
        assert_eq!(key.len(), 32);
        assert_eq!(key, token_key("secret-token"));
        assert_ne!(key, token_key("secret-tokem"));
        assert!(!key.windows(6).any(|w| w == b"secret"));
    }

    #[test]
    fn only_definite_token_reviews_are_cached() {
        let user = UserInfo {
            username: Some("system:serviceaccount:ns:reader".to_owned()),
            ..UserInfo::default()
        };
        let status = |authenticated, error: Option<&str>| {
            Some(TokenReviewStatus {
                authenticated: Some(authenticated),
                error: error.map(str::to_owned),
                user: Some(user.clone()),
                ..TokenReviewStatus::default()
            })
        };
        assert_eq!(
            token_verdict(status(true, None)),
            (Some(user.clone()), true)
        );
        assert_eq!(token_verdict(status(false, None)), (None, true));
        assert_eq!(token_verdict(status(false, Some(""))), (None, true));
        assert_eq!(
            token_verdict(status(false, Some("webhook unavailable"))),
            (None, false)
        );
        assert_eq!(token_verdict(None), (None, true));
    }

    /// A fresh directory under the system temp dir (no tempfile crate in this package).
    fn temp_dir(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("app-operator-secure-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Writes a new self-signed pair for localhost into `dir`; returns its certificate.
    fn write_pair(dir: &Path) -> CertificateDer<'static> {
        let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        std::fs::write(dir.join("tls.crt"), certified.cert.pem()).unwrap();
        std::fs::write(dir.join("tls.key"), certified.signing_key.serialize_pem()).unwrap();
        certified.cert.der().clone()
    }

    fn served(watcher: &CertWatcher, at: Instant) -> CertificateDer<'static> {
        watcher.current_at(at).cert.first().unwrap().clone()
    }

    #[test]
    fn a_rotated_pair_is_served_after_the_next_check_and_a_broken_one_is_not() {
        let dir = temp_dir("rotate");
        let first = write_pair(&dir);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let start = Instant::now();
        let watcher = CertWatcher::new(&dir, provider, start).unwrap();
        assert_eq!(served(&watcher, start), first);

        let second = write_pair(&dir);
        // Not looked at again before the interval: handshakes stay cheap.
        assert_eq!(
            served(&watcher, start + CERT_CHECK_INTERVAL - SECOND),
            first
        );
        let mut now = start + CERT_CHECK_INTERVAL;
        assert_eq!(served(&watcher, now), second);

        // Garbage; then half a rotation (a new certificate, the old key); then no key at all:
        // the last good pair stays, each problem reported once.
        std::fs::write(dir.join("tls.crt"), "not a certificate").unwrap();
        now += CERT_CHECK_INTERVAL;
        assert_eq!(served(&watcher, now), second);
        assert!(matches!(lock(&watcher.state).failed, Some(Seen::Pair(_))));
        let other = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        std::fs::write(dir.join("tls.crt"), other.cert.pem()).unwrap();
        now += CERT_CHECK_INTERVAL;
        assert_eq!(served(&watcher, now), second);
        std::fs::remove_file(dir.join("tls.key")).unwrap();
        now += CERT_CHECK_INTERVAL;
        assert_eq!(served(&watcher, now), second);
        assert!(matches!(
            lock(&watcher.state).failed,
            Some(Seen::Unreadable(_))
        ));

        // The rotation completes: its key arrives, and the new pair is served.
        std::fs::write(dir.join("tls.key"), other.signing_key.serialize_pem()).unwrap();
        now += CERT_CHECK_INTERVAL;
        assert_eq!(&served(&watcher, now), other.cert.der());
        assert!(lock(&watcher.state).failed.is_none());
        let third = write_pair(&dir);
        now += CERT_CHECK_INTERVAL;
        assert_eq!(served(&watcher, now), third);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_unusable_pair_at_start_up_is_an_error() {
        let dir = temp_dir("startup");
        write_pair(&dir);
        let other = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        std::fs::write(dir.join("tls.key"), other.signing_key.serialize_pem()).unwrap();
        let error = tls_config(Some(&dir)).unwrap_err();
        assert!(
            matches!(error, TlsError::Config(rustls::Error::InconsistentKeys(_))),
            "{error}"
        );
        std::fs::remove_file(dir.join("tls.key")).unwrap();
        assert!(matches!(tls_config(Some(&dir)), Err(TlsError::Read { .. })));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
