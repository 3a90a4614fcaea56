//! What every integration test needs: a client for the suite's control plane, a fresh namespace
//! (deleted afterwards), the pinned `kubectl`, and polling with a deadline.
//!
//! It never skips: without a control plane every test fails, saying how to get one.
//!
//! Its helpers are assertions: where they `panic!`, the test calling them fails with the reason.
//! A wait is [`eventually`] (or [`settled`], for a baseline); that nothing happens for a while
//! is [`stays_for`], which looks throughout the period, never a sleep and one look at the end.
//! Nothing here is linked into the operator (a dev-dependency); `make run` uses only
//! [`member_runner`] and [`postgres::Binaries`], whose paths return errors instead.

pub mod etcd;
pub mod etcd_store;
pub mod history;
pub mod member_runner;
pub mod node_process;
pub mod postgres;
pub mod proxy;
pub mod sql_store;
pub mod watch;

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::{Client, ResourceExt};
use local_cluster::{Layout, Tools};

/// The kubeconfig of the suite's control plane: `APP_OPERATOR_TEST_KUBECONFIG`, else the running
/// local one. Panics (failing the test) with instructions when there is none.
pub fn kubeconfig() -> PathBuf {
    if let Some(path) = std::env::var_os("APP_OPERATOR_TEST_KUBECONFIG") {
        return PathBuf::from(path);
    }
    let layout = Layout::default();
    if !layout.running().is_empty() {
        return layout.kubeconfig();
    }
    panic!(
        "no Kubernetes control plane for the integration tests.\n\
         Run the suite with `make test` (starts and stops one), or start one with \
         `make cluster-up`, or point APP_OPERATOR_TEST_KUBECONFIG at an existing cluster."
    );
}

pub async fn client() -> Client {
    local_cluster::admin_client(&kubeconfig())
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The client configuration of the suite's control plane (for building a custom client).
pub async fn config() -> kube::Config {
    let kubeconfig =
        kube::config::Kubeconfig::read_from(kubeconfig()).unwrap_or_else(|e| panic!("{e}"));
    kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A client that impersonates `user` (and `groups`), as `kubectl --as` does: for testing what an
/// identity may and may not do.
pub async fn client_as(user: &str, groups: &[&str]) -> Client {
    let mut config = config().await;
    config.auth_info.impersonate = Some(user.to_owned());
    config.auth_info.impersonate_groups = Some(groups.iter().map(|g| (*g).to_owned()).collect());
    Client::try_from(config).unwrap_or_else(|e| panic!("{e}"))
}

/// A one-hour token of the ServiceAccount `namespace/name` (created if missing).
pub async fn service_account_token(namespace: &str, name: &str) -> String {
    let accounts: Api<ServiceAccount> = Api::namespaced(client().await, namespace);
    let account: ServiceAccount = object(serde_json::json!({ "metadata": { "name": name } }));
    match accounts.create(&PostParams::default(), &account).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(error) => panic!("creating ServiceAccount {namespace}/{name}: {error}"),
    }
    let request = serde_json::json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": { "expirationSeconds": 3600 }
    });
    let response: k8s_openapi::api::authentication::v1::TokenRequest = accounts
        .create_subresource("token", name, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| panic!("requesting a token for {namespace}/{name}: {e}"));
    response.status.map(|s| s.token).unwrap_or_default()
}

/// A token of the ServiceAccount `namespace/account` bound to the Pod `pod` (`uid`), as the
/// kubelet mounts one into it: the API server then names the Pod in the user's `extra`
/// (`authentication.kubernetes.io/pod-name`). `None` if refused (the Pod is gone).
pub async fn pod_token(namespace: &str, account: &str, pod: &str, uid: &str) -> Option<String> {
    let accounts: Api<ServiceAccount> = Api::namespaced(client().await, namespace);
    let request = serde_json::json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": { "expirationSeconds": 3600,
                  "boundObjectRef": { "apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid } }
    });
    let response: k8s_openapi::api::authentication::v1::TokenRequest = accounts
        .create_subresource("token", account, &PostParams::default(), &request)
        .await
        .ok()?;
    response.status.map(|s| s.token)
}

/// A client that authenticates with `token` alone.
pub async fn client_with_token(token: &str) -> Client {
    let mut config = config().await;
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.to_owned().into()),
        ..Default::default()
    };
    Client::try_from(config).unwrap_or_else(|e| panic!("{e}"))
}

/// A kubeconfig (written to `path`) that authenticates as the ServiceAccount `namespace/name`:
/// to run the operator under its real identity.
pub async fn service_account_kubeconfig(namespace: &str, name: &str, path: &std::path::Path) {
    let token = service_account_token(namespace, name).await;
    let admin = kube::config::Kubeconfig::read_from(kubeconfig()).unwrap_or_else(|e| panic!("{e}"));
    let cluster = admin
        .clusters
        .first()
        .and_then(|c| c.cluster.clone())
        .unwrap_or_else(|| panic!("no cluster in the kubeconfig"));
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority-data: {}\n\
         users:\n- name: {name}\n  user:\n    token: {token}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: {name}\n\
         current-context: c\n",
        cluster.server.unwrap_or_default(),
        cluster.certificate_authority_data.unwrap_or_default(),
    );
    std::fs::write(path, kubeconfig).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

/// The pinned upstream binaries (built on first use, cached afterwards).
pub fn tools() -> &'static Tools {
    static TOOLS: OnceLock<Tools> = OnceLock::new();
    TOOLS.get_or_init(|| {
        Tools::ensure(&local_cluster::repo_root().join("hack/k8s-tools"))
            .unwrap_or_else(|e| panic!("{e}"))
    })
}

/// `kubectl` of the pinned release, pointed at the suite's control plane.
pub fn kubectl(args: &[&str]) -> Output {
    kubectl_on(&kubeconfig(), args)
}

/// `kubectl` of the pinned release, pointed at the control plane of `kubeconfig` (a test's own).
pub fn kubectl_on(kubeconfig: &std::path::Path, args: &[&str]) -> Output {
    Command::new(tools().bin("kubectl"))
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .unwrap_or_else(|e| panic!("running kubectl: {e}"))
}

/// Like [`kubectl`], failing the test with kubectl's stderr unless it succeeds; returns stdout.
pub fn kubectl_ok(args: &[&str]) -> String {
    kubectl_ok_on(&kubeconfig(), args)
}

/// Like [`kubectl_on`], failing the test with kubectl's stderr unless it succeeds.
pub fn kubectl_ok_on(kubeconfig: &std::path::Path, args: &[&str]) -> String {
    let output = kubectl_on(kubeconfig, args);
    assert!(
        output.status.success(),
        "kubectl {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A namespace of its own for one test, deleted when dropped.
pub struct TestNamespace {
    pub name: String,
    pub client: Client,
    /// Kinds whose finalizers go when the namespace does ([`TestNamespace::finalizers_go_with_it`]).
    unfinalized: Mutex<Vec<ApiResource>>,
}

impl TestNamespace {
    /// Creates `<prefix>-<random>` and waits until Pods can be created in it.
    pub async fn new(prefix: &str) -> TestNamespace {
        let client = client().await;
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let namespace: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": { "generateName": format!("{prefix}-"), "labels": { "app-operator.test": "true" } }
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let created = namespaces
            .create(&PostParams::default(), &namespace)
            .await
            .unwrap_or_else(|e| panic!("creating a test namespace: {e}"));
        let name = created.metadata.name.unwrap_or_default();
        let service_accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &name);
        eventually(
            Duration::from_secs(30),
            "the namespace's default ServiceAccount",
            || async { service_accounts.get_opt("default").await.ok().flatten() },
        )
        .await;
        TestNamespace {
            name,
            client,
            unfinalized: Mutex::default(),
        }
    }

    /// The operator that would finalize `kind`'s objects here runs in the test and stops before
    /// the namespace is deleted: their finalizers are removed then. Left, they would hold the
    /// namespace Terminating for the rest of the run, the namespace controller sweeping it every
    /// few seconds (with ten such namespaces, a third of a core of the 2 went to the API server).
    pub fn finalizers_go_with_it(&self, kind: ApiResource) {
        if let Ok(mut kinds) = self.unfinalized.lock()
            && !kinds.contains(&kind)
        {
            kinds.push(kind);
        }
    }

    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        // Drop cannot await, and the test's runtime may be shutting down: delete from a thread
        // with its own runtime and client.
        let name = self.name.clone();
        let unfinalized = std::mem::take(
            self.unfinalized
                .get_mut()
                .unwrap_or_else(|e| e.into_inner()),
        );
        let deleted = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            runtime.block_on(async {
                let client = local_cluster::admin_client(&kubeconfig()).await.ok()?;
                Api::<Namespace>::all(client.clone())
                    .delete(&name, &DeleteParams::background())
                    .await
                    .ok()?;
                let unset = Patch::Merge(serde_json::json!({ "metadata": { "finalizers": null } }));
                for kind in &unfinalized {
                    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &name, kind);
                    let left = api.list(&ListParams::default()).await.ok()?;
                    for object in left.items.iter().filter(|o| !o.finalizers().is_empty()) {
                        let _ = api
                            .patch(&object.name_any(), &PatchParams::default(), &unset)
                            .await;
                    }
                }
                Some(())
            })
        });
        let _ = deleted.join();
    }
}

/// A Pod in phase Running whose Ready condition is True.
pub fn running_and_ready(pod: &k8s_openapi::api::core::v1::Pod) -> bool {
    let status = pod.status.as_ref();
    status.and_then(|s| s.phase.as_deref()) == Some("Running")
        && status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Polls `probe` every 100 ms until it returns `Some`, failing the test after `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// How often [`stays_for`] and [`settled`] look.
const POLL: Duration = Duration::from_millis(250);

/// Asserts that `check` holds throughout `period`: it is run at once, then every 250 ms until
/// the period is over, and the first `Err` fails the test with `what` (the invariant) and what
/// the check saw. A passing run prints what was watched, and how many times.
pub async fn stays_for<F, Fut>(period: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let start = Instant::now();
    let mut checks = 0;
    loop {
        checks += 1;
        if let Err(seen) = check().await {
            panic!(
                "{what}: broken {:?} into {period:?} (check {checks}): {seen}",
                start.elapsed()
            );
        }
        let left = period.saturating_sub(start.elapsed());
        if left.is_zero() {
            break;
        }
        tokio::time::sleep(POLL.min(left)).await;
    }
    println!("held for {period:?} ({checks} checks): {what}");
}

/// Polls `probe` every 250 ms until it has returned the same value for `quiet`, and returns that
/// value; fails the test if it still changes after `timeout`. For a baseline taken once what was
/// in flight has landed; that nothing changes afterwards is [`stays_for`].
pub async fn settled<T, F, Fut>(timeout: Duration, quiet: Duration, what: &str, mut probe: F) -> T
where
    T: PartialEq + std::fmt::Debug,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let deadline = Instant::now() + timeout;
    let mut value = probe().await;
    let mut since = Instant::now();
    while since.elapsed() < quiet {
        assert!(
            Instant::now() < deadline,
            "{what} still changed after {timeout:?} (waited for {quiet:?} without a change); last: {value:?}"
        );
        tokio::time::sleep(POLL).await;
        let now = probe().await;
        if now != value {
            (value, since) = (now, Instant::now());
        }
    }
    value
}

/// Builds a typed object from JSON (test fixtures read best as the YAML users write).
pub fn object<K: serde::de::DeserializeOwned>(value: serde_json::Value) -> K {
    serde_json::from_value(value).unwrap_or_else(|e| panic!("fixture does not deserialize: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The panic message of a test helper run in a task of its own.
    async fn failure(task: tokio::task::JoinHandle<()>) -> String {
        let error = task.await.expect_err("the helper passed");
        let payload = error.into_panic();
        payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_default()
    }

    #[tokio::test]
    async fn stays_for_fails_at_the_first_broken_check_naming_it() {
        let started = Instant::now();
        let task = tokio::spawn(async {
            let mut checks = 0;
            stays_for(Duration::from_secs(5), "the count stays below 3", || {
                checks += 1;
                let seen = checks;
                async move {
                    if seen < 3 {
                        Ok(())
                    } else {
                        Err(format!("count {seen}"))
                    }
                }
            })
            .await;
        });
        let message = failure(task).await;
        assert!(
            message.starts_with("the count stays below 3: broken ")
                && message.ends_with("into 5s (check 3): count 3"),
            "{message}"
        );
        // Midway, not at the end of the period: the third check comes after about 500 ms.
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn stays_for_checks_throughout_the_period() {
        let mut checks = 0;
        let started = Instant::now();
        stays_for(Duration::from_secs(1), "nothing", || {
            checks += 1;
            async { Ok(()) }
        })
        .await;
        assert!(started.elapsed() >= Duration::from_secs(1));
        // At 0, 250, 500, 750 and 1000 ms.
        assert!((4..=6).contains(&checks), "{checks} checks");
    }

    #[tokio::test]
    async fn settled_returns_the_value_once_it_stops_changing() {
        let mut probes = 0;
        let started = Instant::now();
        let value = settled(
            Duration::from_secs(5),
            Duration::from_millis(500),
            "the count",
            || {
                probes += 1;
                let value = probes.min(4);
                async move { value }
            },
        )
        .await;
        assert_eq!(value, 4);
        assert!(
            started.elapsed() >= Duration::from_millis(1250),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn settled_fails_when_the_value_never_settles() {
        let task = tokio::spawn(async {
            let mut probes = 0;
            settled(
                Duration::from_secs(1),
                Duration::from_millis(500),
                "the count",
                || {
                    probes += 1;
                    let value = probes;
                    async move { value }
                },
            )
            .await;
        });
        let message = failure(task).await;
        assert!(
            message.starts_with("the count still changed after 1s"),
            "{message}"
        );
    }
}
