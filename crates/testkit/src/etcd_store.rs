//! The history checker's [`Store`] for etcd: puts and ranges over etcd's v3 JSON gateway (on the
//! client port), as any client of the cluster's client Service would send them: in plain HTTP,
//! or over TLS with a client certificate.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use futures::future::BoxFuture;
use http_body_util::{BodyExt, Full};
use hyper_rustls::{FixedServerNameResolver, HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};

use crate::history::Store;

/// etcd behind `endpoint` (`http://address:2379`, or `https://` for [`EtcdStore::tls`]).
pub struct EtcdStore {
    endpoint: String,
    http: Http,
}

enum Http {
    Plain(Client<HttpConnector, Full<Bytes>>),
    Tls(Client<HttpsConnector<HttpConnector>, Full<Bytes>>),
}

fn connector() -> HttpConnector {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(std::time::Duration::from_secs(2)));
    connector
}

impl EtcdStore {
    pub fn new(endpoint: impl Into<String>) -> EtcdStore {
        EtcdStore {
            endpoint: endpoint.into(),
            http: Http::Plain(Client::builder(TokioExecutor::new()).build(connector())),
        }
    }

    /// etcd at `endpoint` (`https://address:2379`) over TLS as `config` says (its CA, its
    /// client certificate if any), verifying the server's certificate names `server_name`
    /// (an address's certificate names the Services and members, not the address).
    pub fn tls(
        endpoint: impl Into<String>,
        server_name: &str,
        config: rustls::ClientConfig,
    ) -> Result<EtcdStore, String> {
        let name = rustls_pki_types::ServerName::try_from(server_name.to_owned())
            .map_err(|e| format!("{server_name}: {e}"))?;
        let mut plain = connector();
        plain.enforce_http(false);
        let https = HttpsConnectorBuilder::new()
            .with_tls_config(config)
            .https_only()
            .with_server_name_resolver(FixedServerNameResolver::new(name))
            .enable_http1()
            .wrap_connector(plain);
        Ok(EtcdStore {
            endpoint: endpoint.into(),
            http: Http::Tls(Client::builder(TokioExecutor::new()).build(https)),
        })
    }

    /// `POST path` with `body` as JSON: the answer's JSON.
    pub async fn call(&self, path: &str, body: Value) -> Result<Value, String> {
        let request = http::Request::post(format!("{}{path}", self.endpoint))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| e.to_string())?;
        let answer = match &self.http {
            Http::Plain(http) => http.request(request).await,
            Http::Tls(http) => http.request(request).await,
        }
        // Debug: a refused TLS handshake says why only in the error's sources.
        .map_err(|e| format!("{e:?}"))?;
        let status = answer.status();
        let body = answer
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        if !status.is_success() {
            return Err(format!("{status}: {}", String::from_utf8_lossy(&body)));
        }
        serde_json::from_slice(&body).map_err(|e| e.to_string())
    }
}

fn encode(text: &str) -> String {
    STANDARD.encode(text)
}

fn decode(field: &Value) -> Result<String, String> {
    let bytes = STANDARD
        .decode(field.as_str().unwrap_or_default())
        .map_err(|e| e.to_string())?;
    String::from_utf8(bytes).map_err(|e| e.to_string())
}

/// The end of the range of every key that starts with `prefix`, as `etcdctl --prefix` asks.
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

impl Store for EtcdStore {
    fn write<'a>(
        &'a self,
        key: &'a str,
        value: &'a str,
    ) -> BoxFuture<'a, Result<Option<u64>, String>> {
        Box::pin(async move {
            let answer = self
                .call(
                    "/v3/kv/put",
                    json!({ "key": encode(key), "value": encode(value) }),
                )
                .await?;
            // int64 values are JSON strings in the gateway's answers.
            let revision = answer["header"]["revision"]
                .as_str()
                .and_then(|r| r.parse().ok());
            Ok(revision)
        })
    }

    fn read_all<'a>(
        &'a self,
        prefix: &'a str,
    ) -> BoxFuture<'a, Result<BTreeMap<String, String>, String>> {
        Box::pin(async move {
            let answer = self
                .call(
                    "/v3/kv/range",
                    json!({ "key": encode(prefix), "range_end": STANDARD.encode(prefix_end(prefix)) }),
                )
                .await?;
            let empty = Vec::new();
            let kvs = answer["kvs"].as_array().unwrap_or(&empty);
            let read = kvs
                .iter()
                .map(|kv| Ok((decode(&kv["key"])?, decode(&kv["value"])?)))
                .collect::<Result<BTreeMap<_, _>, String>>()?;
            if answer["more"].as_bool() == Some(true) {
                return Err("the range answer was cut short".into());
            }
            Ok(read)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_range_ends_after_the_last_key_with_the_prefix() {
        assert_eq!(prefix_end("history/"), b"history0".to_vec());
        assert_eq!(prefix_end("a\u{7f}"), b"a\x80".to_vec());
    }
}
