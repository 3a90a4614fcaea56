//! Runs the operator's controllers in-process for one test, scoped to the test's namespace (so
//! tests running in parallel never reconcile each other's objects).

// Test code: a failed expectation is a failed test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]
#![allow(dead_code)]

pub mod cluster;
pub mod etcd;
pub mod process;

use std::sync::Arc;
use std::time::Duration;

use app_operator::etcd::address::Addressing;
use app_operator::etcd::{EtcdClient, MemberResolver};
use app_operator::manager::{
    ControllerKind, Controllers, Options, Timeouts, api_client, start_controllers,
};
use app_operator::telemetry::metrics::Metrics;
use app_operator::telemetry::readiness::Readiness;
use app_operator_api::sampledb::SampleDB;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, Patch, PatchParams};
use kube::core::Status;
use testkit::{TestNamespace, eventually};
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

pub const TIMEOUT: Duration = Duration::from_secs(60);

/// The operator's controllers, running until dropped.
pub struct Operator {
    pub metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    _controllers: Controllers,
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Installs the CRDs (once per test binary) and starts `controllers` watching `namespace` only;
/// returns once their caches have synced.
pub async fn start(namespace: &TestNamespace, controllers: &[ControllerKind]) -> Operator {
    start_with(namespace, controllers, gateway()).await
}

/// [`start`], with the controllers talking to etcd through `etcd` (a fault-injecting client).
pub async fn start_with(
    namespace: &TestNamespace,
    controllers: &[ControllerKind],
    etcd: EtcdClient,
) -> Operator {
    install_crds().await;
    namespace.finalizers_go_with_it(ApiResource::erase::<SampleDB>(&()));
    start_on(testkit::config().await, &namespace.name, controllers, etcd).await
}

/// Starts `controllers` watching `namespace`, as the ServiceAccount `account_namespace/account`
/// (impersonated): returns once their caches have synced, which needs that identity's RBAC to
/// let them list and watch everything they own.
pub async fn start_as(
    namespace: &str,
    controllers: &[ControllerKind],
    account_namespace: &str,
    account: &str,
) -> Operator {
    let mut config = testkit::config().await;
    config.auth_info.impersonate = Some(format!(
        "system:serviceaccount:{account_namespace}:{account}"
    ));
    config.auth_info.impersonate_groups = Some(vec![
        "system:serviceaccounts".to_owned(),
        format!("system:serviceaccounts:{account_namespace}"),
        "system:authenticated".to_owned(),
    ]);
    start_on(config, namespace, controllers, gateway()).await
}

/// The gateway the operator uses, resolving names as the test machine does.
pub fn gateway() -> EtcdClient {
    EtcdClient::gateway(MemberResolver::default())
}

async fn start_on(
    config: kube::Config,
    namespace: &str,
    controllers: &[ControllerKind],
    etcd: EtcdClient,
) -> Operator {
    let metrics = Arc::new(Metrics::default());
    let client = api_client(config, Timeouts::default().request, &metrics).unwrap();
    let options = Options {
        namespace: Some(namespace.to_owned()),
        controllers: controllers.to_vec(),
        concurrency: 4,
        metrics_address: None,
        health_address: None,
        metrics_secure: false,
        metrics_cert_dir: None,
        leader_election: None,
        etcd_addressing: Addressing::Loopback,
        etcd_client: etcd,
        etcd_member_pods: Default::default(),
        helper_image: None,
        timeouts: Timeouts::default(),
    };
    let readiness = Readiness::default();
    let shutdown = CancellationToken::new();
    let controllers = start_controllers(client, &options, &readiness, &metrics, &shutdown);
    eventually(TIMEOUT, "the controllers' caches to sync", || async {
        readiness.not_ready().is_none().then_some(())
    })
    .await;
    Operator {
        metrics,
        shutdown,
        _controllers: controllers,
    }
}

pub async fn install_crds() {
    static INSTALLED: OnceCell<()> = OnceCell::const_new();
    INSTALLED
        .get_or_init(|| async {
            let crds: Api<CustomResourceDefinition> = Api::all(testkit::client().await);
            for crd in app_operator::api::crds() {
                let name = crd.metadata.name.clone().unwrap();
                crds.patch(
                    &name,
                    &PatchParams::apply("app-operator-tests").force(),
                    &Patch::Apply(&crd),
                )
                .await
                .unwrap();
                eventually(TIMEOUT, "the CRD to be Established", || async {
                    let crd = crds.get(&name).await.ok()?;
                    let conditions = crd.status?.conditions?;
                    conditions
                        .iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                        .then_some(())
                })
                .await;
            }
        })
        .await;
}

/// The API server's rejection of a create: its status code and message.
pub fn rejection<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> Status {
    match result {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("expected the API server to reject the object, got {other:?}"),
    }
}

/// The namespace's events, one line each: `<type> <reason>: <note>`.
pub async fn events(ns: &testkit::TestNamespace) -> String {
    testkit::kubectl_ok(&[
        "get",
        "events",
        "-n",
        &ns.name,
        "-o",
        "jsonpath={range .items[*]}{.type} {.reason}: {.note}{.message}{\"\\n\"}{end}",
    ])
}

/// The condition `type_` of a status's conditions, as (status, reason).
pub fn condition(
    conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
    type_: &str,
) -> Option<(String, String)> {
    conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

/// Counts the Pods matching a label selector that exist and are not terminating, from a watch
/// that has synced before [`PodCount::start`] returns: the most seen at once, and the fewest
/// since the last [`PodCount::reset_fewest`]. Reading either fails the test if the watch failed
/// or ended since: a count with a gap proves nothing.
pub struct PodCount {
    state: Arc<std::sync::Mutex<PodCountState>>,
    watch: testkit::watch::Watch,
}

#[derive(Default)]
struct PodCountState {
    live: std::collections::HashSet<String>,
    most: usize,
    fewest: Option<usize>,
}

impl PodCount {
    pub async fn start(pods: Api<k8s_openapi::api::core::v1::Pod>, selector: &str) -> PodCount {
        use kube::ResourceExt;
        use kube::runtime::{WatchStreamExt, watcher};
        let state = Arc::new(std::sync::Mutex::new(PodCountState::default()));
        let (synced_tx, synced_rx) = tokio::sync::oneshot::channel();
        let events = watcher(pods, watcher::Config::default().labels(selector)).default_backoff();
        let watch = testkit::watch::Watch::spawn(&format!("the Pods {selector}"), events, {
            let state = state.clone();
            let mut synced = Some(synced_tx);
            move |event| {
                let mut state = state.lock().unwrap();
                match event {
                    watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => {
                        if pod.metadata.deletion_timestamp.is_some() {
                            state.live.remove(&pod.name_any());
                        } else {
                            state.live.insert(pod.name_any());
                        }
                    }
                    watcher::Event::Delete(pod) => {
                        state.live.remove(&pod.name_any());
                    }
                    watcher::Event::InitDone => {
                        if let Some(tx) = synced.take() {
                            let _ = tx.send(());
                        }
                    }
                    watcher::Event::Init => {}
                }
                let live = state.live.len();
                state.most = state.most.max(live);
                state.fewest = Some(state.fewest.map_or(live, |f| f.min(live)));
                async {}
            }
        });
        let synced = tokio::time::timeout(TIMEOUT, synced_rx)
            .await
            .expect("the Pod watch to sync");
        if synced.is_err() {
            // The sender went with the watch's handler: the watch stopped before it synced.
            watch.assert_alive();
        }
        PodCount { state, watch }
    }

    /// The most non-terminating Pods seen at once.
    pub fn most(&self) -> usize {
        self.watch.assert_alive();
        self.state.lock().unwrap().most
    }

    /// The fewest non-terminating Pods seen since the last reset.
    pub fn fewest(&self) -> usize {
        self.watch.assert_alive();
        let state = self.state.lock().unwrap();
        state.fewest.unwrap_or(state.live.len())
    }

    pub fn reset_fewest(&self) {
        let mut state = self.state.lock().unwrap();
        state.fewest = Some(state.live.len());
    }
}

/// A ValidatingAdmissionPolicy refusing Services named `refused*` in `ns`: a MyApp of that name
/// fails permanently. Returns the manifest's path, to delete it.
pub async fn refuse_services(ns: &TestNamespace) -> std::path::PathBuf {
    let policy = format!("refuse-{}", ns.name);
    let manifests = serde_json::json!({ "apiVersion": "v1", "kind": "List", "items": [
        { "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
          "metadata": { "name": policy },
          "spec": { "failurePolicy": "Fail",
            "matchConstraints": { "resourceRules": [{ "apiGroups": [""], "apiVersions": ["v1"],
               "operations": ["CREATE", "UPDATE"], "resources": ["services"] }] },
            "validations": [{ "expression": "!object.metadata.name.startsWith('refused')",
               "message": "services named refused* are not allowed here", "reason": "Invalid" }] } },
        { "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
          "metadata": { "name": policy },
          "spec": { "policyName": policy, "validationActions": ["Deny"],
            "matchResources": { "namespaceSelector": { "matchLabels": { "kubernetes.io/metadata.name": ns.name } } } } }
    ]});
    let path = std::env::temp_dir().join(format!("{}-policy.json", ns.name));
    std::fs::write(&path, manifests.to_string()).unwrap();
    testkit::kubectl_ok(&["apply", "-f", path.to_str().unwrap()]);
    // Policies take effect asynchronously: wait until a Service of that name is refused.
    let services = ns.api::<k8s_openapi::api::core::v1::Service>();
    let probe: k8s_openapi::api::core::v1::Service = testkit::object(serde_json::json!({
        "metadata": { "name": "refused-probe" }, "spec": { "ports": [{ "port": 80 }] } }));
    eventually(TIMEOUT, "the policy to refuse Services", || async {
        match services
            .create(&kube::api::PostParams::default(), &probe)
            .await
        {
            Err(kube::Error::Api(status)) if status.code == 422 => Some(()),
            Ok(_) => {
                let _ = services.delete("refused-probe", &Default::default()).await;
                None
            }
            Err(_) => None,
        }
    })
    .await;
    path
}

/// Deletes the policy of [`refuse_services`] and waits until a Service of that name is admitted.
pub async fn admit_services_again(ns: &TestNamespace, policy: &std::path::Path) {
    testkit::kubectl_ok(&["delete", "-f", policy.to_str().unwrap()]);
    std::fs::remove_file(policy).unwrap();
    let services = ns.api::<k8s_openapi::api::core::v1::Service>();
    let probe: k8s_openapi::api::core::v1::Service = testkit::object(serde_json::json!({
        "metadata": { "name": "refused-probe" }, "spec": { "ports": [{ "port": 80 }] } }));
    eventually(TIMEOUT, "the policy to admit Services again", || async {
        match services
            .create(&kube::api::PostParams::default(), &probe)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(_) => return None,
        }
        services
            .delete("refused-probe", &Default::default())
            .await
            .ok()
            .map(|_| ())
    })
    .await;
}
