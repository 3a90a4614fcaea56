//! Talking to the members of an etcd cluster: membership (list, add a voting member or a learner,
//! promote, remove) and one member's status.
//!
//! [`EtcdApi`] is what a controller holds (`Arc<dyn EtcdApi>`), so its tests can swap in a fake;
//! [`EtcdGateway`] is the real one, over etcd's v3 JSON gateway (HTTP, or HTTPS with a client
//! certificate). Its errors are
//! [`EtcdError`]s: a variant for each refusal a controller can act on, in etcd's own words.

pub mod address;
mod gateway;
mod resolve;
pub mod tls;
pub mod version;

use futures::future::{BoxFuture, join_all};
use strum::IntoStaticStr;

pub use gateway::{EtcdGateway, GatewaySettings};
pub use resolve::{MemberDns, MemberPods, MemberResolver};
pub use tls::ClientTls;

/// One member of the cluster, as the member list shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub id: u64,
    /// Empty until the member's process has started and published itself.
    pub name: String,
    pub peer_urls: Vec<String>,
    /// Empty until the member has started.
    pub client_urls: Vec<String>,
    pub is_learner: bool,
}

impl Member {
    /// Whether the member's process has joined (etcd names a member once it has published itself).
    pub fn is_started(&self) -> bool {
        !self.name.is_empty()
    }
}

/// A member just added, and the member list right after the change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddedMember {
    pub member: Member,
    pub members: Vec<Member>,
}

/// What one member says about itself and the cluster (`/v3/maintenance/status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// The member that answered.
    pub member_id: u64,
    pub cluster_id: u64,
    /// The member's key-value store revision.
    pub revision: u64,
    /// The leader this member knows of; 0 when it knows none.
    pub leader: u64,
    /// The etcd server version, e.g. `3.6.16`.
    pub version: String,
    /// The version of the data on disk, e.g. `3.6.0`; empty before etcd 3.6.
    pub storage_version: String,
    pub raft_term: u64,
    pub raft_index: u64,
    pub raft_applied_index: u64,
    pub db_size: u64,
    pub db_size_in_use: u64,
    pub db_size_quota: u64,
    /// Alarms and problems the member reports, e.g. `etcdserver: no leader`.
    pub errors: Vec<String>,
    pub is_learner: bool,
}

impl Status {
    pub fn has_leader(&self) -> bool {
        self.leader != 0
    }

    pub fn is_leader(&self) -> bool {
        self.has_leader() && self.leader == self.member_id
    }
}

/// etcd's member list, from the first of `endpoints` that answers, with each member's own
/// status (`None` when it does not answer): what the controllers judge health and quorum by.
pub async fn members_with_status(
    etcd: &dyn EtcdApi,
    endpoints: &[String],
) -> Result<Vec<(Member, Option<Status>)>, EtcdError> {
    let listed = etcd.members(endpoints).await?;
    let statuses = join_all(
        listed
            .iter()
            .map(|member| async { etcd.status(member.client_urls.first()?).await.ok() }),
    )
    .await;
    Ok(listed.into_iter().zip(statuses).collect())
}

/// The etcd operations a controller needs.
///
/// Membership calls go to the first of `endpoints` (client URLs, `http://host:2379`) that can
/// serve them: an endpoint that cannot be reached, has no leader, or is a learner is skipped; an
/// endpoint that took a change but did not answer in time is not (the change may have happened,
/// and sending it elsewhere could apply it twice). Boxed futures keep the trait usable as
/// `dyn EtcdApi`.
pub trait EtcdApi: Send + Sync {
    /// The same client for a cluster whose members serve TLS: HTTPS only, presenting `tls`'s
    /// certificate and trusting only its CA.
    fn with_client_tls(&self, tls: &ClientTls) -> std::sync::Arc<dyn EtcdApi>;

    /// The members, read linearizably (a member cut off from the majority does not answer with a
    /// stale list; the next endpoint is asked).
    fn members<'a>(
        &'a self,
        endpoints: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<Member>, EtcdError>>;

    /// Adds a member that will listen on `peer_url`: a learner (non-voting until promoted) or a
    /// voting member. Its process is started afterwards with `--initial-cluster-state=existing`.
    fn add_member<'a>(
        &'a self,
        endpoints: &'a [String],
        peer_url: &'a str,
        learner: bool,
    ) -> BoxFuture<'a, Result<AddedMember, EtcdError>>;

    /// Makes learner `id` a voting member; refused until it has caught up with the leader.
    fn promote<'a>(
        &'a self,
        endpoints: &'a [String],
        id: u64,
    ) -> BoxFuture<'a, Result<Vec<Member>, EtcdError>>;

    /// Removes member `id`; returns the members left.
    fn remove<'a>(
        &'a self,
        endpoints: &'a [String],
        id: u64,
    ) -> BoxFuture<'a, Result<Vec<Member>, EtcdError>>;

    /// The status of the one member at `endpoint` (answers without a leader, and on learners).
    fn status<'a>(&'a self, endpoint: &'a str) -> BoxFuture<'a, Result<Status, EtcdError>>;
}

/// Voting members needed for a quorum among `voting`.
pub fn quorum(voting: usize) -> usize {
    voting / 2 + 1
}

/// The image of etcd `version` from `repository` (an EtcdCluster's `spec.repository`).
pub fn image(repository: &str, version: &version::Version) -> String {
    format!("{repository}:{}", version.tag())
}

/// The etcd client the controllers share: the gateway in production; a test may put a
/// fault-injecting one in its place.
#[derive(Clone)]
pub struct EtcdClient(pub std::sync::Arc<dyn EtcdApi>);

impl EtcdClient {
    /// The gateway, resolving member names with `resolver`.
    pub fn gateway(resolver: MemberResolver) -> EtcdClient {
        EtcdClient(std::sync::Arc::new(EtcdGateway::with_resolver(
            GatewaySettings::default(),
            resolver,
        )))
    }
}

impl std::fmt::Debug for EtcdClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EtcdClient")
    }
}

/// Why an etcd call failed. Refusals carry etcd's own message and the endpoint that answered; the
/// variant name is a bounded metric label, `reason()` a condition/event reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, IntoStaticStr)]
pub enum EtcdError {
    #[error("no etcd endpoint to ask")]
    NoEndpoints,

    #[error("{endpoint:?} is not an etcd client URL this client can use: {reason}")]
    InvalidEndpoint { endpoint: String, reason: String },

    /// No connection could be made to any of `endpoints`: the request reached no member.
    #[error("etcd unreachable at {}: {reason}", endpoints.join(", "))]
    Unreachable {
        endpoints: Vec<String>,
        reason: String,
    },

    /// No answer in time, or etcd's own deadline passed: a change may or may not have been made.
    #[error("etcd at {endpoint}: {message}")]
    Timeout { endpoint: String, message: String },

    /// The member knows no leader (the cluster lost quorum, or an election is under way).
    #[error("etcd at {endpoint}: {message}")]
    NoLeader { endpoint: String, message: String },

    /// The endpoint is a learner, which serves only status and serializable reads.
    #[error("etcd at {endpoint}: {message}")]
    LearnerEndpoint { endpoint: String, message: String },

    /// Promotion refused: the learner has not caught up with the leader yet (or has not started).
    #[error("etcd at {endpoint}: {message}")]
    LearnerNotReady { endpoint: String, message: String },

    /// etcd allows one learner at a time (`--max-learners`, default 1).
    #[error("etcd at {endpoint}: {message}")]
    TooManyLearners { endpoint: String, message: String },

    /// Promotion refused: the member is already a voting member.
    #[error("etcd at {endpoint}: {message}")]
    NotALearner { endpoint: String, message: String },

    #[error("etcd at {endpoint}: {message}")]
    MemberNotFound { endpoint: String, message: String },

    /// A member with this peer URL exists already (perhaps added by an earlier, unanswered call).
    /// etcd says so in two ways, depending on whether the first add was in the same second.
    #[error("etcd at {endpoint}: {message}")]
    PeerUrlExists { endpoint: String, message: String },

    /// The change would leave fewer started voting members than a quorum needs (counting members
    /// added but never started).
    #[error("etcd at {endpoint}: {message}")]
    NotEnoughStartedMembers { endpoint: String, message: String },

    /// The change would break the quorum of members this one is connected to (some are down or
    /// were connected for less than 5 s).
    #[error("etcd at {endpoint}: {message}")]
    Unhealthy { endpoint: String, message: String },

    /// Any other refusal: gRPC status `code` and etcd's message.
    #[error("etcd at {endpoint}: {message} (code {code})")]
    Other {
        endpoint: String,
        code: i32,
        message: String,
    },

    /// An answer this client does not understand (not the gateway's JSON).
    #[error("etcd at {endpoint} gave an answer that could not be read: {reason}")]
    BadAnswer { endpoint: String, reason: String },
}

impl EtcdError {
    /// Maps the gateway's error answer (`{"code": …, "message": …}`) to a variant. Messages are
    /// matched exactly (they are etcd's constants, see `api/v3rpc/rpctypes/error.go`); the gRPC
    /// code alone is not enough: "not enough started members" comes back as code 2 (Unknown).
    pub fn from_refusal(endpoint: &str, code: i32, message: &str) -> EtcdError {
        // gRPC's DeadlineExceeded: the deadline we sent in `Grpc-Timeout` passed inside etcd.
        const DEADLINE_EXCEEDED: i32 = 4;
        let endpoint = endpoint.to_owned();
        let message_owned = message.to_owned();
        match message {
            "etcdserver: no leader" => EtcdError::NoLeader {
                endpoint,
                message: message_owned,
            },
            "etcdserver: rpc not supported for learner" => EtcdError::LearnerEndpoint {
                endpoint,
                message: message_owned,
            },
            "etcdserver: can only promote a learner member which is in sync with leader" => {
                EtcdError::LearnerNotReady {
                    endpoint,
                    message: message_owned,
                }
            }
            "etcdserver: too many learner members in cluster" => EtcdError::TooManyLearners {
                endpoint,
                message: message_owned,
            },
            "etcdserver: can only promote a learner member" => EtcdError::NotALearner {
                endpoint,
                message: message_owned,
            },
            "etcdserver: member not found" => EtcdError::MemberNotFound {
                endpoint,
                message: message_owned,
            },
            // etcd derives a new member's ID from its peer URLs and the second it was added, so
            // the same URLs added twice within a second collide on the ID instead.
            "etcdserver: Peer URLs already exists" | "etcdserver: member ID already exist" => {
                EtcdError::PeerUrlExists {
                    endpoint,
                    message: message_owned,
                }
            }
            "etcdserver: re-configuration failed due to not enough started members" => {
                EtcdError::NotEnoughStartedMembers {
                    endpoint,
                    message: message_owned,
                }
            }
            "etcdserver: unhealthy cluster" => EtcdError::Unhealthy {
                endpoint,
                message: message_owned,
            },
            // A leader change during a request leaves its outcome unknown, as a timeout does.
            "etcdserver: leader changed"
            | "context deadline exceeded"
            | "etcdserver: context deadline exceeded" => EtcdError::Timeout {
                endpoint,
                message: message_owned,
            },
            // "etcdserver: request timed out", with ", possibly due to …" variants.
            _ if message.starts_with("etcdserver: request timed out")
                || code == DEADLINE_EXCEEDED =>
            {
                EtcdError::Timeout {
                    endpoint,
                    message: message_owned,
                }
            }
            _ => EtcdError::Other {
                endpoint,
                code,
                message: message_owned,
            },
        }
    }

    /// The condition/event reason (CamelCase).
    pub fn reason(&self) -> &'static str {
        match self {
            EtcdError::NoEndpoints => "EtcdNoEndpoints",
            EtcdError::InvalidEndpoint { .. } => "EtcdInvalidEndpoint",
            EtcdError::Unreachable { .. } => "EtcdUnreachable",
            EtcdError::Timeout { .. } => "EtcdTimeout",
            EtcdError::NoLeader { .. } => "EtcdNoLeader",
            EtcdError::LearnerEndpoint { .. } => "EtcdLearnerEndpoint",
            EtcdError::LearnerNotReady { .. } => "EtcdLearnerNotReady",
            EtcdError::TooManyLearners { .. } => "EtcdTooManyLearners",
            EtcdError::NotALearner { .. } => "EtcdNotALearner",
            EtcdError::MemberNotFound { .. } => "EtcdMemberNotFound",
            EtcdError::PeerUrlExists { .. } => "EtcdPeerURLExists",
            EtcdError::NotEnoughStartedMembers { .. } => "EtcdNotEnoughStartedMembers",
            EtcdError::Unhealthy { .. } => "EtcdUnhealthy",
            EtcdError::Other { .. } => "EtcdRefused",
            EtcdError::BadAnswer { .. } => "EtcdBadAnswer",
        }
    }

    /// The variant name, a bounded metric label.
    pub fn label(&self) -> &'static str {
        self.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapped(code: i32, message: &str) -> &'static str {
        EtcdError::from_refusal("http://127.0.0.1:2379", code, message).label()
    }

    /// Codes and messages as etcd 3.6.16's gateway sent them (see the integration tests).
    #[test]
    fn refusals_map_to_their_variants() {
        let table = [
            (14, "etcdserver: no leader", "NoLeader"),
            (
                9,
                "etcdserver: rpc not supported for learner",
                "LearnerEndpoint",
            ),
            (
                9,
                "etcdserver: can only promote a learner member which is in sync with leader",
                "LearnerNotReady",
            ),
            (
                9,
                "etcdserver: too many learner members in cluster",
                "TooManyLearners",
            ),
            (
                9,
                "etcdserver: can only promote a learner member",
                "NotALearner",
            ),
            (5, "etcdserver: member not found", "MemberNotFound"),
            (9, "etcdserver: Peer URLs already exists", "PeerUrlExists"),
            (9, "etcdserver: member ID already exist", "PeerUrlExists"),
            (
                2,
                "etcdserver: re-configuration failed due to not enough started members",
                "NotEnoughStartedMembers",
            ),
            (14, "etcdserver: unhealthy cluster", "Unhealthy"),
            (4, "context deadline exceeded", "Timeout"),
            (14, "etcdserver: request timed out", "Timeout"),
            (
                14,
                "etcdserver: request timed out, possibly due to previous leader failure",
                "Timeout",
            ),
            (14, "etcdserver: leader changed", "Timeout"),
            (4, "something new about a deadline", "Timeout"),
            (3, "etcdserver: given member URLs are invalid", "Other"),
            (5, "Not Found", "Other"),
        ];
        for (code, message, variant) in table {
            assert_eq!(mapped(code, message), variant, "{message}");
        }
    }

    #[test]
    fn a_refusal_keeps_etcds_words_and_the_endpoint() {
        let error = EtcdError::from_refusal(
            "http://10.0.0.7:2379",
            3,
            "etcdserver: given member URLs are invalid",
        );
        assert_eq!(
            error,
            EtcdError::Other {
                endpoint: "http://10.0.0.7:2379".into(),
                code: 3,
                message: "etcdserver: given member URLs are invalid".into(),
            }
        );
        assert_eq!(
            error.to_string(),
            "etcd at http://10.0.0.7:2379: etcdserver: given member URLs are invalid (code 3)"
        );
        assert_eq!(error.reason(), "EtcdRefused");
    }

    #[test]
    fn the_gateway_can_be_shared_as_a_trait_object() {
        fn shareable<T: Send + Sync + ?Sized>(_: &T) {}
        let api: std::sync::Arc<dyn EtcdApi> = std::sync::Arc::new(EtcdGateway::default());
        shareable(&api);
    }

    #[test]
    fn status_knows_whether_the_member_leads() {
        let status = |member_id, leader| Status {
            member_id,
            cluster_id: 1,
            revision: 1,
            leader,
            version: "3.6.16".into(),
            storage_version: "3.6.0".into(),
            raft_term: 2,
            raft_index: 8,
            raft_applied_index: 8,
            db_size: 20480,
            db_size_in_use: 16384,
            db_size_quota: 2147483648,
            errors: vec![],
            is_learner: false,
        };
        assert!(status(7, 7).is_leader());
        assert!(!status(7, 8).is_leader());
        assert!(status(7, 8).has_leader());
        assert!(!status(7, 0).has_leader());
        assert!(!status(0, 0).is_leader());
    }
}
