//! The client certificate the members of a TLS cluster ask for, and the CA their server
//! certificates are verified against: read from the Secret `spec.TLS.static.operatorSecret`
//! names, with the coreos operator's key names.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::ByteString;
use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// The operator's client certificate (a PEM chain).
pub const CLIENT_CERT: &str = "etcd-client.crt";
/// Its private key (PEM: PKCS#8, PKCS#1 or SEC1).
pub const CLIENT_KEY: &str = "etcd-client.key";
/// The CA the members' server certificates are verified against (PEM, one or more).
pub const CLIENT_CA: &str = "etcd-client-ca.crt";

/// Why a Secret's certificate cannot be used; says which key to fix.
#[derive(Debug, thiserror::Error)]
pub enum ClientTlsError {
    #[error("it has no key {0}")]
    Missing(&'static str),
    #[error("{key} is not PEM: {source}")]
    Pem {
        key: &'static str,
        source: rustls_pki_types::pem::Error,
    },
    #[error("{0} holds no certificate")]
    NoCertificate(&'static str),
    #[error("{CLIENT_CA}: {0}")]
    BadCa(rustls::Error),
    #[error("{CLIENT_CERT} and {CLIENT_KEY} cannot be used together: {0}")]
    BadPair(rustls::Error),
}

/// A TLS client configuration presenting the operator's certificate and trusting only the
/// cluster's CA (not the system's roots). Cheap to clone.
#[derive(Clone, Debug)]
pub struct ClientTls(Arc<rustls::ClientConfig>);

impl ClientTls {
    /// From a Secret's `data`, with the keys [`CLIENT_CERT`], [`CLIENT_KEY`], [`CLIENT_CA`].
    pub fn from_secret_data(
        data: &BTreeMap<String, ByteString>,
    ) -> Result<ClientTls, ClientTlsError> {
        let get = |key: &'static str| {
            data.get(key)
                .map(|value| value.0.as_slice())
                .ok_or(ClientTlsError::Missing(key))
        };
        let certificates = |key: &'static str| {
            let chain = CertificateDer::pem_slice_iter(get(key)?)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|source| ClientTlsError::Pem { key, source })?;
            if chain.is_empty() {
                return Err(ClientTlsError::NoCertificate(key));
            }
            Ok(chain)
        };
        let mut roots = RootCertStore::empty();
        for ca in certificates(CLIENT_CA)? {
            roots.add(ca).map_err(ClientTlsError::BadCa)?;
        }
        let chain = certificates(CLIENT_CERT)?;
        let key = PrivateKeyDer::from_pem_slice(get(CLIENT_KEY)?).map_err(|source| {
            ClientTlsError::Pem {
                key: CLIENT_KEY,
                source,
            }
        })?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(ClientTlsError::BadPair)?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(ClientTlsError::BadPair)?;
        Ok(ClientTls(Arc::new(config)))
    }

    pub fn config(&self) -> &rustls::ClientConfig {
        &self.0
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn pem_pair() -> (String, String) {
        let certified = rcgen::generate_simple_self_signed(vec!["client".to_owned()]).unwrap();
        (certified.cert.pem(), certified.signing_key.serialize_pem())
    }

    fn data(entries: &[(&str, &str)]) -> BTreeMap<String, ByteString> {
        entries
            .iter()
            .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
            .collect()
    }

    #[test]
    fn a_secret_with_the_three_keys_makes_a_client() {
        let (cert, key) = pem_pair();
        let (ca, _) = pem_pair();
        let tls = ClientTls::from_secret_data(&data(&[
            (CLIENT_CERT, &cert),
            (CLIENT_KEY, &key),
            (CLIENT_CA, &ca),
        ]));
        assert!(tls.is_ok(), "{tls:?}");
    }

    #[test]
    fn each_unusable_secret_says_which_key_to_fix() {
        let (cert, key) = pem_pair();
        let (other_cert, _) = pem_pair();
        let cases = [
            (
                vec![(CLIENT_CERT, cert.as_str()), (CLIENT_KEY, key.as_str())],
                "no key etcd-client-ca.crt",
            ),
            (
                vec![
                    (CLIENT_CERT, cert.as_str()),
                    (CLIENT_KEY, key.as_str()),
                    (CLIENT_CA, "not pem"),
                ],
                "etcd-client-ca.crt holds no certificate",
            ),
            (
                vec![
                    (CLIENT_CERT, other_cert.as_str()),
                    (CLIENT_KEY, key.as_str()),
                    (CLIENT_CA, cert.as_str()),
                ],
                "cannot be used together",
            ),
            (
                vec![
                    (CLIENT_CERT, cert.as_str()),
                    (CLIENT_KEY, cert.as_str()),
                    (CLIENT_CA, cert.as_str()),
                ],
                "etcd-client.key is not PEM",
            ),
        ];
        for (entries, expected) in cases {
            let error = ClientTls::from_secret_data(&data(&entries))
                .unwrap_err()
                .to_string();
            assert!(
                error.contains(expected),
                "{error:?} does not say {expected:?}"
            );
        }
    }
}
