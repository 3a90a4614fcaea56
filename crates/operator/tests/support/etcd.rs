//! EtcdClusters in tests: where their members are, their data, their convergence. The member
//! runner starts the pinned etcd binary for every member Pod (kwok runs nothing), so all of it
//! is etcd's own answer.

use std::time::Duration;

use app_operator::api::EtcdCluster;
use app_operator::etcd::address::Addressing;
use app_operator::etcd::{
    AddedMember, ClientTls, EtcdApi, EtcdClient, EtcdError, EtcdGateway, GatewaySettings, Member,
    Status,
};
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{ListParams, Patch, PatchParams};
use testkit::member_runner::MemberRunner;
use testkit::{TestNamespace, eventually};
use tokio_util::sync::CancellationToken;

use super::condition;
use app_operator::manager::ControllerKind;

pub const SLOW: Duration = Duration::from_secs(120);

/// The operator (loopback addressing, the given controllers) and the member runner, for one
/// namespace.
pub struct Setup {
    pub ns: TestNamespace,
    pub runner: MemberRunner,
    pub operator: super::Operator,
}

pub async fn setup(prefix: &str, controllers: &[ControllerKind]) -> Setup {
    setup_with(prefix, controllers, super::gateway()).await
}

/// [`setup`], with the controllers talking to etcd through `etcd`.
pub async fn setup_with(prefix: &str, controllers: &[ControllerKind], etcd: EtcdClient) -> Setup {
    let ns = TestNamespace::new(prefix).await;
    let operator = super::start_with(&ns, controllers, etcd).await;
    let dir = std::env::temp_dir().join(format!("etcd-members-{}", ns.name));
    let runner = MemberRunner::start(ns.client.clone(), Some(&ns.name), &dir).await;
    Setup {
        ns,
        runner,
        operator,
    }
}

/// Where a cluster lives: cloned into background tasks (a `TestNamespace` deletes on drop).
#[derive(Clone)]
pub struct Target {
    pub client: kube::Client,
    pub namespace: String,
}

impl From<&TestNamespace> for Target {
    fn from(ns: &TestNamespace) -> Target {
        Target {
            client: ns.client.clone(),
            namespace: ns.name.clone(),
        }
    }
}

pub async fn pods(ns: &Target, cluster: &str) -> Vec<Pod> {
    kube::Api::<Pod>::namespaced(ns.client.clone(), &ns.namespace)
        .list(&ListParams::default().labels(&format!("app=etcd,etcd_cluster={cluster}")))
        .await
        .unwrap()
        .items
}

/// The client URLs of the cluster's Pods that are not being deleted.
pub async fn endpoints(ns: &Target, cluster: &str) -> Vec<String> {
    pods(ns, cluster)
        .await
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| Addressing::Loopback.client_url(cluster, &ns.namespace, &p.name_any(), false))
        .collect()
}

pub async fn members(ns: &Target, cluster: &str) -> Option<Vec<Member>> {
    let gateway = EtcdGateway::new(GatewaySettings::default());
    gateway.members(&endpoints(ns, cluster).await).await.ok()
}

/// Waits for `size` started voting members, all reported ready in the status, and Available.
pub async fn converged(ns: &TestNamespace, cluster: &str, size: usize) -> Vec<Member> {
    let clusters = ns.api::<EtcdCluster>();
    let ns = &Target::from(ns);
    eventually(SLOW, &format!("{size} healthy voting members"), || async {
        let members = members(ns, cluster).await?;
        let status = clusters.get(cluster).await.ok()?.status?;
        let voting = members
            .iter()
            .filter(|m| !m.is_learner && m.is_started())
            .count();
        let available = condition(&status.conditions, "Available")
            == Some(("True".into(), "QuorumHealthy".into()));
        (voting == size
            && members.len() == size
            && status.members.ready.len() == size
            && available
            && pods(ns, cluster).await.len() == size)
            .then_some(members)
    })
    .await
}

pub fn base64(text: &str) -> String {
    use std::fmt::Write;
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes = text.as_bytes();
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                let _ = out.write_char(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// `PUT key=value` through the first endpoint that takes it.
pub async fn put(endpoints: &[String], key: &str, value: &str) -> bool {
    let body = format!(r#"{{"key":"{}","value":"{}"}}"#, base64(key), base64(value));
    for endpoint in endpoints {
        let address = endpoint.trim_start_matches("http://").parse().unwrap();
        if let Some((200, _)) =
            testkit::etcd::http_request(address, "POST", "/v3/kv/put", &body).await
        {
            return true;
        }
    }
    false
}

/// `GET key` through the first endpoint that answers: the value, base64-encoded.
pub async fn get(endpoints: &[String], key: &str) -> Option<String> {
    let body = format!(r#"{{"key":"{}"}}"#, base64(key));
    for endpoint in endpoints {
        let address = endpoint.trim_start_matches("http://").parse().unwrap();
        if let Some((200, answer)) =
            testkit::etcd::http_request(address, "POST", "/v3/kv/range", &body).await
        {
            let answer: serde_json::Value = serde_json::from_str(&answer).ok()?;
            return answer["kvs"][0]["value"].as_str().map(str::to_owned);
        }
    }
    None
}

/// A merge patch of the EtcdCluster's spec, as `kubectl patch --type merge` sends it.
pub async fn patch_spec(ns: &TestNamespace, cluster: &str, spec: serde_json::Value) {
    ns.api::<EtcdCluster>()
        .patch(
            cluster,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "spec": spec })),
        )
        .await
        .unwrap();
}

/// What etcd answered to each member add the operator made: the member list right after it.
#[derive(Clone, Default)]
pub struct MemberAdds {
    answers: std::sync::Arc<std::sync::Mutex<Vec<Vec<Member>>>>,
    /// Cancelled when the first add has reached etcd.
    pub first: CancellationToken,
}

impl MemberAdds {
    pub fn answers(&self) -> Vec<Vec<Member>> {
        self.answers.lock().unwrap().clone()
    }
}

/// An etcd client that keeps etcd's answer to every member add ([`MemberAdds`]) and, when
/// `dies_after_first_add`, never returns from the first one, as if the operator died right after
/// it reached etcd. Everything else is the gateway's.
pub struct RecordsMemberAdds {
    gateway: EtcdGateway,
    dies_after_first_add: bool,
    adds: MemberAdds,
}

impl RecordsMemberAdds {
    pub fn client(dies_after_first_add: bool) -> (EtcdClient, MemberAdds) {
        let adds = MemberAdds::default();
        let client = RecordsMemberAdds {
            gateway: EtcdGateway::with_resolver(GatewaySettings::default(), Default::default()),
            dies_after_first_add,
            adds: adds.clone(),
        };
        (EtcdClient(std::sync::Arc::new(client)), adds)
    }
}

impl EtcdApi for RecordsMemberAdds {
    fn with_client_tls(&self, tls: &ClientTls) -> std::sync::Arc<dyn EtcdApi> {
        std::sync::Arc::new(RecordsMemberAdds {
            gateway: self.gateway.tls(tls),
            dies_after_first_add: self.dies_after_first_add,
            adds: self.adds.clone(),
        })
    }

    fn members<'a>(
        &'a self,
        endpoints: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<Member>, EtcdError>> {
        self.gateway.members(endpoints)
    }

    fn add_member<'a>(
        &'a self,
        endpoints: &'a [String],
        peer_url: &'a str,
        learner: bool,
    ) -> BoxFuture<'a, Result<AddedMember, EtcdError>> {
        Box::pin(async move {
            let added = self.gateway.add_member(endpoints, peer_url, learner).await;
            if let Ok(added) = &added {
                let adds = {
                    let mut answers = self.adds.answers.lock().unwrap();
                    answers.push(added.members.clone());
                    answers.len()
                };
                self.adds.first.cancel();
                if adds == 1 && self.dies_after_first_add {
                    return std::future::pending().await;
                }
            }
            added
        })
    }

    fn promote<'a>(
        &'a self,
        endpoints: &'a [String],
        id: u64,
    ) -> BoxFuture<'a, Result<Vec<Member>, EtcdError>> {
        self.gateway.promote(endpoints, id)
    }

    fn remove<'a>(
        &'a self,
        endpoints: &'a [String],
        id: u64,
    ) -> BoxFuture<'a, Result<Vec<Member>, EtcdError>> {
        self.gateway.remove(endpoints, id)
    }

    fn status<'a>(&'a self, endpoint: &'a str) -> BoxFuture<'a, Result<Status, EtcdError>> {
        self.gateway.status(endpoint)
    }
}
