//! [`EtcdApi`] over etcd's v3 JSON gateway (grpc-gateway in front of etcd's own gRPC server, on
//! the client port): `POST /v3/<service>/<method>` with the request message as JSON.
//!
//! The gateway names fields as `rpc.proto` does, so the style is mixed: `ID`, `peerURLs`,
//! `isLearner`, `dbSize`, but the header's `cluster_id`, `member_id`. uint64 and int64 values are
//! JSON strings, and fields that are zero, false or empty are left out.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use http::{Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer};
use serde_json::json;

use super::resolve::MemberResolver;
use super::tls::ClientTls;
use super::{AddedMember, EtcdApi, EtcdError, Member, Status};

const MEMBER_LIST: &str = "/v3/cluster/member/list";
const MEMBER_ADD: &str = "/v3/cluster/member/add";
const MEMBER_PROMOTE: &str = "/v3/cluster/member/promote";
const MEMBER_REMOVE: &str = "/v3/cluster/member/remove";
const STATUS: &str = "/v3/maintenance/status";

/// Answers larger than this are refused: a member list is a few hundred bytes per member.
const MAX_ANSWER_BYTES: usize = 4 << 20;

/// How long after the deadline sent to etcd we still wait for its answer: etcd's own
/// "deadline exceeded" says more than our giving up.
const ANSWER_GRACE: Duration = Duration::from_millis(500);

/// Timeouts, per endpoint tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GatewaySettings {
    /// Deadline of one request: sent to etcd (`Grpc-Timeout`), so it stops waiting too (a
    /// member-remove without a leader otherwise waits forever); we wait `0.5 s` longer.
    pub request_timeout: Duration,
    /// Deadline of one TCP connect.
    pub connect_timeout: Duration,
}

impl Default for GatewaySettings {
    fn default() -> Self {
        GatewaySettings {
            request_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(2),
        }
    }
}

/// The etcd client over the JSON gateway: plain HTTP, or HTTPS with a client certificate for a
/// cluster whose members serve TLS ([`EtcdApi::with_client_tls`]). Cheap to clone; connections
/// are pooled.
#[derive(Clone, Debug)]
pub struct EtcdGateway {
    http: Http,
    resolver: MemberResolver,
    settings: GatewaySettings,
}

/// One scheme per client: a TLS cluster is never spoken to in plain text, nor a plain one with
/// a certificate it did not ask for.
#[derive(Clone, Debug)]
enum Http {
    Plain(Client<HttpConnector<MemberResolver>, Full<Bytes>>),
    Tls(Client<HttpsConnector<HttpConnector<MemberResolver>>, Full<Bytes>>),
}

impl Http {
    fn scheme(&self) -> &'static str {
        match self {
            Http::Plain(_) => "http",
            Http::Tls(_) => "https",
        }
    }
}

/// What a call does, deciding whether a failed endpoint may be replaced by the next one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    Read,
    Change,
}

impl EtcdGateway {
    pub fn new(settings: GatewaySettings) -> EtcdGateway {
        Self::with_resolver(settings, MemberResolver::default())
    }

    /// A client that resolves member names with `resolver` (the cluster's DNS, from outside it).
    pub fn with_resolver(settings: GatewaySettings, resolver: MemberResolver) -> EtcdGateway {
        let http = Http::Plain(client().build(connector(&settings, &resolver)));
        EtcdGateway {
            http,
            resolver,
            settings,
        }
    }

    /// The same client speaking only HTTPS, presenting `tls`'s certificate.
    pub fn tls(&self, tls: &ClientTls) -> EtcdGateway {
        let mut connector = connector(&self.settings, &self.resolver);
        connector.enforce_http(false);
        let https = HttpsConnectorBuilder::new()
            .with_tls_config(tls.config().clone())
            .https_only()
            .enable_http1()
            .wrap_connector(connector);
        EtcdGateway {
            http: Http::Tls(client().build(https)),
            ..self.clone()
        }
    }

    /// Promotes or removes member `id` (`path`); returns the members after the change.
    async fn change_member(
        &self,
        endpoints: &[String],
        path: &str,
        id: u64,
    ) -> Result<Vec<Member>, EtcdError> {
        let body = json!({ "ID": id.to_string() });
        let answer: MemberListAnswer = self.on_any(endpoints, path, &body, Call::Change).await?;
        Ok(members(answer.members))
    }

    /// Sends `body` to each endpoint in turn until one answers, or fails in a way that trying
    /// another would not help (see [`may_try_next`]).
    async fn on_any<T: DeserializeOwned>(
        &self,
        endpoints: &[String],
        path: &str,
        body: &serde_json::Value,
        call: Call,
    ) -> Result<T, EtcdError> {
        let mut failures = Vec::new();
        for endpoint in endpoints {
            match self.post(endpoint, path, body, true).await {
                Ok(answer) => return Ok(answer),
                Err(error) if may_try_next(&error, call) => {
                    tracing::debug!(%endpoint, %error, "etcd endpoint failed, trying the next one");
                    failures.push(error);
                }
                Err(error) => return Err(error),
            }
        }
        Err(combine(failures))
    }

    /// One request to one endpoint. With `leader_required`, a member without a leader refuses at
    /// once (`etcdserver: no leader`) instead of waiting for the deadline.
    async fn post<T: DeserializeOwned>(
        &self,
        endpoint: &str,
        path: &str,
        body: &serde_json::Value,
        leader_required: bool,
    ) -> Result<T, EtcdError> {
        let uri = endpoint_uri(endpoint, path, self.http.scheme())?;
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(uri)
            .header(http::header::CONTENT_TYPE, "application/json")
            .header("grpc-timeout", grpc_timeout(self.settings.request_timeout));
        if leader_required {
            // Passed on as gRPC metadata `hasleader: true`, as etcd's Go client sends it.
            request = request.header("grpc-metadata-hasleader", "true");
        }
        let request = request
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| EtcdError::InvalidEndpoint {
                endpoint: endpoint.to_owned(),
                reason: e.to_string(),
            })?;

        let exchange = async {
            let response = match &self.http {
                Http::Plain(http) => http.request(request).await,
                Http::Tls(http) => http.request(request).await,
            };
            let response = response.map_err(|error| {
                if error.is_connect() {
                    EtcdError::Unreachable {
                        endpoints: vec![endpoint.to_owned()],
                        reason: error_chain(&error),
                    }
                } else {
                    // The request may have been sent: its outcome is unknown.
                    EtcdError::Timeout {
                        endpoint: endpoint.to_owned(),
                        message: format!("connection lost: {}", error_chain(&error)),
                    }
                }
            })?;
            let status = response.status();
            let body = Limited::new(response.into_body(), MAX_ANSWER_BYTES)
                .collect()
                .await
                .map_err(|e| EtcdError::BadAnswer {
                    endpoint: endpoint.to_owned(),
                    reason: format!("reading the answer: {e}"),
                })?
                .to_bytes();
            Ok::<_, EtcdError>((status, body))
        };
        let deadline = self.settings.request_timeout.saturating_add(ANSWER_GRACE);
        let (status, body) = tokio::time::timeout(deadline, exchange)
            .await
            .map_err(|_| EtcdError::Timeout {
                endpoint: endpoint.to_owned(),
                message: format!("no answer within {deadline:?}"),
            })??;
        decode(endpoint, status, &body)
    }
}

impl Default for EtcdGateway {
    fn default() -> Self {
        EtcdGateway::new(GatewaySettings::default())
    }
}

/// The TCP connector: members' names resolved by `resolver`, connects bounded in time.
fn connector(
    settings: &GatewaySettings,
    resolver: &MemberResolver,
) -> HttpConnector<MemberResolver> {
    let mut connector = HttpConnector::new_with_resolver(resolver.clone());
    connector.set_connect_timeout(Some(settings.connect_timeout));
    connector.set_nodelay(true);
    connector
}

fn client() -> hyper_util::client::legacy::Builder {
    let mut builder = Client::builder(TokioExecutor::new());
    // A member killed and restarted leaves dead pooled connections behind; keep few.
    builder
        .pool_idle_timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(2);
    builder
}

impl EtcdApi for EtcdGateway {
    fn with_client_tls(&self, tls: &ClientTls) -> Arc<dyn EtcdApi> {
        Arc::new(self.tls(tls))
    }

    fn members<'a>(
        &'a self,
        endpoints: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<Member>, EtcdError>> {
        Box::pin(async move {
            let body = json!({ "linearizable": true });
            let answer: MemberListAnswer = self
                .on_any(endpoints, MEMBER_LIST, &body, Call::Read)
                .await?;
            Ok(members(answer.members))
        })
    }

    fn add_member<'a>(
        &'a self,
        endpoints: &'a [String],
        peer_url: &'a str,
        learner: bool,
    ) -> BoxFuture<'a, Result<AddedMember, EtcdError>> {
        Box::pin(async move {
            let body = json!({ "peerURLs": [peer_url], "isLearner": learner });
            let answer: MemberAddAnswer = self
                .on_any(endpoints, MEMBER_ADD, &body, Call::Change)
                .await?;
            Ok(AddedMember {
                member: answer.member.into(),
                members: members(answer.members),
            })
        })
    }

    fn promote<'a>(
        &'a self,
        endpoints: &'a [String],
        id: u64,
    ) -> BoxFuture<'a, Result<Vec<Member>, EtcdError>> {
        Box::pin(self.change_member(endpoints, MEMBER_PROMOTE, id))
    }

    fn remove<'a>(
        &'a self,
        endpoints: &'a [String],
        id: u64,
    ) -> BoxFuture<'a, Result<Vec<Member>, EtcdError>> {
        Box::pin(self.change_member(endpoints, MEMBER_REMOVE, id))
    }

    fn status<'a>(&'a self, endpoint: &'a str) -> BoxFuture<'a, Result<Status, EtcdError>> {
        Box::pin(async move {
            // No `hasleader`: a member without a leader must still say so in its status.
            let answer: StatusAnswer = self.post(endpoint, STATUS, &json!({}), false).await?;
            Ok(answer.into())
        })
    }
}

/// Whether another endpoint may be asked after `error`: when the request surely changed nothing
/// (no connection, no leader, a learner), and for reads also when it timed out.
fn may_try_next(error: &EtcdError, call: Call) -> bool {
    match error {
        EtcdError::Unreachable { .. }
        | EtcdError::NoLeader { .. }
        | EtcdError::LearnerEndpoint { .. } => true,
        EtcdError::Timeout { .. } | EtcdError::BadAnswer { .. } => call == Call::Read,
        _ => false,
    }
}

/// The error of a call no endpoint served: an answer from etcd says more than a failed connect,
/// so the last answer wins; when nothing answered, one `Unreachable` names every endpoint.
fn combine(failures: Vec<EtcdError>) -> EtcdError {
    let mut unreachable = Vec::new();
    let mut reasons = Vec::new();
    let mut answered = None;
    for failure in failures {
        match failure {
            EtcdError::Unreachable { endpoints, reason } => {
                reasons.push(format!("{} ({})", reason, endpoints.join(", ")));
                unreachable.extend(endpoints);
            }
            other => answered = Some(other),
        }
    }
    match answered {
        Some(error) => error,
        None if unreachable.is_empty() => EtcdError::NoEndpoints,
        None => EtcdError::Unreachable {
            endpoints: unreachable,
            reason: reasons.join("; "),
        },
    }
}

/// `endpoint` + `path` as a URI, refusing what this client cannot talk to (another scheme than
/// `scheme`, no host).
fn endpoint_uri(endpoint: &str, path: &str, scheme: &str) -> Result<Uri, EtcdError> {
    let invalid = |reason: String| EtcdError::InvalidEndpoint {
        endpoint: endpoint.to_owned(),
        reason,
    };
    let uri: Uri = format!("{}{path}", endpoint.trim_end_matches('/'))
        .parse()
        .map_err(|e: http::uri::InvalidUri| invalid(e.to_string()))?;
    if uri.scheme_str() != Some(scheme) {
        return Err(invalid(match scheme {
            "https" => "the cluster speaks TLS (spec.TLS): only https:// endpoints".to_owned(),
            _ => "the cluster does not speak TLS (no spec.TLS): only http:// endpoints".to_owned(),
        }));
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(invalid("no host".into()));
    }
    Ok(uri)
}

/// The gRPC deadline header: at most 8 digits, so milliseconds up to ~27 h.
fn grpc_timeout(timeout: Duration) -> String {
    let millis = timeout.as_millis().clamp(1, 99_999_999);
    format!("{millis}m")
}

/// The error and its causes, e.g. `client error (Connect): tcp connect error: Connection refused`.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Reads a gateway answer: the message on 200, else the gRPC error it carries.
fn decode<T: DeserializeOwned>(
    endpoint: &str,
    status: StatusCode,
    body: &[u8],
) -> Result<T, EtcdError> {
    let bad_answer = |reason: String| EtcdError::BadAnswer {
        endpoint: endpoint.to_owned(),
        reason,
    };
    if status == StatusCode::OK {
        return serde_json::from_slice(body)
            .map_err(|e| bad_answer(format!("{e}: {}", excerpt(body))));
    }
    match serde_json::from_slice::<GatewayError>(body) {
        Ok(refusal) => Err(EtcdError::from_refusal(
            endpoint,
            refusal.code,
            &refusal.message,
        )),
        Err(_) => Err(bad_answer(format!("HTTP {status}: {}", excerpt(body)))),
    }
}

/// The start of an answer, for error messages.
fn excerpt(body: &[u8]) -> String {
    String::from_utf8_lossy(body).chars().take(200).collect()
}

fn members(wire: Vec<WireMember>) -> Vec<Member> {
    wire.into_iter().map(Member::from).collect()
}

/// A gRPC status as the gateway writes it (HTTP status from the gRPC code).
#[derive(Deserialize)]
struct GatewayError {
    #[serde(default)]
    code: i32,
    #[serde(default)]
    message: String,
}

#[derive(Deserialize, Default)]
struct Header {
    #[serde(default, deserialize_with = "uint64")]
    cluster_id: u64,
    #[serde(default, deserialize_with = "uint64")]
    member_id: u64,
    #[serde(default, deserialize_with = "uint64")]
    revision: u64,
}

#[derive(Deserialize)]
struct WireMember {
    #[serde(rename = "ID", deserialize_with = "uint64")]
    id: u64,
    #[serde(default)]
    name: String,
    #[serde(default, rename = "peerURLs")]
    peer_urls: Vec<String>,
    #[serde(default, rename = "clientURLs")]
    client_urls: Vec<String>,
    #[serde(default, rename = "isLearner")]
    is_learner: bool,
}

impl From<WireMember> for Member {
    fn from(wire: WireMember) -> Member {
        Member {
            id: wire.id,
            name: wire.name,
            peer_urls: wire.peer_urls,
            client_urls: wire.client_urls,
            is_learner: wire.is_learner,
        }
    }
}

/// The answer of list, promote and remove.
#[derive(Deserialize)]
struct MemberListAnswer {
    #[serde(default)]
    members: Vec<WireMember>,
}

#[derive(Deserialize)]
struct MemberAddAnswer {
    member: WireMember,
    #[serde(default)]
    members: Vec<WireMember>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct StatusAnswer {
    #[serde(default)]
    header: Header,
    #[serde(default)]
    version: String,
    #[serde(default)]
    storage_version: String,
    #[serde(default, deserialize_with = "uint64")]
    leader: u64,
    #[serde(default, deserialize_with = "uint64")]
    raft_term: u64,
    #[serde(default, deserialize_with = "uint64")]
    raft_index: u64,
    #[serde(default, deserialize_with = "uint64")]
    raft_applied_index: u64,
    #[serde(default, deserialize_with = "uint64")]
    db_size: u64,
    #[serde(default, deserialize_with = "uint64")]
    db_size_in_use: u64,
    #[serde(default, deserialize_with = "uint64")]
    db_size_quota: u64,
    #[serde(default)]
    errors: Vec<String>,
    #[serde(default)]
    is_learner: bool,
}

impl From<StatusAnswer> for Status {
    fn from(wire: StatusAnswer) -> Status {
        Status {
            member_id: wire.header.member_id,
            cluster_id: wire.header.cluster_id,
            revision: wire.header.revision,
            leader: wire.leader,
            version: wire.version,
            storage_version: wire.storage_version,
            raft_term: wire.raft_term,
            raft_index: wire.raft_index,
            raft_applied_index: wire.raft_applied_index,
            db_size: wire.db_size,
            db_size_in_use: wire.db_size_in_use,
            db_size_quota: wire.db_size_quota,
            errors: wire.errors,
            is_learner: wire.is_learner,
        }
    }
}

/// A 64-bit integer as protobuf's JSON mapping writes it (a string), or as a plain number.
fn uint64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Repr {
        Number(u64),
        Text(String),
    }
    match Repr::deserialize(deserializer)? {
        Repr::Number(number) => Ok(number),
        Repr::Text(text) => text
            .parse()
            .map_err(|e| D::Error::custom(format!("{text:?} is not a uint64: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ENDPOINT: &str = "http://127.77.0.1:2379";

    // Answers recorded from etcd 3.6.16's gateway.
    const LIST_WITH_UNSTARTED_LEARNER: &str = r#"{"header":{"cluster_id":"8623589819610867871","member_id":"1214947604256465655","raft_term":"2"},"members":[{"ID":"1214947604256465655","name":"a","peerURLs":["http://127.77.0.1:2380"],"clientURLs":["http://127.77.0.1:2379"]},{"ID":"1236246116520631584","peerURLs":["http://127.77.0.2:2380"],"isLearner":true}]}"#;
    const ADD_VOTING: &str = r#"{"header":{"cluster_id":"8623589819610867871","member_id":"1214947604256465655","raft_term":"2"},"member":{"ID":"9767662159311428859","peerURLs":["http://127.77.0.3:2380"]},"members":[{"ID":"1214947604256465655","name":"a","peerURLs":["http://127.77.0.1:2380"],"clientURLs":["http://127.77.0.1:2379"]},{"ID":"1236246116520631584","peerURLs":["http://127.77.0.2:2380"],"isLearner":true},{"ID":"9767662159311428859","peerURLs":["http://127.77.0.3:2380"]}]}"#;
    const STATUS_LEADER: &str = r#"{"header":{"cluster_id":"8623589819610867871","member_id":"1214947604256465655","revision":"1","raft_term":"2"},"version":"3.6.16","dbSize":"20480","leader":"1214947604256465655","raftIndex":"4","raftTerm":"2","raftAppliedIndex":"4","dbSizeInUse":"16384","storageVersion":"3.6.0","dbSizeQuota":"2147483648","downgradeInfo":{}}"#;
    const STATUS_NO_LEADER: &str = r#"{"header":{"cluster_id":"9140395983493484575","member_id":"1214947604256465655","revision":"1","raft_term":"2"},"version":"3.6.16","dbSize":"20480","raftIndex":"8","raftTerm":"2","raftAppliedIndex":"8","errors":["etcdserver: no leader"],"dbSizeInUse":"16384","storageVersion":"3.6.0","dbSizeQuota":"2147483648","downgradeInfo":{}}"#;

    fn ok<T: DeserializeOwned>(body: &str) -> Result<T, EtcdError> {
        decode(ENDPOINT, StatusCode::OK, body.as_bytes())
    }

    #[test]
    fn an_unstarted_learner_has_no_name_and_no_client_urls() {
        let answer: MemberListAnswer = ok(LIST_WITH_UNSTARTED_LEARNER).unwrap();
        assert_eq!(
            members(answer.members),
            vec![
                Member {
                    id: 1214947604256465655,
                    name: "a".into(),
                    peer_urls: vec!["http://127.77.0.1:2380".into()],
                    client_urls: vec!["http://127.77.0.1:2379".into()],
                    is_learner: false,
                },
                Member {
                    id: 1236246116520631584,
                    name: String::new(),
                    peer_urls: vec!["http://127.77.0.2:2380".into()],
                    client_urls: vec![],
                    is_learner: true,
                },
            ]
        );
    }

    #[test]
    fn an_added_member_comes_with_the_new_list() {
        let answer: MemberAddAnswer = ok(ADD_VOTING).unwrap();
        let member = Member::from(answer.member);
        assert_eq!(member.id, 9767662159311428859);
        assert!(!member.is_learner && !member.is_started());
        let ids: Vec<u64> = members(answer.members).iter().map(|m| m.id).collect();
        assert_eq!(
            ids,
            [
                1214947604256465655,
                1236246116520631584,
                9767662159311428859
            ]
        );
    }

    #[test]
    fn status_of_a_leader() {
        let status: Status = ok::<StatusAnswer>(STATUS_LEADER).map(Status::from).unwrap();
        assert_eq!(
            status,
            Status {
                member_id: 1214947604256465655,
                cluster_id: 8623589819610867871,
                revision: 1,
                leader: 1214947604256465655,
                version: "3.6.16".into(),
                storage_version: "3.6.0".into(),
                raft_term: 2,
                raft_index: 4,
                raft_applied_index: 4,
                db_size: 20480,
                db_size_in_use: 16384,
                db_size_quota: 2147483648,
                errors: vec![],
                is_learner: false,
            }
        );
        assert!(status.is_leader());
    }

    #[test]
    fn status_without_a_leader_leaves_the_leader_out_and_says_why() {
        let status: Status = ok::<StatusAnswer>(STATUS_NO_LEADER)
            .map(Status::from)
            .unwrap();
        assert!(!status.has_leader());
        assert_eq!(status.errors, ["etcdserver: no leader"]);
    }

    #[test]
    fn refusals_are_read_from_the_gateways_error_body() {
        let refused = |status: u16, body: &str| {
            let status = StatusCode::from_u16(status).unwrap();
            decode::<MemberListAnswer>(ENDPOINT, status, body.as_bytes()).err()
        };
        assert_eq!(
            refused(
                404,
                r#"{"code":5,"message":"etcdserver: member not found"}"#
            ),
            Some(EtcdError::MemberNotFound {
                endpoint: ENDPOINT.into(),
                message: "etcdserver: member not found".into()
            })
        );
        assert_eq!(
            refused(
                500,
                r#"{"code":2,"message":"etcdserver: re-configuration failed due to not enough started members"}"#
            )
            .map(|e| e.label()),
            Some("NotEnoughStartedMembers")
        );
        assert_eq!(
            refused(504, r#"{"code":4,"message":"context deadline exceeded"}"#).map(|e| e.label()),
            Some("Timeout")
        );
        assert_eq!(
            refused(502, "<html>Bad Gateway</html>"),
            Some(EtcdError::BadAnswer {
                endpoint: ENDPOINT.into(),
                reason: "HTTP 502 Bad Gateway: <html>Bad Gateway</html>".into()
            })
        );
    }

    #[test]
    fn ids_are_strings_or_numbers_but_never_garbage() {
        let member = |json: &str| serde_json::from_str::<WireMember>(json).map(|m| m.id).ok();
        assert_eq!(member(r#"{"ID":"18446744073709551615"}"#), Some(u64::MAX));
        assert_eq!(member(r#"{"ID":42}"#), Some(42));
        assert_eq!(member(r#"{"ID":"18446744073709551616"}"#), None);
        assert_eq!(member(r#"{"ID":"-1"}"#), None);
        assert_eq!(member(r#"{"name":"a"}"#), None);
        assert!(matches!(
            ok::<MemberListAnswer>(r#"{"members":[{"ID":"x"}]}"#),
            Err(EtcdError::BadAnswer { .. })
        ));
    }

    #[test]
    fn only_endpoints_of_the_clients_own_scheme_are_used() {
        for scheme in ["http", "https"] {
            let uri = endpoint_uri(&format!("{scheme}://10.0.0.1:2379/"), MEMBER_LIST, scheme)
                .map(|u| u.to_string());
            assert_eq!(
                uri,
                Ok(format!("{scheme}://10.0.0.1:2379/v3/cluster/member/list"))
            );
        }
        for (endpoint, scheme) in [
            ("https://10.0.0.1:2379", "http"),
            ("http://10.0.0.1:2379", "https"),
            ("10.0.0.1:2379", "http"),
            ("http://", "http"),
            ("http://a b", "http"),
        ] {
            assert!(
                matches!(
                    endpoint_uri(endpoint, MEMBER_LIST, scheme),
                    Err(EtcdError::InvalidEndpoint { .. })
                ),
                "{endpoint}"
            );
        }
    }

    #[test]
    fn grpc_timeout_fits_the_header() {
        assert_eq!(grpc_timeout(Duration::from_secs(3)), "3000m");
        assert_eq!(grpc_timeout(Duration::ZERO), "1m");
        assert_eq!(grpc_timeout(Duration::from_secs(1 << 40)), "99999999m");
    }

    #[test]
    fn changes_move_on_only_when_nothing_was_changed() {
        let timeout = EtcdError::Timeout {
            endpoint: ENDPOINT.into(),
            message: "context deadline exceeded".into(),
        };
        let no_leader = EtcdError::from_refusal(ENDPOINT, 14, "etcdserver: no leader");
        let learner =
            EtcdError::from_refusal(ENDPOINT, 9, "etcdserver: rpc not supported for learner");
        let not_found = EtcdError::from_refusal(ENDPOINT, 5, "etcdserver: member not found");
        assert!(may_try_next(&timeout, Call::Read));
        assert!(!may_try_next(&timeout, Call::Change));
        assert!(may_try_next(&no_leader, Call::Change));
        assert!(may_try_next(&learner, Call::Change));
        assert!(!may_try_next(&not_found, Call::Read));
    }

    #[test]
    fn the_last_answer_wins_over_failed_connects() {
        let unreachable = |endpoint: &str| EtcdError::Unreachable {
            endpoints: vec![endpoint.into()],
            reason: "connection refused".into(),
        };
        let no_leader = EtcdError::from_refusal("http://b:2379", 14, "etcdserver: no leader");
        assert_eq!(
            combine(vec![
                unreachable("http://a:2379"),
                no_leader.clone(),
                unreachable("http://c:2379")
            ]),
            no_leader
        );
        assert_eq!(
            combine(vec![
                unreachable("http://a:2379"),
                unreachable("http://c:2379")
            ]),
            EtcdError::Unreachable {
                endpoints: vec!["http://a:2379".into(), "http://c:2379".into()],
                reason: "connection refused (http://a:2379); connection refused (http://c:2379)"
                    .into(),
            }
        );
        assert_eq!(combine(vec![]), EtcdError::NoEndpoints);
    }
}
