//! The `app-operator` process as users run it: probes, metrics, scope flags, leader election,
//! signals, and clear errors.

// Test code: a failed expectation is a failed test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use app_operator::api::{AppCluster, MyApp};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, PostParams};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;
use support::TIMEOUT;
use support::process::{OperatorProcess, get};
use testkit::proxy::{Fault, FaultProxy};
use testkit::{TestNamespace, eventually, kubectl_ok, object, stays_for};

fn my_app(name: &str) -> MyApp {
    object(
        json!({ "apiVersion": "example.com/v1", "kind": "MyApp", "metadata": { "name": name }, "spec": { "image": "nginx:1.27" } }),
    )
}

async fn reconciled(ns: &TestNamespace, name: &str, within: Duration) {
    let apps = ns.api::<MyApp>();
    eventually(
        within,
        &format!("MyApp {name} to be reconciled"),
        // A status the operator wrote: the CRD's default is generation 0.
        || async {
            let status = apps.get(name).await.ok()?.status?;
            (status.observed_generation > Some(0)).then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_metrics_and_scope_flags_of_a_process_running_as_a_service_account() {
    let ns = TestNamespace::new("process-scope").await;
    let other = TestNamespace::new("process-other").await;
    support::install_crds().await;
    let kubeconfig = std::env::temp_dir().join(format!("{}.kubeconfig", ns.name));
    testkit::service_account_kubeconfig(&ns.name, "app-operator", &kubeconfig).await;
    let operator = OperatorProcess::spawn(
        &kubeconfig,
        &[
            "--controllers=myapp",
            &format!("--watch-namespace={}", ns.name),
        ],
    );

    // Alive at once; not ready while the identity may not even list MyApps (caches cannot sync).
    eventually(TIMEOUT, "/healthz 200", || async {
        (get(operator.health, "/healthz").await?.0 == 200).then_some(())
    })
    .await;
    let (code, body) = get(operator.health, "/readyz").await.unwrap();
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("myapp/MyApp"), "{body}");

    // Granted its ClusterRole, it syncs and becomes ready.
    let role = concat!(env!("CARGO_MANIFEST_DIR"), "/../../config/rbac/role.yaml");
    kubectl_ok(&["apply", "-f", role]);
    let binding = format!("app-operator-test-{}", ns.name);
    let subject = format!("--serviceaccount={}:app-operator", ns.name);
    kubectl_ok(&[
        "create",
        "clusterrolebinding",
        &binding,
        "--clusterrole=manager-role",
        &subject,
    ]);
    eventually(
        Duration::from_secs(90),
        "/readyz 200 once permitted",
        || async { (get(operator.health, "/readyz").await?.0 == 200).then_some(()) },
    )
    .await;

    // --watch-namespace: its namespace only. --controllers=myapp: AppClusters are not touched.
    ns.api::<MyApp>()
        .create(&PostParams::default(), &my_app("mine"))
        .await
        .unwrap();
    other
        .api::<MyApp>()
        .create(&PostParams::default(), &my_app("not-mine"))
        .await
        .unwrap();
    let cluster: AppCluster = object(
        json!({ "apiVersion": "demo.demo.io/v1", "kind": "AppCluster", "metadata": { "name": "c" }, "spec": { "size": 1 } }),
    );
    ns.api::<AppCluster>()
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    reconciled(&ns, "mine", TIMEOUT).await;
    assert!(
        ns.api::<Deployment>()
            .get_opt("mine")
            .await
            .unwrap()
            .is_some()
    );
    stays_for(
        Duration::from_secs(3),
        "nothing reconciled outside --watch-namespace or --controllers",
        || async {
            let not_mine = other.api::<MyApp>().get("not-mine").await.unwrap();
            // The CRDs' default status is generation 0: none written.
            if not_mine.status.and_then(|s| s.observed_generation) > Some(0) {
                return Err("reconciled outside --watch-namespace".into());
            }
            if other
                .api::<Deployment>()
                .get_opt("not-mine")
                .await
                .unwrap()
                .is_some()
            {
                return Err("a Deployment outside --watch-namespace".into());
            }
            let cluster = ns.api::<AppCluster>().get("c").await.unwrap();
            if cluster.status.and_then(|s| s.observed_generation) > Some(0) {
                return Err("AppCluster reconciled with --controllers=myapp".into());
            }
            let pods = ns
                .api::<Pod>()
                .list(&ListParams::default().labels("app=c"))
                .await
                .unwrap();
            pods.items
                .is_empty()
                .then_some(())
                .ok_or("Pods of the AppCluster with --controllers=myapp".into())
        },
    )
    .await;

    // /metrics: Prometheus text with controller-runtime's names, counting what happened.
    let (code, text) = get(operator.metrics, "/metrics").await.unwrap();
    assert_eq!(code, 200);
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let value = line.rsplit(' ').next().unwrap();
        assert!(
            value.parse::<f64>().is_ok(),
            "not Prometheus text: {line:?}"
        );
    }
    for name in [
        "controller_runtime_reconcile_time_seconds_bucket",
        "controller_runtime_max_concurrent_reconciles",
        "controller_runtime_active_workers",
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        "process_open_fds",
        "rest_client_requests_total",
    ] {
        assert!(text.contains(name), "/metrics lacks {name}");
    }
    let success = r#"controller_runtime_reconcile_total{controller="myapp",result="success"}"#;
    let before = operator.metric(success).await.unwrap();
    assert!(before >= 1.0);
    ns.api::<MyApp>()
        .create(&PostParams::default(), &my_app("second"))
        .await
        .unwrap();
    reconciled(&ns, "second", TIMEOUT).await;
    assert!(
        operator.metric(success).await.unwrap() > before,
        "reconcile_total did not rise"
    );
    assert!(
        operator.log().contains("\"controller\":\"myapp\""),
        "no JSON log lines with the controller"
    );

    kubectl_ok(&["delete", "clusterrolebinding", &binding]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_reconciles_and_a_standby_takes_over_on_kill_and_on_sigterm() {
    let ns = TestNamespace::new("process-leader").await;
    support::install_crds().await;
    let kubeconfig = testkit::kubeconfig();
    let args = [
        "--leader-elect",
        &format!("--leader-election-namespace={}", ns.name),
        &format!("--watch-namespace={}", ns.name),
        "--controllers=myapp",
    ];
    let mut first = Some(OperatorProcess::spawn(&kubeconfig, &args));
    let mut second = Some(OperatorProcess::spawn(&kubeconfig, &args));
    let leases = ns.api::<Lease>();
    let holder = || async {
        let lease = leases.get_opt("app-operator.example.com").await.ok()??;
        lease.spec?.holder_identity.filter(|h| !h.is_empty())
    };
    let holds = |identity: &str, process: &OperatorProcess| {
        identity.contains(&format!("_{:08x}", process.pid()))
    };

    let leader_identity = eventually(TIMEOUT, "a lease holder", holder).await;
    let first_leads = holds(&leader_identity, first.as_ref().unwrap());
    let (leader, standby) = if first_leads {
        (first.take().unwrap(), second.take().unwrap())
    } else {
        (second.take().unwrap(), first.take().unwrap())
    };
    assert!(
        holds(&leader_identity, &leader),
        "the holder {leader_identity} is neither process"
    );

    // Only the leader reconciles.
    ns.api::<MyApp>()
        .create(&PostParams::default(), &my_app("one"))
        .await
        .unwrap();
    reconciled(&ns, "one", TIMEOUT).await;
    let total = r#"controller_runtime_reconcile_total{controller="myapp",result="success"}"#;
    let master = r#"leader_election_master_status{name="app-operator.example.com"}"#;
    assert!(leader.metric(total).await.unwrap_or(0.0) >= 1.0);
    assert_eq!(
        standby.metric(total).await.unwrap_or(0.0),
        0.0,
        "the standby reconciled"
    );
    assert_eq!(
        (leader.metric(master).await, standby.metric(master).await),
        (Some(1.0), Some(0.0))
    );
    assert_eq!(
        get(standby.health, "/readyz").await.map(|r| r.0),
        Some(200),
        "a standby is ready"
    );

    // kill -9 of the leader: the standby reconciles a new MyApp within 20 s.
    kill(
        Pid::from_raw(i32::try_from(leader.pid()).unwrap()),
        Signal::SIGKILL,
    )
    .unwrap();
    drop(leader);
    ns.api::<MyApp>()
        .create(&PostParams::default(), &my_app("two"))
        .await
        .unwrap();
    reconciled(&ns, "two", Duration::from_secs(20)).await;
    assert!(holds(&holder().await.unwrap(), &standby));

    // SIGTERM of the (new) leader: it releases the lease and exits 0; a third takes over in 5 s.
    let third = OperatorProcess::spawn(&kubeconfig, &args);
    eventually(TIMEOUT, "the third process to be ready", || async {
        (get(third.health, "/readyz").await?.0 == 200).then_some(())
    })
    .await;
    let mut leader = standby;
    kill(
        Pid::from_raw(i32::try_from(leader.pid()).unwrap()),
        Signal::SIGTERM,
    )
    .unwrap();
    let terminated = Instant::now();
    // The deadline is the assertion: the third process holds the lease within 5 s.
    eventually(
        Duration::from_secs(5),
        "the third process to hold the lease",
        || async { holder().await.filter(|h| holds(h, &third)) },
    )
    .await;
    let status = leader.wait();
    assert!(
        status.success(),
        "SIGTERM exit: {status}; log:\n{}",
        leader.log()
    );
    assert!(terminated.elapsed() < Duration::from_secs(10));
    ns.api::<MyApp>()
        .create(&PostParams::default(), &my_app("three"))
        .await
        .unwrap();
    reconciled(&ns, "three", TIMEOUT).await;
    ns.api::<MyApp>()
        .delete("three", &DeleteParams::default())
        .await
        .unwrap();
}

/// The leader's connection to the API server goes dead (blackholed: no error, no close, no
/// answer): it stops and exits non-zero within its renew deadline, as client-go's leader does, so
/// it is gone before a standby may take the lease when it expires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_the_api_server_exits_within_its_renew_deadline() {
    let ns = TestNamespace::new("process-cutoff").await;
    support::install_crds().await;
    let admin = testkit::kubeconfig();
    let server = std::fs::read_to_string(&admin)
        .unwrap()
        .lines()
        .find_map(|line| {
            line.trim()
                .strip_prefix("server: https://")
                .map(str::to_owned)
        })
        .unwrap();
    let proxy = FaultProxy::start(server.parse().unwrap()).await;
    let kubeconfig = std::env::temp_dir().join(format!("{}.kubeconfig", ns.name));
    proxy.kubeconfig(&admin, &kubeconfig);
    const RENEW_DEADLINE: Duration = Duration::from_secs(4);
    let mut operator = OperatorProcess::spawn(
        &kubeconfig,
        &[
            "--leader-elect",
            "--leader-election-id=cutoff",
            &format!("--leader-election-namespace={}", ns.name),
            "--leader-election-lease-duration=6s",
            "--leader-election-renew-deadline=4s",
            "--leader-election-retry-period=1s",
            &format!("--watch-namespace={}", ns.name),
            "--controllers=myapp",
        ],
    );
    let master = r#"leader_election_master_status{name="cutoff"}"#;
    eventually(TIMEOUT, "the operator to lead", || async {
        (operator.metric(master).await? == 1.0).then_some(())
    })
    .await;

    proxy.set(Fault::Blackhole);
    let cut = Instant::now();
    let status = eventually(
        RENEW_DEADLINE + Duration::from_secs(2),
        "the cut-off leader to exit within its renew deadline (4 s) and a margin",
        || std::future::ready(operator.exited()),
    )
    .await;
    let after = cut.elapsed();
    assert!(!status.success(), "exit status {status}");
    let log = operator.log();
    assert!(
        log.contains("could not renew within the renew deadline")
            && log.contains("leader election lost"),
        "exited after {after:?} without saying why:\n{log}"
    );
    proxy.set(Fault::Pass);
}

/// Losing the right to watch (as a deleted RoleBinding or CRD does) is loud: a WARN line and a
/// counted error per failed call, and `/readyz` fails once the watch has been failing for 30 s
/// (not before); it is ready again once the right is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_that_keeps_failing_makes_the_process_unready_until_it_recovers() {
    let ns = TestNamespace::new("process-watchfail").await;
    support::install_crds().await;
    let kubeconfig = std::env::temp_dir().join(format!("{}.kubeconfig", ns.name));
    testkit::service_account_kubeconfig(&ns.name, "app-operator", &kubeconfig).await;
    let role = concat!(env!("CARGO_MANIFEST_DIR"), "/../../config/rbac/role.yaml");
    kubectl_ok(&["apply", "-f", role]);
    let grant = [
        "create",
        "rolebinding",
        "app-operator",
        "--clusterrole=manager-role",
        &format!("--serviceaccount={}:app-operator", ns.name),
        "-n",
        &ns.name,
    ];
    kubectl_ok(&grant);
    let operator = OperatorProcess::spawn(
        &kubeconfig,
        &[
            "--controllers=myapp",
            &format!("--watch-namespace={}", ns.name),
            // Watches renewed every 2 s, so the lost right shows at once.
            "--watch-timeout=2s",
            "--request-timeout=10s",
        ],
    );
    operator.ready().await;

    kubectl_ok(&["delete", "rolebinding", "app-operator", "-n", &ns.name]);
    let revoked = Instant::now();
    let body = eventually(
        Duration::from_secs(90),
        "/readyz 503 naming the failing MyApp watch",
        || async {
            let (code, body) = get(operator.health, "/readyz").await?;
            // Each watch is named once its own failures are 30 s old; the MyApp watch's first
            // failure may come after another's (each fails when it next lists or reconnects).
            (code == 503 && body.contains("myapp/MyApp: watch failing")).then_some(body)
        },
    )
    .await;
    assert!(
        revoked.elapsed() >= Duration::from_secs(30),
        "unready {:?} after the first failures, before the 30 s grace: {body}",
        revoked.elapsed()
    );
    assert!(body.contains("myapp/MyApp"), "{body}");
    let errors = r#"app_operator_watch_errors_total{controller="myapp",kind="MyApp"}"#;
    assert!(operator.metric(errors).await.unwrap_or(0.0) >= 1.0);
    assert!(
        operator
            .log()
            .contains("watch failed; retrying with backoff"),
        "no WARN line"
    );

    kubectl_ok(&grant);
    eventually(
        Duration::from_secs(90),
        "/readyz 200 once the right is back",
        || async { (get(operator.health, "/readyz").await?.0 == 200).then_some(()) },
    )
    .await;
}

#[test]
fn an_unreachable_api_server_and_bad_flags_fail_with_one_clear_line() {
    let dir = std::env::temp_dir().join("app-operator-tests");
    std::fs::create_dir_all(&dir).unwrap();
    let unreachable = dir.join("unreachable.kubeconfig");
    std::fs::write(
        &unreachable,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n    insecure-skip-tls-verify: true\nusers:\n- name: u\n  user:\n    token: x\ncontexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\n",
    )
    .unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_app-operator"))
            .args(args)
            .output()
            .unwrap()
    };

    let output = run(&[
        "run",
        &format!("--kubeconfig={}", unreachable.display()),
        "--metrics-bind-address=0",
        "--health-probe-bind-address=0",
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(
        errors[0].contains("cannot reach the Kubernetes API server at https://127.0.0.1:1"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("panicked") && !stderr.contains("backtrace"),
        "{stderr}"
    );

    let output = run(&["run", "--no-such-flag"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr
            .lines()
            .next()
            .unwrap_or_default()
            .starts_with("error: unexpected argument '--no-such-flag'"),
        "{stderr}"
    );

    // A log level that is not one is refused, not silently replaced by `info`.
    let output = run(&["run", "--log-level=app_operator=loud"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr.starts_with("error: invalid value 'app_operator=loud' for '--log-level <LOG_LEVEL>': not a log level or tracing filter"),
        "{stderr}"
    );
}

/// A client authenticated by a ServiceAccount token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_role_is_enough_for_every_controller_and_no_more() {
    let ns = TestNamespace::new("process-rbac").await;
    support::install_crds().await;
    let kubeconfig = std::env::temp_dir().join(format!("{}.kubeconfig", ns.name));
    testkit::service_account_kubeconfig(&ns.name, "app-operator", &kubeconfig).await;
    let role = concat!(env!("CARGO_MANIFEST_DIR"), "/../../config/rbac/role.yaml");
    let role_text = std::fs::read_to_string(role).unwrap();
    assert!(!role_text.contains('*'), "the ClusterRole has a wildcard");
    // Of Secrets, only `get` by name (a TLS EtcdCluster's client certificate) and `create` (a
    // SampleDB's generated credentials): never listing or watching them.
    let rules: serde_json::Value = serde_norway::from_str(&role_text).unwrap();
    for rule in rules["rules"].as_array().unwrap() {
        if rule["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r == "secrets")
        {
            assert_eq!(
                rule["verbs"],
                json!(["get", "create"]),
                "the ClusterRole lists, watches or changes Secrets"
            );
        }
    }
    kubectl_ok(&["apply", "-f", role]);
    let binding = format!("app-operator-rbac-{}", ns.name);
    kubectl_ok(&[
        "create",
        "clusterrolebinding",
        &binding,
        "--clusterrole=manager-role",
        &format!("--serviceaccount={}:app-operator", ns.name),
    ]);
    let operator =
        OperatorProcess::spawn(&kubeconfig, &[&format!("--watch-namespace={}", ns.name)]);
    eventually(Duration::from_secs(90), "/readyz 200", || async {
        (get(operator.health, "/readyz").await?.0 == 200).then_some(())
    })
    .await;

    // MyApp: children applied, status written, events published.
    ns.api::<MyApp>()
        .create(&PostParams::default(), &my_app("web"))
        .await
        .unwrap();
    eventually(TIMEOUT, "MyApp web Ready", || async {
        let status = ns.api::<MyApp>().get("web").await.ok()?.status?;
        (support::condition(&status.conditions, "Ready")?.0 == "True").then_some(())
    })
    .await;
    // AppCluster: Pods created, status written.
    let cluster: AppCluster = object(
        json!({ "apiVersion": "demo.demo.io/v1", "kind": "AppCluster", "metadata": { "name": "c" }, "spec": { "size": 2 } }),
    );
    ns.api::<AppCluster>()
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    eventually(TIMEOUT, "AppCluster c ready 2", || async {
        (ns.api::<AppCluster>().get("c").await.ok()?.status?.ready == 2).then_some(())
    })
    .await;
    // Sample: an event recorded.
    let sample = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../config/samples/example_v1alpha1_sample.yaml"
    );
    kubectl_ok(&["apply", "-n", &ns.name, "-f", sample]);
    let events = ns.api::<k8s_openapi::api::events::v1::Event>();
    eventually(TIMEOUT, "the Sample's event", || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .any(|e| e.reason.as_deref() == Some("Observed"))
            .then_some(())
    })
    .await;
    // SampleDB: credentials created, children applied, the finalizer added, Jobs run; then the
    // deletion's snapshot Job and the removal of the StatefulSet and data claim.
    let db: app_operator::api::SampleDB = object(json!({
        "apiVersion": "db.example.com/v1alpha1", "kind": "SampleDB",
        "metadata": { "name": "db" }, "spec": { "version": "15.8" },
    }));
    let dbs = ns.api::<app_operator::api::SampleDB>();
    dbs.create(&PostParams::default(), &db).await.unwrap();
    eventually(TIMEOUT, "SampleDB db Ready", || async {
        let status = dbs.get("db").await.ok()?.status?;
        (support::condition(&status.conditions, "Ready")?.0 == "True").then_some(())
    })
    .await;
    dbs.delete("db", &DeleteParams::default()).await.unwrap();
    eventually(
        TIMEOUT,
        "SampleDB db deleted after its snapshot",
        || async { dbs.get_opt("db").await.ok()?.is_none().then_some(()) },
    )
    .await;
    assert!(
        !operator.log().contains("Forbidden"),
        "a request was forbidden:\n{}",
        operator.log()
    );

    // And no more: no listing Secrets, no deleting Namespaces, no RBAC objects.
    let identity =
        testkit::client_with_token(&testkit::service_account_token(&ns.name, "app-operator").await)
            .await;
    let forbidden = |result: Result<(), kube::Error>| match result {
        Err(kube::Error::Api(status)) => status.code == 403,
        _ => false,
    };
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(identity.clone(), &ns.name);
    assert!(
        forbidden(secrets.list(&ListParams::default()).await.map(|_| ())),
        "may list Secrets"
    );
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(identity.clone());
    assert!(
        forbidden(
            namespaces
                .delete(&ns.name, &DeleteParams::default())
                .await
                .map(|_| ())
        ),
        "may delete Namespaces"
    );
    let roles: kube::Api<k8s_openapi::api::rbac::v1::ClusterRole> =
        kube::Api::all(identity.clone());
    assert!(
        forbidden(roles.list(&ListParams::default()).await.map(|_| ())),
        "may read RBAC objects"
    );
    let bindings: kube::Api<k8s_openapi::api::rbac::v1::RoleBinding> =
        kube::Api::namespaced(identity, &ns.name);
    let escalate: k8s_openapi::api::rbac::v1::RoleBinding = object(json!({
        "metadata": { "name": "escalate" },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin" },
        "subjects": [{ "kind": "ServiceAccount", "name": "app-operator", "namespace": ns.name }]
    }));
    assert!(
        forbidden(
            bindings
                .create(&PostParams::default(), &escalate)
                .await
                .map(|_| ())
        ),
        "may create RoleBindings"
    );
    kubectl_ok(&["delete", "clusterrolebinding", &binding]);
}

/// Restarts must not create Pods: no reconcile acts before every cache it reads has synced (an
/// empty Pod cache read as "no Pods" created `size` more after a restart).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_appcluster_survives_five_sigkills_without_a_pod_too_many() {
    let ns = TestNamespace::new("process-restart").await;
    support::install_crds().await;
    let kubeconfig = testkit::kubeconfig();
    let args = [
        &format!("--watch-namespace={}", ns.name),
        "--controllers=appcluster",
    ];
    let cluster: AppCluster = object(
        json!({ "apiVersion": "demo.demo.io/v1", "kind": "AppCluster", "metadata": { "name": "fifty" }, "spec": { "size": 50 } }),
    );
    let count = support::PodCount::start(ns.api::<Pod>(), "app=fifty").await;
    let mut operator = OperatorProcess::spawn(&kubeconfig, &args);
    ns.api::<AppCluster>()
        .create(&PostParams::default(), &cluster)
        .await
        .unwrap();
    eventually(
        Duration::from_secs(90),
        "AppCluster fifty ready 50",
        || async {
            (ns.api::<AppCluster>()
                .get("fifty")
                .await
                .ok()?
                .status?
                .ready
                == 50)
                .then_some(())
        },
    )
    .await;
    for restart in 1..=5 {
        kill(
            Pid::from_raw(i32::try_from(operator.pid()).unwrap()),
            Signal::SIGKILL,
        )
        .unwrap();
        operator.wait();
        operator = OperatorProcess::spawn(&kubeconfig, &args);
        eventually(TIMEOUT, "the restarted operator to reconcile", || async {
            let reconciles = operator
                .metric("controller_runtime_reconcile_total{controller=\"appcluster\",result=\"success\"}")
                .await?;
            (reconciles >= 1.0).then_some(())
        })
        .await;
        stays_for(
            Duration::from_secs(2),
            &format!("restart {restart}: no create, and never more than 50 Pods"),
            || async {
                let (_, body) = get(operator.metrics, "/metrics")
                    .await
                    .ok_or("no answer from /metrics")?;
                let requests = app_operator::telemetry::metrics::requests_by_method(&body);
                if requests.get("POST").copied().unwrap_or(0) != 0 {
                    return Err(format!(
                        "the operator created something; requests {requests:?}; log:\n{}",
                        operator.log()
                    ));
                }
                let most = count.most();
                (most <= 50)
                    .then_some(())
                    .ok_or(format!("{most} Pods existed at once for size 50"))
            },
        )
        .await;
    }
}
