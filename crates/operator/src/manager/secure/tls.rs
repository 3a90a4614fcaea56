//! The serving certificate: from `--metrics-cert-dir` (re-read when its files change, as
//! controller-runtime's certwatcher does), else self-signed.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use super::lock;

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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

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
