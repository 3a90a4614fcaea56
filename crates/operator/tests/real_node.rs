//! The samples on the real node, with the operator deployed as users deploy it (`make image`,
//! `make load`, `make deploy`: 2 replicas, leader election, its own ServiceAccount): containers
//! run, Services answer, etcd members find each other by their cluster-DNS names.
//!
//! `cargo xtask test` starts a cluster with a real node, deploys the operator and runs this file
//! against it (`test = false` in Cargo.toml: `cargo test --workspace` has no real node to give it).

// Test code: a failed expectation is a failed test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, LogParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use testkit::{TestNamespace, eventually, kubectl, kubectl_ok, running_and_ready};

/// Images are pulled and containers really start: longer than on kwok.
const TIMEOUT: Duration = Duration::from_secs(180);
const OPERATOR_NAMESPACE: &str = "app-operator-system";
const TOOLBOX: &str = "docker.io/app-operator/toolbox:1";

fn sample(file: &str) -> String {
    format!("{}/../../config/samples/{file}", env!("CARGO_MANIFEST_DIR"))
}

/// `selector`'s Pods once there are `count`, all Running and Ready.
async fn ready_pods(ns: &TestNamespace, selector: &str, count: usize) -> Vec<Pod> {
    let pods = ns.api::<Pod>();
    eventually(
        TIMEOUT,
        &format!("{count} Running and Ready Pods labelled {selector}"),
        || async {
            let list = pods
                .list(&ListParams::default().labels(selector))
                .await
                .ok()?;
            (list.items.len() == count && list.items.iter().all(running_and_ready))
                .then_some(list.items)
        },
    )
    .await
}

/// An HTTP GET from this machine (Pod addresses are routed here): the body of a 200.
async fn get(url: &str) -> Option<String> {
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "--fail", "--max-time", "5", url])
        .output()
        .await
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A Pod of the test image in `ns`, Ready, to look at the cluster from inside.
async fn toolbox(ns: &TestNamespace) -> String {
    kubectl_ok(&[
        "run",
        "toolbox",
        "-n",
        &ns.name,
        &format!("--image={TOOLBOX}"),
        "--restart=Never",
        "--command",
        "--",
        "sleep",
        "infinity",
    ]);
    ready_pods(ns, "run=toolbox", 1).await;
    "toolbox".to_owned()
}

/// Waits until `kubectl get <object> -o jsonpath=<path>` in `ns` prints `value`.
async fn field_reaches(ns: &TestNamespace, object: &str, path: &str, value: &str) {
    let what = format!("{object} {path} = {value:?}");
    eventually(TIMEOUT, &what, || async {
        let got = kubectl_ok(&[
            "get",
            object,
            "-n",
            &ns.name,
            "-o",
            &format!("jsonpath={path}"),
        ]);
        (got == value).then_some(())
    })
    .await;
}

fn exec(ns: &TestNamespace, pod: &str, command: &[&str]) -> std::process::Output {
    kubectl(&[&["exec", "-n", &ns.name, pod, "--"][..], command].concat())
}

/// Seed 000's walkthrough: two nginx Pods that really serve, counted Ready only when they are,
/// and a deleted one replaced by another that serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_appcluster_walkthrough_serves_nginx() {
    let ns = TestNamespace::new("real-appcluster").await;
    kubectl_ok(&[
        "apply",
        "-n",
        &ns.name,
        "-f",
        &sample("demo_v1_appcluster.yaml"),
    ]);
    let pods = ready_pods(&ns, "app=appcluster-sample", 2).await;
    for pod in &pods {
        let ip = pod.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap();
        let page = get(&format!("http://{ip}:8080/")).await.unwrap_or_default();
        assert!(
            page.contains("Welcome to nginx"),
            "{} answered {page:?}",
            pod.name_any()
        );
    }
    // status.ready counts Pods the kubelet reports Ready (it follows them a moment later).
    field_reaches(&ns, "appcluster/appcluster-sample", "{.status.ready}", "2").await;

    let deleted = pods[0].name_any();
    ns.api::<Pod>()
        .delete(&deleted, &DeleteParams::default())
        .await
        .unwrap();
    let replaced = eventually(TIMEOUT, "a replacement Pod that is Ready", || async {
        let list = ns
            .api::<Pod>()
            .list(&ListParams::default().labels("app=appcluster-sample"))
            .await
            .ok()?;
        let fresh: Vec<Pod> = list
            .items
            .into_iter()
            .filter(|p| p.name_any() != deleted && p.name_any() != pods[1].name_any())
            .filter(running_and_ready)
            .collect();
        fresh.into_iter().next()
    })
    .await;
    let ip = replaced.status.and_then(|s| s.pod_ip).unwrap();
    let page = get(&format!("http://{ip}:8080/")).await.unwrap_or_default();
    assert!(
        page.contains("Welcome to nginx"),
        "the replacement answered {page:?}"
    );
}

/// The MyApp sample: its Service answers with nginx through cluster DNS from another Pod, and
/// through the API server's service proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_myapp_sample_serves_through_its_service() {
    let ns = TestNamespace::new("real-myapp").await;
    kubectl_ok(&[
        "apply",
        "-n",
        &ns.name,
        "-f",
        &sample("example_v1_myapp.yaml"),
    ]);
    kubectl_ok(&[
        "wait",
        "--for=condition=Ready",
        "myapp/myapp-sample",
        "-n",
        &ns.name,
        "--timeout=180s",
    ]);
    let toolbox = toolbox(&ns).await;
    let url = format!("http://myapp-sample.{}.svc.cluster.local:8080/", ns.name);
    let page = eventually(
        TIMEOUT,
        "the Service to answer through cluster DNS",
        || async {
            let out = exec(
                &ns,
                &toolbox,
                &["curl", "-sS", "--fail", "--max-time", "5", &url],
            );
            out.status
                .success()
                .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
        },
    )
    .await;
    assert!(page.contains("Welcome to nginx"), "{page}");
    let proxied = kubectl_ok(&[
        "get",
        "--raw",
        &format!(
            "/api/v1/namespaces/{}/services/myapp-sample:8080/proxy/",
            ns.name
        ),
    ]);
    assert!(proxied.contains("Welcome to nginx"), "{proxied}");
}

/// Every sample, applied as `kubectl apply -k config/samples` applies them, in a namespace that
/// enforces the `restricted` Pod Security Standard: every Pod the operator makes is admitted
/// there and runs (each object Ready, the Sample recorded), no Pod was refused on the way, and
/// the operator, deployed as users deploy it, was refused nothing (all six kinds under its own
/// ClusterRole and admission policy).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sample_is_ready_in_a_namespace_that_enforces_restricted() {
    let ns = TestNamespace::new("real-restricted").await;
    kubectl_ok(&[
        "label",
        "namespace",
        &ns.name,
        "pod-security.kubernetes.io/enforce=restricted",
        "pod-security.kubernetes.io/enforce-version=latest",
    ]);
    kubectl_ok(&["apply", "-n", &ns.name, "-k", &sample("")]);
    let warnings = || {
        kubectl_ok(&[
            "get",
            "events",
            "-n",
            &ns.name,
            "--field-selector",
            "type=Warning",
            "-o",
            "custom-columns=OBJECT:.involvedObject.name,REASON:.reason,MESSAGE:.message",
        ])
    };
    for object in [
        "myapp/myapp-sample",
        "appcluster/appcluster-sample",
        "sampledb/example-database",
        "etcdcluster/example-etcd-cluster",
        "etcdbackup/example-etcd-cluster-backup",
    ] {
        let out = kubectl(&[
            "wait",
            "--for=condition=Ready",
            object,
            "-n",
            &ns.name,
            "--timeout=240s",
        ]);
        if !out.status.success() {
            // Why it is not Ready: the admission's refusals are Warning events of the Pods' owners.
            panic!(
                "{object} is not Ready in a namespace enforcing restricted: {}\n{}",
                String::from_utf8_lossy(&out.stderr),
                warnings()
            );
        }
    }
    field_reaches(
        &ns,
        "sample/sample-resource-1",
        "{.status.observedGeneration}",
        "1",
    )
    .await;
    the_day_two_verbs_work_on_the_samples(&ns);
    let warned = warnings();
    assert!(!warned.contains("violates PodSecurity"), "{warned}");
    // The deployed operator did all of it with its own ClusterRole, within the admission policy
    // that leaves it only its own objects: not one of its requests for this namespace refused.
    // The Pods whose container runs (another test deletes the leader: its successor may still
    // be starting).
    let operator_pods: Api<Pod> = Api::namespaced(ns.client.clone(), OPERATOR_NAMESPACE);
    let running = operator_pods
        .list(&ListParams::default().labels("control-plane=controller-manager"))
        .await
        .unwrap();
    let mut logs = String::new();
    for pod in running.items.iter().filter(|pod| running_and_ready(pod)) {
        match operator_pods
            .logs(&pod.name_any(), &LogParams::default())
            .await
        {
            Ok(log) => logs.push_str(&log),
            // Deleted since the list.
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => panic!("the logs of {}: {error}", pod.name_any()),
        }
    }
    let refusals: Vec<&str> = logs
        .lines()
        .filter(|line| line.contains(&ns.name) && line.to_lowercase().contains("forbidden"))
        .collect();
    assert!(refusals.is_empty(), "{refusals:#?}");
}

/// `kubectl app-operator VERB ARGS…` as a user runs it (the binary `cargo xtask` built, named by
/// `KUBECTL_APP_OPERATOR`), with the suite's kubeconfig: its stdout, or a failed test.
fn plugin(args: &[&str]) -> String {
    let binary = std::env::var_os("KUBECTL_APP_OPERATOR")
        .expect("KUBECTL_APP_OPERATOR names the plugin (cargo xtask test-real-node builds it)");
    let output = std::process::Command::new(binary)
        .args(args)
        .env("KUBECONFIG", testkit::kubeconfig())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "kubectl app-operator {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The plugin's verbs on running samples: `status` of the etcd cluster, `etcdctl` writing and
/// reading a key in its member, `psql` in the database as its user, `backup --wait` of both and
/// a `clone` of each from that backup holding what was written before it, and a `report` with
/// the deployed operator's logs.
fn the_day_two_verbs_work_on_the_samples(ns: &TestNamespace) {
    let n = ns.name.as_str();
    let status = plugin(&["status", "etcd/example-etcd-cluster", "-n", n]);
    assert!(
        status.contains("Ready: True")
            && status.contains("Spec: generation 1, reconciled")
            && status.contains("  Pod/example-etcd-cluster-"),
        "{status}"
    );
    let put = plugin(&[
        "etcdctl",
        "etcd/example-etcd-cluster",
        "-n",
        n,
        "--",
        "put",
        "day-two",
        "works",
    ]);
    assert_eq!(put.trim(), "OK");
    let get = plugin(&[
        "etcdctl",
        "etcd/example-etcd-cluster",
        "-n",
        n,
        "--",
        "get",
        "day-two",
        "--print-value-only",
    ]);
    assert_eq!(get.trim(), "works");
    let who = plugin(&[
        "psql",
        "sampledb/example-database",
        "-n",
        n,
        "--",
        "-tAc",
        "select current_user || '@' || current_database()",
    ]);
    assert_eq!(
        who.trim(),
        "postgres@app",
        "psql runs as the database's user"
    );
    backups_and_clones_hold_what_was_written(ns);
    let bundle = std::env::temp_dir().join(format!("report-{n}"));
    let said = plugin(&["report", "-n", n, "--output", bundle.to_str().unwrap()]);
    let logs: Vec<_> = std::fs::read_dir(&bundle)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.to_string_lossy().ends_with(".log"))
        .collect();
    assert!(
        !logs.is_empty()
            && logs
                .iter()
                .all(|log| std::fs::metadata(log).unwrap().len() > 0),
        "{said}"
    );
    std::fs::remove_dir_all(&bundle).unwrap();
}

/// `backup --wait` of the etcd sample (holding `day-two`) and of the database sample after a row
/// was written, then `clone` of each: the clones become Ready and hold the key and the row.
fn backups_and_clones_hold_what_was_written(ns: &TestNamespace) {
    let n = ns.name.as_str();
    plugin(&[
        "psql",
        "sampledb/example-database",
        "-n",
        n,
        "--",
        "-c",
        "create table day_two (said text); insert into day_two values ('kept')",
    ]);
    for (object, clone) in [
        ("sampledb/example-database", "example-database-clone"),
        ("etcd/example-etcd-cluster", "example-etcd-clone"),
    ] {
        let backup = plugin(&["backup", object, "-n", n, "--wait", "--timeout", "4m"]);
        assert!(backup.contains(" succeeded: "), "{backup}");
        let cloned = plugin(&["clone", object, clone, "-n", n]);
        assert!(cloned.contains(&format!("{clone} created")), "{cloned}");
    }
    for clone in [
        "sampledb/example-database-clone",
        "etcdcluster/example-etcd-clone",
    ] {
        kubectl_ok(&[
            "wait",
            "--for=condition=Ready",
            clone,
            "-n",
            n,
            "--timeout=300s",
        ]);
    }
    let row = plugin(&[
        "psql",
        "sampledb/example-database-clone",
        "-n",
        n,
        "--",
        "-tAc",
        "select said from day_two",
    ]);
    assert_eq!(row.trim(), "kept", "the clone holds the row");
    let key = plugin(&[
        "etcdctl",
        "etcd/example-etcd-clone",
        "-n",
        n,
        "--",
        "get",
        "day-two",
        "--print-value-only",
    ]);
    assert_eq!(key.trim(), "works", "the clone holds the key");
}

/// RBAC grants the operator patch and delete on every Pod, Job and StatefulSet; the admission
/// policy deployed with it (config/rbac/owned_objects_policy.yaml) leaves it only its own. As its
/// ServiceAccount, a look-alike of each kind made by someone else can be neither changed nor
/// deleted, and one labelled as the operator's can be both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deployed_operator_may_change_only_objects_it_manages() {
    let ns = TestNamespace::new("real-owned").await;
    let operator =
        format!("--as=system:serviceaccount:{OPERATOR_NAMESPACE}:app-operator-controller-manager");
    let pod_spec = json!({
        "containers": [{ "name": "c", "image": TOOLBOX, "command": ["sleep", "infinity"] }],
    });
    let object = |kind: &str, name: &str, labels: serde_json::Value| {
        let template = json!({ "metadata": { "labels": { "app": name } }, "spec": pod_spec });
        let mut run_once = template.clone();
        run_once["spec"]["restartPolicy"] = json!("Never");
        let spec = match kind {
            "Pod" => run_once["spec"].clone(),
            "Job" => json!({ "template": run_once, "backoffLimit": 0 }),
            _ => json!({
                "replicas": 0, "serviceName": name, "template": template,
                "selector": { "matchLabels": { "app": name } },
            }),
        };
        let api_version = match kind {
            "Pod" => "v1",
            "Job" => "batch/v1",
            _ => "apps/v1",
        };
        json!({
            "apiVersion": api_version, "kind": kind,
            "metadata": { "name": name, "labels": labels }, "spec": spec,
        })
    };
    // `verb` is the command then its arguments; the object goes between them.
    let as_operator = |verb: &[&str], kind: &str, name: &str| {
        let target = format!("{}/{name}", kind.to_lowercase());
        let (command, arguments) = verb.split_at(1);
        let scope = [operator.as_str(), "-n", &ns.name];
        kubectl(&[&scope[..], command, &[target.as_str()], arguments].concat())
    };
    for kind in ["Pod", "Job", "StatefulSet"] {
        apply(&ns, &object(kind, "lookalike", json!({ "app": "etcd" })));
        for verb in [&["label", "touched=yes"][..], &["delete", "--wait=false"]] {
            // The API server enforces a new policy a moment after it is created (deploy).
            let refused = format!("{verb:?} {kind} lookalike refused to the operator");
            eventually(Duration::from_secs(30), &refused, || async {
                let out = as_operator(verb, kind, "lookalike");
                let said = String::from_utf8_lossy(&out.stderr).into_owned();
                (!out.status.success()
                    && said.contains("app-operator changes only objects it manages"))
                .then_some(())
            })
            .await;
        }
        let ours = json!({ "app.kubernetes.io/managed-by": "app-operator" });
        apply(&ns, &object(kind, "ours", ours));
        for verb in [&["label", "touched=yes"][..], &["delete", "--wait=false"]] {
            let out = as_operator(verb, kind, "ours");
            assert!(
                out.status.success(),
                "{verb:?} {kind} ours as the operator: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// A MyApp whose container reads a Secret that does not exist is not Ready, and says why in the
/// kubelet's words (its Ready condition and a Warning event); once the Secret exists it is Ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_myapp_waiting_for_a_missing_secret_says_so_until_it_exists() {
    let ns = TestNamespace::new("real-myapp-secret").await;
    let app = json!({
        "apiVersion": "example.com/v1", "kind": "MyApp",
        "metadata": { "name": "web" },
        "spec": {
            "replicas": 1, "image": "nginxinc/nginx-unprivileged:1.22", "port": 8080,
            "env": [{ "name": "PASSWORD", "valueFrom": { "secretKeyRef": { "name": "db", "key": "password" } } }],
        },
    });
    apply(&ns, &app);
    let stuck = stuck_on_container_config(&ns, "web").await;
    assert!(stuck.contains(r#"secret "db" not found"#), "{stuck}");
    let events = kubectl_ok(&[
        "get",
        "events",
        "-n",
        &ns.name,
        "--field-selector",
        "involvedObject.kind=MyApp,type=Warning",
        "-o",
        "jsonpath={.items[*].reason}",
    ]);
    assert!(events.contains("CreateContainerConfigError"), "{events}");

    kubectl_ok(&[
        "create",
        "secret",
        "generic",
        "db",
        "-n",
        &ns.name,
        "--from-literal=password=s3cret",
    ]);
    eventually(TIMEOUT, "Ready once the Secret exists", || async {
        Some(myapp_ready(&ns, "web")).filter(|r| r.starts_with("True "))
    })
    .await;
}

/// A MyApp's Ready condition: `<status> <reason> <message>`.
fn myapp_ready(ns: &TestNamespace, name: &str) -> String {
    kubectl_ok(&[
        "get",
        "myapp",
        name,
        "-n",
        &ns.name,
        "-o",
        r#"jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].reason} {.status.conditions[?(@.type=="Ready")].message}"#,
    ])
}

/// Waits until the MyApp is not Ready because the kubelet cannot start its container, and
/// returns the condition.
async fn stuck_on_container_config(ns: &TestNamespace, name: &str) -> String {
    eventually(TIMEOUT, "Ready False with the kubelet's reason", || async {
        Some(myapp_ready(ns, name)).filter(|r| r.starts_with("False CreateContainerConfigError"))
    })
    .await
}

/// The MyApp's Pods are `restricted`, so an image that runs as root (Docker Hub's `nginx`) does
/// not start; the MyApp says so in the kubelet's words instead of waiting silently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_myapp_whose_image_runs_as_root_says_so() {
    let ns = TestNamespace::new("real-myapp-root").await;
    apply(
        &ns,
        &json!({
            "apiVersion": "example.com/v1", "kind": "MyApp",
            "metadata": { "name": "root" },
            "spec": { "replicas": 1, "image": "nginx:1.22", "port": 80 },
        }),
    );
    let stuck = stuck_on_container_config(&ns, "root").await;
    assert!(
        stuck.contains("runAsNonRoot and image will run as root"),
        "{stuck}"
    );
}

/// Seed 004 as written (its version one that runs here): one real etcd container, then two,
/// whose member list (asked inside a member's Pod) has two started members whose peer URLs are
/// their cluster-DNS names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seed_004_etcd_members_find_each_other_by_cluster_dns() {
    let ns = TestNamespace::new("real-etcd").await;
    kubectl_ok(&[
        "apply",
        "-n",
        &ns.name,
        "-f",
        &sample("etcd_v1beta2_etcdcluster.yaml"),
    ]);
    let selector = "app=etcd,etcd_cluster=example-etcd-cluster";
    ready_pods(&ns, selector, 1).await;
    merge_patch(
        &ns,
        "etcd",
        "example-etcd-cluster",
        &json!({ "spec": { "size": 2 } }),
    );
    let pods = ready_pods(&ns, selector, 2).await;
    let member = pods[0].name_any();
    let list = eventually(
        TIMEOUT,
        "two started members in the member list",
        || async {
            let out = exec(&ns, &member, &["etcdctl", "member", "list", "-w", "json"]);
            let list: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
            let members = list["members"].as_array()?.clone();
            (members.len() == 2
                && members
                    .iter()
                    .all(|m| m["name"].as_str().is_some_and(|n| !n.is_empty())))
            .then_some(members)
        },
    )
    .await;
    for member in &list {
        let peer = member["peerURLs"][0].as_str().unwrap_or_default();
        let name = member["name"].as_str().unwrap_or_default();
        assert_eq!(
            peer,
            format!("http://{name}.example-etcd-cluster.{}.svc:2380", ns.name),
            "{member}"
        );
    }
    kubectl_ok(&[
        "wait",
        "--for=condition=Ready",
        "etcd/example-etcd-cluster",
        "-n",
        &ns.name,
        "--timeout=180s",
    ]);
}

/// The deployed operator's `/metrics`, scraped over HTTPS from a Pod as Prometheus would: with a
/// token bound to the metrics-reader ClusterRole it answers, without one it refuses (401), and
/// with a token that is not bound it forbids (403).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deployed_operators_metrics_answer_only_a_bound_token() {
    let ns = TestNamespace::new("real-metrics").await;
    let toolbox = toolbox(&ns).await;
    let reader = testkit::service_account_token(&ns.name, "scraper").await;
    kubectl_ok(&[
        "create",
        "clusterrolebinding",
        &format!("{}-scraper", ns.name),
        "--clusterrole=app-operator-metrics-reader",
        &format!("--serviceaccount={}:scraper", ns.name),
    ]);
    let stranger = testkit::service_account_token(&ns.name, "stranger").await;
    let url = format!(
        "https://app-operator-controller-manager-metrics-service.{OPERATOR_NAMESPACE}.svc:8443/metrics"
    );
    // The serving certificate is self-signed here (issue: a cert-manager one is verified).
    let scrape = |token: Option<String>| {
        let mut command = vec![
            "curl".to_owned(),
            "-sk".to_owned(),
            "--max-time".to_owned(),
            "5".to_owned(),
            "-o".to_owned(),
            "/dev/stderr".to_owned(),
            "-w".to_owned(),
            "%{http_code}".to_owned(),
        ];
        if let Some(token) = token {
            command.extend(["-H".to_owned(), format!("Authorization: Bearer {token}")]);
        }
        command.push(url.clone());
        let args: Vec<&str> = command.iter().map(String::as_str).collect();
        let out = exec(&ns, &toolbox, &args);
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // The Service picks either replica; only the leader runs controllers, so only its answer
    // has reconcile counts (the standby's is 200 too, with leader_election_master_status 0).
    let (code, body) = eventually(
        TIMEOUT,
        "the leader's metrics endpoint to answer the reader",
        || async {
            let (code, body) = scrape(Some(reader.clone()));
            (code == "200" && body.contains("controller_runtime_reconcile_total"))
                .then_some((code, body))
        },
    )
    .await;
    assert_eq!(code, "200");
    assert!(
        body.contains(r#"leader_election_master_status{name="app-operator.example.com"} 1"#),
        "{body}"
    );
    assert_eq!(scrape(None).0, "401");
    assert_eq!(scrape(Some(stranger)).0, "403");
    kubectl_ok(&[
        "delete",
        "clusterrolebinding",
        &format!("{}-scraper", ns.name),
    ]);
}

/// Fencing, opted into as docs/architecture.md says (`kubectl apply -k config/fencing` beside
/// `make deploy`): the leader writes policy lets the operator's ServiceAccount write from the Pod
/// that holds the leader election Lease and refuses it from the standby's, each with a token
/// bound to its Pod as the kubelet mounts one. The policy stays: removing its binding would
/// leave this API server reading a stale Lease (see config/fencing/leader_writes_policy.yaml).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_deployed_operators_leader_may_write() {
    let ns = TestNamespace::new("real-fenced").await;
    let fencing = format!("{}/../../config/fencing", env!("CARGO_MANIFEST_DIR"));
    kubectl_ok(&["apply", "--server-side", "-k", &fencing]);
    let client = testkit::client().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let pods: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let replicas = ListParams::default().labels("control-plane=controller-manager");
    // Another test deletes the leader's Pod: each try reads the holder and the replicas afresh.
    let seen = eventually(
        Duration::from_secs(90),
        "the leader's write passes and the standby's is refused",
        || async {
            let lease = leases.get("app-operator.example.com").await.ok()?;
            let holder = lease.spec?.holder_identity?;
            let live: Vec<Pod> = pods
                .list(&replicas)
                .await
                .ok()?
                .items
                .into_iter()
                .filter(|pod| pod.metadata.deletion_timestamp.is_none())
                .collect();
            if live.len() != 2 {
                return None;
            }
            let mut seen = Vec::new();
            for pod in &live {
                let name = pod.name_any();
                let account = "app-operator-controller-manager";
                let token =
                    testkit::pod_token(OPERATOR_NAMESPACE, account, &name, &pod.uid()?).await?;
                let configmaps: Api<ConfigMap> =
                    Api::namespaced(testkit::client_with_token(&token).await, &ns.name);
                let configmap: ConfigMap =
                    testkit::object(json!({ "metadata": { "generateName": "fence-" } }));
                let written = configmaps.create(&PostParams::default(), &configmap).await;
                match (holder.starts_with(&format!("{name}_")), written) {
                    (true, Ok(_)) => seen.push(format!("{name}, the leader: written")),
                    (false, Err(kube::Error::Api(status)))
                        if status.code == 403
                            && status
                                .message
                                .contains("app-operator writes only while it leads") =>
                    {
                        seen.push(format!("{name}, the standby: {}", status.message));
                    }
                    _ => return None,
                }
            }
            Some(seen)
        },
    )
    .await;
    println!("{seen:#?}");
}

/// The operator as `make deploy` runs it: both replicas Ready, one holds the lease, and when
/// its Pod is deleted the other takes over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deployed_operator_hands_over_when_its_leader_is_deleted() {
    let client = testkit::client().await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    eventually(TIMEOUT, "the operator's 2 replicas Ready", || async {
        let ready = deployments
            .get("app-operator-controller-manager")
            .await
            .ok()?
            .status?
            .ready_replicas?;
        (ready == 2).then_some(())
    })
    .await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let holder = || async {
        leases
            .get("app-operator.example.com")
            .await
            .ok()?
            .spec?
            .holder_identity
    };
    let leader = eventually(TIMEOUT, "a leader", holder).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let leader_pod = pods
        .list(&ListParams::default().labels("control-plane=controller-manager"))
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|pod| leader.starts_with(&format!("{}_", pod.name_any())))
        .unwrap_or_else(|| panic!("no operator Pod is the leader {leader}"));
    let deleted_at = Instant::now();
    pods.delete(&leader_pod.name_any(), &DeleteParams::default())
        .await
        .unwrap();
    let next = eventually(TIMEOUT, "another replica to lead", || async {
        holder()
            .await
            .filter(|h| !h.starts_with(&format!("{}_", leader_pod.name_any())))
    })
    .await;
    println!(
        "the leader's Pod {} deleted; {next} led {:.1}s later",
        leader_pod.name_any(),
        deleted_at.elapsed().as_secs_f64()
    );
}

/// The address of Service `name` (its cluster IP: kube-proxy routes it from this machine too).
async fn service_address(ns: &TestNamespace, name: &str) -> String {
    let service = ns
        .api::<k8s_openapi::api::core::v1::Service>()
        .get(name)
        .await
        .unwrap();
    service.spec.unwrap().cluster_ip.unwrap()
}

/// EtcdCluster `name` as `spec` says (its `size` and `version` at least), Ready, with two
/// clients writing keys under `prefix` through its client Service.
async fn etcd_with_writers(
    ns: &TestNamespace,
    name: &str,
    spec: serde_json::Value,
    prefix: &str,
) -> (
    std::sync::Arc<testkit::etcd_store::EtcdStore>,
    testkit::history::Writers,
) {
    let size = spec["size"].as_i64().unwrap();
    apply(
        ns,
        &json!({
            "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
            "metadata": { "name": name }, "spec": spec
        }),
    );
    etcd_settled(ns, name, size).await;
    let address = service_address(ns, &format!("{name}-client")).await;
    let store = std::sync::Arc::new(testkit::etcd_store::EtcdStore::new(format!(
        "http://{address}:2379"
    )));
    let writers = testkit::history::Writers::start(store.clone(), prefix, 2);
    (store, writers)
}

/// Stops the writers, reads every key under `prefix` back and checks the history (printing its
/// line for `scenario`).
async fn read_back(
    store: &testkit::etcd_store::EtcdStore,
    writers: testkit::history::Writers,
    prefix: &str,
    scenario: &str,
) {
    use testkit::history::Store;
    let history = writers.stop().await;
    let read = eventually(TIMEOUT, "every key read back", || async {
        store.read_all(prefix).await.ok()
    })
    .await;
    history.check(&read).assert_kept(scenario);
}

/// Waits until EtcdCluster `name` has `size` ready members and is Ready.
async fn etcd_settled(ns: &TestNamespace, name: &str, size: i64) {
    eventually(
        Duration::from_secs(300),
        &format!("EtcdCluster {name} Ready with {size} ready members"),
        || async {
            let cluster = etcd_cluster(ns, name);
            let status = &cluster["status"];
            let ready = status["conditions"]
                .as_array()?
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            (ready
                && status["readyMembers"].as_i64() == Some(size)
                && cluster["spec"]["size"].as_i64() == Some(size))
            .then_some(())
        },
    )
    .await;
}

/// EtcdCluster `name` as `kubectl get -o json` shows it (`null` when it cannot be read).
fn etcd_cluster(ns: &TestNamespace, name: &str) -> serde_json::Value {
    let out = kubectl(&["get", "etcd", name, "-n", &ns.name, "-o", "json"]);
    serde_json::from_slice(&out.stdout).unwrap_or_default()
}

/// etcd's member IDs by member name, as the cluster behind `store` lists them.
async fn member_ids(store: &testkit::etcd_store::EtcdStore) -> BTreeMap<String, String> {
    eventually(TIMEOUT, "the member list", || async {
        let list = store
            .call("/v3/cluster/member/list", json!({}))
            .await
            .ok()?;
        list["members"]
            .as_array()?
            .iter()
            .map(|m| Some((m["name"].as_str()?.to_owned(), m["ID"].as_str()?.to_owned())))
            .collect()
    })
    .await
}

/// An EtcdCluster spec of `size` members on etcd 3.6.16 whose data is on PersistentVolumeClaims.
fn on_volumes(size: i64) -> serde_json::Value {
    json!({
        "size": size, "version": "3.6.16",
        "pod": { "persistentVolumeClaimSpec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": { "requests": { "storage": "1Gi" } }
        }}
    })
}

/// The member Pods of EtcdCluster `name` by name: their uid, and whether they are Ready.
async fn member_pods(ns: &TestNamespace, name: &str) -> BTreeMap<String, (String, bool)> {
    let pods = ns
        .api::<Pod>()
        .list(&ListParams::default().labels(&format!("etcd_cluster={name}")))
        .await
        .unwrap();
    pods.items
        .iter()
        .map(|pod| {
            let ready = pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            (pod.name_any(), (pod.uid().unwrap_or_default(), ready))
        })
        .collect()
}

/// The member Pods of EtcdCluster `name`, the leader first.
async fn etcd_members_leader_first(ns: &TestNamespace, name: &str) -> Vec<Pod> {
    use testkit::etcd_store::EtcdStore;
    let selector = format!("etcd_cluster={name}");
    eventually(TIMEOUT, "a member that is the leader", || async {
        let mut pods = ns
            .api::<Pod>()
            .list(&ListParams::default().labels(&selector))
            .await
            .ok()?
            .items;
        let mut leader = None;
        for (index, pod) in pods.iter().enumerate() {
            let ip = pod.status.as_ref()?.pod_ip.clone()?;
            let status = EtcdStore::new(format!("http://{ip}:2379"))
                .call("/v3/maintenance/status", json!({}))
                .await
                .ok()?;
            if status["header"]["member_id"] == status["leader"] {
                leader = Some(index);
            }
        }
        pods.swap(0, leader?);
        Some(pods)
    })
    .await
}

/// How often the containers of `pod` were restarted (`None`: the Pod is gone, replaced).
async fn restarts(ns: &TestNamespace, pod: &str) -> Option<i32> {
    let pod = ns.api::<Pod>().get_opt(pod).await.unwrap()?;
    let statuses = pod.status.and_then(|s| s.container_statuses);
    Some(
        statuses
            .unwrap_or_default()
            .iter()
            .map(|c| c.restart_count)
            .sum(),
    )
}

/// Real etcd backed up by an EtcdBackup (its Job runs `etcdctl snapshot save` against a member)
/// after two clients wrote keys to a 3-member cluster; a new EtcdCluster restored from that
/// snapshot holds every acknowledged key with its value, and says which snapshot it started from.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_cluster_restored_from_an_etcdbackup_holds_every_acknowledged_write() {
    let ns = TestNamespace::new("real-etcd-restore").await;
    let (store, writers) = etcd_with_writers(
        &ns,
        "source",
        json!({ "size": 3, "version": "3.6.16" }),
        "kept/",
    )
    .await;
    let history = back_up_after(&ns, &store, writers, 1000, "source").await;
    let snapshot = eventually(Duration::from_secs(300), "the snapshot taken", || async {
        let out = kubectl(&["get", "etcdbackup", "nightly", "-n", &ns.name, "-o", "json"]);
        let backup: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        let status = &backup["status"];
        (status["succeeded"] == true).then(|| status["snapshots"][0]["file"].clone())
    })
    .await;
    println!(
        "snapshot {snapshot} holds {} acknowledged writes",
        history.acknowledged()
    );
    apply(
        &ns,
        &json!({
            "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
            "metadata": { "name": "restored" },
            "spec": { "size": 3, "version": "3.6.16", "restore": { "backupName": "nightly" } }
        }),
    );
    etcd_settled(&ns, "restored", 3).await;
    let out = kubectl_ok(&["get", "etcd", "restored", "-n", &ns.name, "-o", "json"]);
    let restored: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        restored["status"]["restore"]["snapshot"], snapshot,
        "the status names the snapshot: {}",
        restored["status"]
    );
    restored_holds(
        &ns,
        "restored",
        &history,
        "etcd backed up and restored into a new cluster",
    )
    .await;
}

/// Reads every key under `kept/` back from EtcdCluster `cluster` (through its client Service)
/// and checks `history` against them; returns the store and what it read.
async fn restored_holds(
    ns: &TestNamespace,
    cluster: &str,
    history: &testkit::history::History,
    scenario: &str,
) -> (testkit::etcd_store::EtcdStore, BTreeMap<String, String>) {
    use testkit::history::Store;
    let address = service_address(ns, &format!("{cluster}-client")).await;
    let restored = testkit::etcd_store::EtcdStore::new(format!("http://{address}:2379"));
    let read = eventually(TIMEOUT, "every key read back", || async {
        restored.read_all("kept/").await.ok()
    })
    .await;
    history.check(&read).assert_kept(scenario);
    (restored, read)
}

/// The real node's S3-compatible store (`.local/cluster/node/object-store.json`, written by
/// `cluster-up --node real`): its endpoint and keys.
struct Bucket {
    endpoint: String,
    access_key: String,
    secret_key: String,
}

impl Bucket {
    fn of_the_node() -> Bucket {
        let file = testkit::kubeconfig()
            .parent()
            .unwrap()
            .join("node/object-store.json");
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (the real node starts the object store)",
                file.display()
            )
        });
        let store: serde_json::Value = serde_json::from_str(&text).unwrap();
        let field = |name: &str| store[name].as_str().unwrap().to_owned();
        Bucket {
            endpoint: field("endpoint"),
            access_key: field("accessKeyId"),
            secret_key: field("secretAccessKey"),
        }
    }

    /// The Secret a user makes: the AWS shared files, with `secret_key` as the secret.
    fn secret(&self, ns: &TestNamespace, name: &str, secret_key: &str) {
        apply(
            ns,
            &json!({
                "apiVersion": "v1", "kind": "Secret", "metadata": { "name": name },
                "stringData": {
                    "credentials": format!(
                        "[default]\naws_access_key_id = {}\naws_secret_access_key = {secret_key}\n",
                        self.access_key
                    ),
                    "config": "[default]\nregion = us-east-1\n",
                }
            }),
        );
    }

    /// Deletes `gone` (and waits until it is), then makes namespace `prefix-…` with the Secret
    /// `bucket-keys`: the data is now only in the bucket.
    async fn after_deleting(&self, gone: TestNamespace, prefix: &str) -> TestNamespace {
        let name = gone.name.clone();
        drop(gone);
        kubectl_ok(&[
            "wait",
            "--for=delete",
            &format!("namespace/{name}"),
            "--timeout=180s",
        ]);
        let ns = TestNamespace::new(prefix).await;
        self.secret(&ns, "bucket-keys", &self.secret_key);
        ns
    }

    /// A proxy to the store on the node's address that this test alone goes through: it can
    /// take the store away from this test's Pods (and only theirs) and bring it back.
    /// `at` is its address, or the store's host with port 0 for a new one.
    async fn proxy(&self, at: Option<std::net::SocketAddr>) -> testkit::proxy::FaultProxy {
        let authority = self.endpoint.trim_start_matches("http://");
        let store: std::net::SocketAddr = authority.parse().unwrap();
        let at = at.unwrap_or((store.ip(), 0).into());
        testkit::proxy::FaultProxy::start_on(at, store).await
    }

    /// `s3` of an EtcdBackup or a restore: the object `backups/<key>` through Secret `secret`.
    fn source(&self, key: &str, secret: &str) -> serde_json::Value {
        json!({
            "path": format!("backups/{key}"), "awsSecret": secret,
            "endpoint": self.endpoint, "forcePathStyle": true
        })
    }

    /// A SigV4-signed request with curl, as a user checks a bucket; `query` already escaped.
    fn signed(&self, args: &[&str], path_and_query: &str) -> Vec<u8> {
        let out = std::process::Command::new("curl")
            .args([
                "-sS",
                "--fail-with-body",
                "--aws-sigv4",
                "aws:amz:us-east-1:s3",
            ])
            // S3 signs this header; curl does not add it, and versitygw refuses requests without.
            .args(["-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"])
            .args([
                "--user",
                &format!("{}:{}", self.access_key, self.secret_key),
            ])
            .args(args)
            .arg(format!("{}/backups{path_and_query}", self.endpoint))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "curl {args:?} {path_and_query}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// The keys under `prefix`, sorted.
    fn objects(&self, prefix: &str) -> Vec<String> {
        let escaped = prefix.replace('/', "%2F");
        let listing = self.signed(&[], &format!("?list-type=2&prefix={escaped}"));
        let listing = String::from_utf8(listing).unwrap();
        let mut keys: Vec<String> = listing
            .split("<Key>")
            .skip(1)
            .filter_map(|rest| Some(rest.split_once("</Key>")?.0.to_owned()))
            .collect();
        keys.sort();
        keys
    }

    /// Copies object `from` to `to` with one byte flipped, keeping the SHA-256 it was uploaded
    /// with: a snapshot damaged at rest.
    fn damaged_copy(&self, from: &str, to: &str) {
        let headers = std::env::temp_dir().join(format!("{}.headers", to.replace('/', "-")));
        let mut bytes = self.signed(&["-D", headers.to_str().unwrap()], &format!("/{from}"));
        let headers = std::fs::read_to_string(&headers).unwrap();
        let checksum = headers
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("x-amz-meta-sha256:")
                    .map(|v| v.trim().to_owned())
            })
            .unwrap_or_else(|| panic!("object {from} has no x-amz-meta-sha256: {headers}"));
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0xff;
        let file = std::env::temp_dir().join(format!("{}.db", to.replace('/', "-")));
        std::fs::write(&file, &bytes).unwrap();
        self.signed(
            &[
                "-T",
                file.to_str().unwrap(),
                "-H",
                &format!("x-amz-meta-sha256: {checksum}"),
            ],
            &format!("/{to}"),
        );
        let _ = std::fs::remove_file(&file);
    }
}

/// How many backups of `kind` `name` succeeded: its BackupSucceeded events (each names its Job).
fn succeeded_backups(ns: &TestNamespace, kind: &str, name: &str) -> usize {
    kubectl_ok(&[
        "get",
        "events",
        "-n",
        &ns.name,
        &format!("--field-selector=reason=BackupSucceeded,involvedObject.kind={kind},involvedObject.name={name}"),
        "-o",
        "name",
    ])
    .lines()
    .count()
}

/// EtcdBackup `name` as `kubectl get -o json` shows it.
fn etcd_backup(ns: &TestNamespace, name: &str) -> serde_json::Value {
    let out = kubectl(&["get", "etcdbackup", name, "-n", &ns.name, "-o", "json"]);
    serde_json::from_slice(&out.stdout).unwrap_or_default()
}

/// PostgreSQL backed up to the bucket on a schedule and on demand while two clients write; the
/// store unreachable for a while (a backup fails saying so, writes go on, the next backup after
/// it is back succeeds); the bucket keeps exactly `maxBackups` dumps; the namespace deleted; a clone in another namespace,
/// restored from the on-demand dump (taken after the last write), holds every acknowledged row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sampledb_cloned_from_a_bucket_after_its_namespace_was_deleted_holds_every_row() {
    let bucket = Bucket::of_the_node();
    let source_ns = TestNamespace::new("real-sdb-bucket").await;
    bucket.secret(&source_ns, "bucket-keys", &bucket.secret_key);
    let prefix = format!("{}/orders", source_ns.name);
    // Backups go through a proxy of this test's own, so the outage below is this test's alone
    // (the other tests share the store).
    let proxy = bucket.proxy(None).await;
    let proxied = proxy.address;
    let mut through_proxy = bucket.source(&prefix, "bucket-keys");
    through_proxy["endpoint"] = json!(format!("http://{proxied}"));
    let object = sampledb(
        "orders",
        "15",
        json!({ "backup": {
            "schedule": "*/15 * * * * *",
            "s3": through_proxy,
            "bucketRetention": { "maxBackups": 2 }
        } }),
    );
    let writers = sampledb_writing(&source_ns, &object).await;
    eventually(
        Duration::from_secs(240),
        "three scheduled dumps uploaded",
        || async { (succeeded_backups(&source_ns, "SampleDB", "orders") >= 3).then_some(()) },
    )
    .await;

    // The store unreachable: a backup fails saying so while the database keeps taking writes;
    // reachable again, the next scheduled one succeeds.
    // The proxy gone: nothing listens at the endpoint (connections refused), as a store down.
    drop(proxy);
    let message = backup_failed_from_now(
        &source_ns,
        "orders",
        "a backup failed: the store unreachable",
    )
    .await;
    println!("the store unreachable: {message}");
    assert!(message.contains("could not be reached"), "{message}");
    let warnings = kubectl_ok(&[
        "get",
        "events",
        "-n",
        &source_ns.name,
        "--field-selector=type=Warning,reason=BackupFailed",
        "-o",
        "name",
    ]);
    assert!(!warnings.trim().is_empty(), "a BackupFailed Warning");
    let store = sampledb_store(&source_ns, "orders").await;
    let rows = testkit::history::Store::read_all(&store, "row/")
        .await
        .unwrap()
        .len();
    eventually(
        TIMEOUT,
        "writes taken while the store is cut off",
        || async {
            let now = testkit::history::Store::read_all(&store, "row/")
                .await
                .ok()?
                .len();
            (now >= rows + 50).then_some(())
        },
    )
    .await;
    let _proxy = bucket.proxy(Some(proxied)).await;
    let healed_at = Timestamp::now();
    eventually(
        Duration::from_secs(240),
        "a backup uploaded once the store is back",
        || async {
            let status = sampledb_status(&source_ns, "orders");
            let done: Timestamp = status["backup"]["lastSuccessfulTime"]
                .as_str()?
                .parse()
                .ok()?;
            (done > healed_at).then_some(())
        },
    )
    .await;
    let history = writers.stop().await;

    // No more scheduled backups; one on demand, after the last write.
    merge_patch(
        &source_ns,
        "sdb",
        "orders",
        &json!({ "spec": { "backup": { "suspend": true } } }),
    );
    let job = backed_up_on_demand(&source_ns, "orders").await;
    let dump = format!("{prefix}/{job}.dump");
    let kept = bucket.objects(&format!("{prefix}/"));
    println!("the bucket keeps {kept:?}");
    assert_eq!(kept.len(), 2, "bucketRetention.maxBackups: {kept:?}");
    assert_eq!(kept.last(), Some(&dump), "the newest is the on-demand dump");

    let ns = bucket
        .after_deleting(source_ns, "real-sdb-bucket-clone")
        .await;
    apply(
        &ns,
        &sampledb(
            "copy",
            "15",
            json!({ "restore": { "s3": bucket.source(&dump, "bucket-keys") } }),
        ),
    );
    sampledb_read_back(
        &ns,
        "copy",
        &history,
        "PostgreSQL backed up to a bucket, its namespace deleted, cloned in another",
    )
    .await;
}

/// `object-store put --if-absent`, as PostgreSQL's archive_command runs it against the node's
/// store: a segment archived twice with the same bytes succeeds both times (a retry after a lost
/// answer); other bytes under its name are refused and the first stay, as a restore reads them.
#[test]
fn a_wal_segment_is_archived_once_and_never_replaced() {
    let bucket = Bucket::of_the_node();
    let dir = std::env::temp_dir().join(format!("wal-archive-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("credentials"),
        format!(
            "[default]\naws_access_key_id = {}\naws_secret_access_key = {}\n",
            bucket.access_key, bucket.secret_key
        ),
    )
    .unwrap();
    let object = format!(
        "backups/wal-archive-{}/wal/000000010000000000000001",
        Timestamp::now().as_millisecond()
    );
    let run = |verb: &str, file: &str, extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_app-operator"))
            .args(["object-store", verb, &format!("--path={object}")])
            .arg(format!("--file={}", dir.join(file).display()))
            .arg(format!("--credentials-dir={}", dir.display()))
            .args([
                &format!("--endpoint={}", bucket.endpoint),
                "--force-path-style",
            ])
            .args(extra)
            .output()
            .unwrap()
    };
    let archive = |content: &str| {
        std::fs::write(dir.join("segment"), content).unwrap();
        let out = run("put", "segment", &["--if-absent"]);
        let said = [out.stdout, out.stderr].concat();
        (out.status.success(), String::from_utf8(said).unwrap())
    };
    let (archived, said) = archive("the first bytes");
    assert!(archived, "{said}");
    let (again, said) = archive("the first bytes");
    assert!(
        again && said.contains("already holds these bytes"),
        "{said}"
    );
    let (replaced, said) = archive("other bytes");
    println!("other bytes under the same name: {said}");
    assert!(
        !replaced && said.contains("already holds other bytes"),
        "{said}"
    );
    let fetched = run("get", "fetched", &[]);
    assert!(fetched.status.success(), "{fetched:?}");
    assert_eq!(
        std::fs::read_to_string(dir.join("fetched")).unwrap(),
        "the first bytes"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Waits for a backup of SampleDB `name` that fails from now on: its `LastBackupSucceeded`
/// message.
async fn backup_failed_from_now(ns: &TestNamespace, name: &str, waiting_for: &str) -> String {
    let since = Timestamp::now();
    eventually(Duration::from_secs(240), waiting_for, || async {
        let status = sampledb_status(ns, name);
        let failed: Timestamp = status["backup"]["lastFailedTime"].as_str()?.parse().ok()?;
        let last = condition(&status, "LastBackupSucceeded");
        (failed > since && last["status"] == "False")
            .then(|| last["message"].as_str().unwrap_or_default().to_owned())
    })
    .await
}

/// Asks SampleDB `name` for a backup now (a new `backup-requested-at`) and waits until it
/// succeeded: the name of its Job.
async fn backed_up_on_demand(ns: &TestNamespace, name: &str) -> String {
    let before = sampledb_status(ns, name)["backup"]["lastSuccessfulJob"].clone();
    let request = Timestamp::now().to_string();
    kubectl_ok(&[
        "annotate",
        "sdb",
        name,
        "-n",
        &ns.name,
        "--overwrite",
        &format!("app-operator.example.com/backup-requested-at={request}"),
    ]);
    eventually(
        Duration::from_secs(240),
        "the on-demand backup uploaded",
        || async {
            let backup = sampledb_status(ns, name)["backup"].clone();
            let job = backup["lastSuccessfulJob"].as_str()?.to_owned();
            (backup["lastHandledRequest"].as_str() == Some(request.as_str())
                && backup["lastSuccessfulJob"] != before)
                .then_some(job)
        },
    )
    .await
}

/// One CA and the certificates a user makes for TLS EtcdClusters `clusters` in a namespace, in
/// the coreos operator's Secrets: `etcd-peer`, `etcd-server` and `etcd-operator`.
struct EtcdCertificates {
    ca: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
    /// What the members' certificates name: every member and client Service of `clusters`.
    names: Vec<String>,
}

/// A certificate and its key, in PEM, and the certificate as served (DER).
struct Leaf {
    cert: String,
    key: String,
    der: rustls_pki_types::CertificateDer<'static>,
}

impl EtcdCertificates {
    fn new(namespace: &str, clusters: &[&str]) -> EtcdCertificates {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "etcd test CA");
        let ca = rcgen::CertifiedIssuer::self_signed(params, rcgen::KeyPair::generate().unwrap())
            .unwrap();
        let names = clusters
            .iter()
            .flat_map(|c| {
                [
                    format!("*.{c}.{namespace}.svc"),
                    format!("{c}-client.{namespace}.svc"),
                ]
            })
            .collect();
        EtcdCertificates { ca, names }
    }

    /// A new certificate from the CA: a member's (both usages, naming the members) or a client's.
    fn leaf(&self, member: bool) -> Leaf {
        use rcgen::ExtendedKeyUsagePurpose::{ClientAuth, ServerAuth};
        let names = if member {
            self.names.clone()
        } else {
            Vec::new()
        };
        let mut params = rcgen::CertificateParams::new(names).unwrap();
        params.extended_key_usages = if member {
            vec![ServerAuth, ClientAuth]
        } else {
            vec![ClientAuth]
        };
        params.distinguished_name.push(
            rcgen::DnType::CommonName,
            if member {
                "etcd member"
            } else {
                "app-operator"
            },
        );
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca).unwrap();
        Leaf {
            cert: cert.pem(),
            key: key.serialize_pem(),
            der: cert.der().clone(),
        }
    }

    /// Creates the three Secrets in `ns`; returns the server certificate.
    async fn create_secrets(&self, ns: &TestNamespace) -> Leaf {
        let ca = self.ca.pem();
        let (peer, server, client) = (self.leaf(true), self.leaf(true), self.leaf(false));
        for (name, prefix, leaf) in [
            ("etcd-peer", "peer", &peer),
            ("etcd-server", "server", &server),
            ("etcd-operator", "etcd-client", &client),
        ] {
            let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
                "metadata": { "name": name },
                "stringData": {
                    format!("{prefix}.crt"): leaf.cert,
                    format!("{prefix}.key"): leaf.key,
                    format!("{prefix}-ca.crt"): ca,
                }
            }))
            .unwrap();
            ns.api().create(&Default::default(), &secret).await.unwrap();
        }
        server
    }

    /// A client trusting the CA, presenting a client certificate from it or none.
    fn client_config(&self, with_certificate: bool) -> rustls::ClientConfig {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca.der().clone()).unwrap();
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots);
        if !with_certificate {
            return builder.with_no_client_auth();
        }
        use rustls_pki_types::pem::PemObject;
        let client = self.leaf(false);
        let key = rustls_pki_types::PrivateKeyDer::from_pem_slice(client.key.as_bytes()).unwrap();
        builder
            .with_client_auth_cert(vec![client.der], key)
            .unwrap()
    }
}

/// The certificate the member at `ip` serves clients, verified as `server_name`'s.
async fn served_certificate(
    config: &rustls::ClientConfig,
    ip: &str,
    server_name: &str,
) -> Option<rustls_pki_types::CertificateDer<'static>> {
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config.clone()));
    let tcp = tokio::net::TcpStream::connect((ip, 2379)).await.ok()?;
    let name = rustls_pki_types::ServerName::try_from(server_name.to_owned()).ok()?;
    let tls = connector.connect(name, tcp).await.ok()?;
    tls.get_ref().1.peer_certificates()?.first().cloned()
}

/// EtcdCluster `name` of `size` members on TLS with the Secrets of [`EtcdCertificates`].
fn tls_etcd_cluster(name: &str, size: i64, restore: Option<&str>) -> serde_json::Value {
    let mut spec = json!({
        "size": size, "version": "3.6.16",
        "TLS": { "static": {
            "member": { "peerSecret": "etcd-peer", "serverSecret": "etcd-server" },
            "operatorSecret": "etcd-operator"
        }}
    });
    if let Some(backup) = restore {
        spec["restore"] = json!({ "backupName": backup });
    }
    json!({
        "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
        "metadata": { "name": name }, "spec": spec
    })
}

/// etcd over TLS (`spec.TLS.static`, certificates made here): the cluster waits, Degraded, for
/// its Secrets; then members refuse plain text on both ports and clients without a certificate,
/// the operator manages them with its client certificate, an EtcdBackup snapshots them and a
/// new TLS cluster restores every acknowledged write; a rotated server certificate is served by
/// every member without a restart, while every acknowledged write is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_over_tls_refuses_plain_text_restores_a_backup_and_serves_a_rotated_certificate() {
    use testkit::etcd_store::EtcdStore;
    let ns = TestNamespace::new("real-etcd-tls").await;
    let certificates = EtcdCertificates::new(&ns.name, &["secure", "restored"]);
    apply(&ns, &tls_etcd_cluster("secure", 3, None));
    field_reaches(
        &ns,
        "etcd/secure",
        "{.status.conditions[?(@.type==\"Degraded\")].reason}",
        "TLSSecretNotFound",
    )
    .await;
    certificates.create_secrets(&ns).await;
    etcd_settled(&ns, "secure", 3).await;

    let client = certificates.client_config(true);
    let address = service_address(&ns, "secure-client").await;
    let store = std::sync::Arc::new(
        EtcdStore::tls(
            format!("https://{address}:2379"),
            &format!("secure-client.{}.svc", ns.name),
            client.clone(),
        )
        .unwrap(),
    );
    let writers = testkit::history::Writers::start(store.clone(), "kept/", 2);
    let members = ready_pods(&ns, "etcd_cluster=secure", 3).await;
    let member_ip = |pod: &Pod| pod.status.as_ref().unwrap().pod_ip.clone().unwrap();
    for pod in &members {
        let ip = member_ip(pod);
        for port in [2379, 2380] {
            let plain = EtcdStore::new(format!("http://{ip}:{port}"))
                .call("/v3/cluster/member/list", json!({}))
                .await;
            // Go's TLS server answers plain HTTP with a 400 saying so, or drops it; a plain
            // server would answer with its own status (a refused connect: nothing listens).
            let refused = plain.as_ref().is_err_and(|e| {
                e.contains("HTTP request to an HTTPS server")
                    || !(e.starts_with(|c: char| c.is_ascii_digit())
                        || e.contains("Connection refused"))
            });
            assert!(
                refused,
                "{}:{port} answered plain text: {plain:?}",
                pod.name_any()
            );
            println!("{}:{port} in plain text: {plain:?}", pod.name_any());
        }
        let server_name = format!("{}.secure.{}.svc", pod.name_any(), ns.name);
        let anonymous = EtcdStore::tls(
            format!("https://{ip}:2379"),
            &server_name,
            certificates.client_config(false),
        )
        .unwrap()
        .call("/v3/cluster/member/list", json!({}))
        .await;
        assert!(
            anonymous.is_err(),
            "{} answered a client without a certificate: {anonymous:?}",
            pod.name_any()
        );
        println!(
            "{}: plain text refused on 2379 and 2380; no certificate: {anonymous:?}",
            pod.name_any()
        );
    }

    let history = back_up_after(&ns, &store, writers, 500, "secure").await;
    field_reaches(&ns, "etcdbackup/nightly", "{.status.succeeded}", "true").await;
    apply(&ns, &tls_etcd_cluster("restored", 1, Some("nightly")));
    etcd_settled(&ns, "restored", 1).await;
    let restored_address = service_address(&ns, "restored-client").await;
    let restored = EtcdStore::tls(
        format!("https://{restored_address}:2379"),
        &format!("restored-client.{}.svc", ns.name),
        client.clone(),
    )
    .unwrap();
    let read = eventually(TIMEOUT, "every key read back", || async {
        testkit::history::Store::read_all(&restored, "kept/")
            .await
            .ok()
    })
    .await;
    history
        .check(&read)
        .assert_kept("etcd over TLS backed up and restored into a new TLS cluster");

    // Rotation: a new server certificate from the same CA, while two clients write.
    let writers = testkit::history::Writers::start(store.clone(), "rotated/", 2);
    let before = member_pods(&ns, "secure").await;
    let rotated = certificates.leaf(true);
    merge_patch(
        &ns,
        "secret",
        "etcd-server",
        &json!({ "stringData": { "server.crt": rotated.cert, "server.key": rotated.key } }),
    );
    let rotated_at = Instant::now();
    eventually(
        Duration::from_secs(300),
        "every member serving the rotated certificate",
        || async {
            for pod in &members {
                let name = format!("{}.secure.{}.svc", pod.name_any(), ns.name);
                if served_certificate(&client, &member_ip(pod), &name).await? != rotated.der {
                    return None;
                }
            }
            Some(())
        },
    )
    .await;
    println!(
        "every member served the rotated certificate {:.0}s after the Secret changed",
        rotated_at.elapsed().as_secs_f64()
    );
    assert_eq!(
        member_pods(&ns, "secure").await,
        before,
        "the same member Pods, all Ready: nothing restarted, the quorum held"
    );
    for pod in &members {
        assert_eq!(
            restarts(&ns, &pod.name_any()).await,
            Some(0),
            "{}",
            pod.name_any()
        );
    }
    read_back(
        &store,
        writers,
        "rotated/",
        "etcd over TLS while its server certificate rotated",
    )
    .await;
}

/// Once `writers` wrote `keys` keys under `kept/` through `store`, stops them and asks for a
/// backup of EtcdCluster `cluster` (EtcdBackup `nightly`); the history of what they wrote.
async fn back_up_after(
    ns: &TestNamespace,
    store: &testkit::etcd_store::EtcdStore,
    writers: testkit::history::Writers,
    keys: usize,
    cluster: &str,
) -> testkit::history::History {
    use testkit::history::Store;
    eventually(TIMEOUT, "some keys written", || async {
        (store.read_all("kept/").await.ok()?.len() >= keys).then_some(())
    })
    .await;
    let history = writers.stop().await;
    apply(
        ns,
        &json!({
            "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdBackup",
            "metadata": { "name": "nightly" }, "spec": { "etcdCluster": { "name": cluster } }
        }),
    );
    history
}

/// Merges `patch` into object `kind`/`name` in `ns`, as `kubectl patch --type=merge` does.
fn merge_patch(ns: &TestNamespace, kind: &str, name: &str, patch: &serde_json::Value) {
    kubectl_ok(&[
        "patch",
        kind,
        name,
        "-n",
        &ns.name,
        "--type=merge",
        "-p",
        &patch.to_string(),
    ]);
}

/// Applies `object` (JSON) in `ns`, as a user's `kubectl apply -f` would.
fn apply(ns: &TestNamespace, object: &serde_json::Value) {
    let file = std::env::temp_dir().join(format!(
        "{}-{}.json",
        ns.name,
        object["metadata"]["name"].as_str().unwrap_or_default()
    ));
    std::fs::write(&file, object.to_string()).unwrap();
    kubectl_ok(&["apply", "-n", &ns.name, "-f", file.to_str().unwrap()]);
    let _ = std::fs::remove_file(&file);
}

/// SampleDB `name`, Ready, reached at its Pod (what its headless Service resolves to) with the
/// credentials the operator made.
async fn sampledb_store(ns: &TestNamespace, name: &str) -> testkit::sql_store::PostgresStore {
    use k8s_openapi::api::core::v1::Secret;
    kubectl_ok(&[
        "wait",
        "--for=condition=Ready",
        &format!("sampledb/{name}"),
        "-n",
        &ns.name,
        "--timeout=300s",
    ]);
    let secret = ns
        .api::<Secret>()
        .get(&format!("{name}-credentials"))
        .await
        .unwrap();
    let data = secret.data.unwrap_or_default();
    let text = |key: &str| String::from_utf8(data[key].0.clone()).unwrap();
    let pod = sampledb_server(ns, name).await;
    let ip = pod.status.as_ref().unwrap().pod_ip.clone().unwrap();
    testkit::sql_store::PostgresStore::new(&ip, &text("username"), &text("password"), "app")
}

/// The ready Pod SampleDB `name`'s Service sends clients to: its server.
async fn sampledb_server(ns: &TestNamespace, name: &str) -> Pod {
    let service = ns
        .api::<k8s_openapi::api::core::v1::Service>()
        .get(name)
        .await
        .unwrap();
    let selector = service.spec.unwrap().selector.unwrap_or_default();
    let selector = selector
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    ready_pods(ns, &selector, 1).await.remove(0)
}

/// Where the volume bound to claim `claim` lives on the node (the local-path provisioner's
/// directory: the node is this machine).
async fn volume_on_node(ns: &TestNamespace, claim: &str) -> std::path::PathBuf {
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
    let claim = ns.api::<PersistentVolumeClaim>().get(claim).await.unwrap();
    let volume = claim.spec.unwrap().volume_name.unwrap();
    let client = testkit::client().await;
    let volume = Api::<PersistentVolume>::all(client)
        .get(&volume)
        .await
        .unwrap();
    let spec = volume.spec.unwrap();
    let path = spec
        .host_path
        .map(|h| h.path)
        .or(spec.local.map(|l| l.path))
        .unwrap();
    path.into()
}

/// The status of SampleDB `name` (`null` while it has none, or cannot be read).
fn sampledb_status(ns: &TestNamespace, name: &str) -> serde_json::Value {
    let out = kubectl(&["get", "sampledb", name, "-n", &ns.name, "-o", "json"]);
    let db: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    db["status"].clone()
}

/// The Job of a backup of SampleDB `name` (on a schedule) started after now, once it succeeded.
async fn backup_after_now(ns: &TestNamespace, name: &str) -> String {
    let now = Timestamp::now();
    eventually(
        Duration::from_secs(180),
        "a backup started after the last write finished",
        || async {
            let backup = sampledb_status(ns, name)["backup"].clone();
            let tick: Timestamp = backup["lastScheduleTime"].as_str()?.parse().ok()?;
            // A backup Job is named after its tick.
            let job = format!("{name}-backup-{}", tick.strftime("%Y%m%d-%H%M%S"));
            (tick > now && backup["lastSuccessfulJob"].as_str() == Some(job.as_str()))
                .then_some(job)
        },
    )
    .await
}

/// Deletes SampleDB `name`, makes it again (at 15) from `file` in its backups volume, which
/// outlives it, and checks `history` against the rows it then holds.
async fn recreated_from(
    ns: &TestNamespace,
    name: &str,
    file: &str,
    history: &testkit::history::History,
    scenario: &str,
) {
    delete_sampledb(ns, name);
    let restore = json!({ "restore": { "backupFile": file } });
    apply(ns, &sampledb(name, "15", restore));
    sampledb_read_back(ns, name, history, scenario).await;
}

/// Deletes SampleDB `name` and waits until it is gone, with its finalizer's work done.
fn delete_sampledb(ns: &TestNamespace, name: &str) {
    kubectl_ok(&[
        "delete",
        "sampledb",
        name,
        "-n",
        &ns.name,
        "--wait=true",
        "--timeout=300s",
    ]);
}

/// SampleDB `name` at `version`, as a user's manifest has it, with `spec` merged into the spec.
fn sampledb(name: &str, version: &str, spec: serde_json::Value) -> serde_json::Value {
    let mut object = json!({
        "apiVersion": "db.example.com/v1alpha1", "kind": "SampleDB",
        "metadata": { "name": name },
        "spec": { "version": version, "storage": { "size": "1Gi" } }
    });
    for (key, value) in spec.as_object().into_iter().flatten() {
        object["spec"][key] = value.clone();
    }
    object
}

/// A condition of SampleDB `status` (`null` when it has none of that type).
fn condition(status: &serde_json::Value, type_: &str) -> serde_json::Value {
    status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == type_)
        .cloned()
        .unwrap_or_default()
}

/// SampleDB `object` applied and Ready, with two clients writing rows into it, at least 50 of
/// them in already.
async fn sampledb_writing(
    ns: &TestNamespace,
    object: &serde_json::Value,
) -> testkit::history::Writers {
    use testkit::history::{Store, Writers};
    apply(ns, object);
    let name = object["metadata"]["name"].as_str().unwrap();
    let store = std::sync::Arc::new(sampledb_store(ns, name).await);
    store.prepare().await.unwrap();
    let writers = Writers::start(store.clone(), "row/", 2);
    eventually(TIMEOUT, "some rows written", || async {
        let rows = store.read_all("row/").await.ok()?;
        (rows.len() >= 50).then_some(())
    })
    .await;
    writers
}

/// [`sampledb_writing`], the writers then stopped: the history of what they were told.
async fn sampledb_with_rows(
    ns: &TestNamespace,
    object: &serde_json::Value,
) -> testkit::history::History {
    sampledb_writing(ns, object).await.stop().await
}

/// Reads every row of SampleDB `name` back (once it is Ready) and checks `history` against them.
async fn sampledb_read_back(
    ns: &TestNamespace,
    name: &str,
    history: &testkit::history::History,
    scenario: &str,
) {
    let store = sampledb_store(ns, name).await;
    let read = eventually(TIMEOUT, "every row read back", || async {
        testkit::history::Store::read_all(&store, "row/").await.ok()
    })
    .await;
    history.check(&read).assert_kept(scenario);
}

/// Real PostgreSQL: its init Job runs the init SQL; the server runs as the postgres user (999, not
/// root) on volumes of the local provisioner, its data directory its own (mode 0700); rows written
/// by two clients while scheduled backups run; a backup taken after the last write; the SampleDB
/// deleted and made again from that backup's file, which then holds every acknowledged row with
/// its value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sampledb_restored_from_its_backup_holds_every_acknowledged_row() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use testkit::history::Writers;

    let ns = TestNamespace::new("real-sampledb-backup").await;
    let name = "shop";
    let seeded = "SELECT note FROM seeded";
    apply(
        &ns,
        &json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "shop-init" },
            "data": { "10-seed.sql":
                "CREATE TABLE seeded (note text); INSERT INTO seeded VALUES ('from the init SQL');" }
        }),
    );
    apply(
        &ns,
        &sampledb(
            name,
            "15",
            json!({
                "backup": { "schedule": "*/15 * * * * *" }, "deletion": { "policy": "Delete" },
                "initSql": { "configMapName": "shop-init" }
            }),
        ),
    );
    let store = std::sync::Arc::new(sampledb_store(&ns, name).await);
    assert_eq!(
        store.psql(seeded).await.unwrap().trim(),
        "from the init SQL"
    );
    let server = sampledb_server(&ns, name).await;
    let postgres = testkit::node_process::processes(&server.uid().unwrap(), "postgres");
    let users: Vec<String> = postgres
        .iter()
        .filter_map(|pid| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            let line = status.lines().find(|l| l.starts_with("Uid:"))?;
            Some(
                line.split_whitespace()
                    .skip(1)
                    .collect::<Vec<_>>()
                    .join(" "),
            )
        })
        .collect();
    assert!(
        !users.is_empty() && users.iter().all(|ids| ids == "999 999 999 999"),
        "the postgres processes' real, effective, saved and file-system UIDs: {users:?}"
    );
    let data = volume_on_node(&ns, &format!("{name}-data"))
        .await
        .join("pgdata");
    let data = std::fs::metadata(&data).unwrap();
    assert_eq!(
        (data.uid(), data.permissions().mode() & 0o777),
        (999, 0o700),
        "the data directory's owner and mode on the node"
    );
    store.prepare().await.unwrap();
    let writers = Writers::start(store.clone(), "row/", 2);
    // Backups run while rows are written.
    eventually(
        Duration::from_secs(180),
        "a backup finished during the writes",
        || async {
            sampledb_status(&ns, name)["backup"]["lastSuccessfulJob"]
                .as_str()
                .map(str::to_owned)
        },
    )
    .await;
    let history = writers.stop().await;
    let job = backup_after_now(&ns, name).await;
    println!(
        "backup {job} holds the rows of {} acknowledged writes",
        history.acknowledged()
    );
    // The dump is real: PostgreSQL's own pg_restore reads its table of contents, from the backups
    // volume as the provisioner keeps it on the node.
    let dump = volume_on_node(&ns, &format!("{name}-backups"))
        .await
        .join(format!("{job}.dump"));
    let listed = std::process::Command::new("pg_restore")
        .arg("--list")
        .arg(&dump)
        .output()
        .unwrap();
    let contents = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.status.success() && contents.contains("TABLE DATA public history"),
        "pg_restore --list {}: {contents}{}",
        dump.display(),
        String::from_utf8_lossy(&listed.stderr)
    );

    recreated_from(
        &ns,
        name,
        &format!("{job}.dump"),
        &history,
        "sampledb backed up, deleted and restored",
    )
    .await;
    let restored = sampledb_store(&ns, name).await;
    assert_eq!(
        restored.psql(seeded).await.unwrap().trim(),
        "from the init SQL"
    );
}

/// A SampleDB restored from a file the backups volume does not hold: its restore Job really runs
/// and fails, and the SampleDB says so — Degraded with the script's own words, a Warning event,
/// phase Failed — and is never reported Ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sampledb_restored_from_a_missing_file_says_so_and_is_not_ready() {
    let ns = TestNamespace::new("real-sampledb-missing").await;
    let restore = json!({ "restore": { "backupFile": "nowhere.dump" } });
    apply(&ns, &sampledb("lost", "15", restore));
    let status = eventually(Duration::from_secs(300), "the restore to fail", || async {
        let status = sampledb_status(&ns, "lost");
        (status["phase"] == "Failed").then_some(status)
    })
    .await;
    let degraded = condition(&status, "Degraded");
    assert_eq!(degraded["status"], "True", "{status}");
    assert_eq!(degraded["reason"], "RestoreJobFailed", "{status}");
    let message = degraded["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("nowhere.dump not found"),
        "the message must say the file is missing: {message}"
    );
    assert_eq!(condition(&status, "Ready")["status"], "False", "{status}");
    let events = kubectl(&["get", "events", "-n", &ns.name, "-o", "json"]);
    let events: serde_json::Value = serde_json::from_slice(&events.stdout).unwrap();
    assert!(
        events["items"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|e| e["type"] == "Warning"
                && e["regarding"]["kind"]
                    .as_str()
                    .or(e["involvedObject"]["kind"].as_str())
                    == Some("SampleDB")
                && e["note"]
                    .as_str()
                    .or(e["message"].as_str())
                    .is_some_and(|m| m.contains("not found"))),
        "a Warning event on the SampleDB says the file is missing"
    );
}

/// A SampleDB whose server stops answering its init Job for over a minute (the node's firewall
/// refuses the Job Pod's connections to it, as a starved node's late Pod can find it restarting):
/// the Job's first Pod gives up after 60 s, the SampleDB says so while a new Pod tries again,
/// and once the server answers the init SQL runs and the SampleDB is Ready, never Degraded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sampledb_whose_server_answers_its_init_job_late_is_initialized() {
    let ns = TestNamespace::new("real-sampledb-late").await;
    apply(
        &ns,
        &json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "late-init" },
            "data": { "10-seed.sql": "CREATE TABLE seeded (note text); INSERT INTO seeded VALUES ('late');" }
        }),
    );
    apply(
        &ns,
        &sampledb(
            "late",
            "15",
            json!({ "initSql": { "configMapName": "late-init" } }),
        ),
    );
    let server = eventually(TIMEOUT, "the database Pod's address", || async {
        let selector = "db.example.com/sampledb=late,db.example.com/role=database";
        let pods = ns
            .api::<Pod>()
            .list(&ListParams::default().labels(selector))
            .await
            .ok()?;
        pods.items
            .iter()
            .find_map(|pod| pod.status.as_ref()?.pod_ip.clone())
    })
    .await;
    let refused = Refused::forwarded_to(&server, 5432);
    let retrying = eventually(
        Duration::from_secs(300),
        "the SampleDB to say its init Job tries again",
        || async {
            let status = sampledb_status(&ns, "late");
            assert_ne!(condition(&status, "Degraded")["status"], "True", "{status}");
            let progressing = condition(&status, "Progressing");
            let message = progressing["message"].as_str()?;
            // The operator's words, not the script's (which a failed Job quotes too).
            (progressing["reason"] == "Initializing"
                && message.contains("a Pod of it failed, and a new one tries again"))
            .then(|| message.to_owned())
        },
    )
    .await;
    assert!(
        retrying.contains("did not accept connections within 60 s"),
        "{retrying}"
    );
    drop(refused);
    let store = sampledb_store(&ns, "late").await;
    assert_eq!(
        store.psql("SELECT note FROM seeded").await.unwrap().trim(),
        "late"
    );
    let status = sampledb_status(&ns, "late");
    assert_ne!(condition(&status, "Degraded")["status"], "True", "{status}");
    // The SampleDB is initialized at its Pod's end; the Job controller records that Pod up to a
    // second later (its batched sync).
    field_reaches(&ns, "job/late-init", "{.status.succeeded}", "1").await;
    let job = kubectl_ok(&[
        "get",
        "job",
        "late-init",
        "-n",
        &ns.name,
        "-o",
        "jsonpath={.status.succeeded} {.status.failed}",
    ]);
    assert_eq!(
        job.trim(),
        "1",
        "one Pod succeeded; the ignored failure is not counted"
    );
}

/// An iptables rule (while it lives) that refuses TCP connections forwarded on the node to
/// `address:port`: Pods cannot reach that Pod's port; the node and the Pod itself still can.
struct Refused(Vec<String>);

impl Refused {
    fn forwarded_to(address: &str, port: u16) -> Refused {
        let rule: Vec<String> = [
            "FORWARD",
            "-d",
            address,
            "-p",
            "tcp",
            "--dport",
            &port.to_string(),
            "-j",
            "REJECT",
            "--reject-with",
            "tcp-reset",
        ]
        .map(str::to_owned)
        .into();
        Refused::iptables("-I", &rule);
        Refused(rule)
    }

    fn iptables(action: &str, rule: &[String]) {
        let status = std::process::Command::new("iptables")
            .args(["-w", action])
            .args(rule)
            .status()
            .unwrap();
        assert!(status.success(), "iptables {action} {rule:?}: {status}");
    }
}

impl Drop for Refused {
    fn drop(&mut self) {
        Refused::iptables("-D", &self.0);
    }
}

/// Kills (SIGKILL) the process of every operator replica deployed on the node; how many there
/// were. Their containers restart (the Pods stay), as after a crash. The long scenarios run side
/// by side and share the operator: one may find both containers restarting after another's
/// kill, so this waits (bounded) for a process to kill (seen in `make chaos`).
async fn kill_operator() -> usize {
    use nix::sys::signal::Signal;
    let client = testkit::client().await;
    let pods: Api<Pod> = Api::namespaced(client, OPERATOR_NAMESPACE);
    eventually(
        TIMEOUT,
        "an operator process on the node to kill",
        || async {
            let pods = pods
                .list(&ListParams::default().labels("control-plane=controller-manager"))
                .await
                .ok()?
                .items;
            let killed: usize = pods
                .iter()
                .filter_map(|pod| pod.metadata.uid.as_deref())
                .map(|uid| testkit::node_process::signal(uid, "app-operator", Signal::SIGKILL))
                .sum();
            (killed > 0).then_some(killed)
        },
    )
    .await
}

/// The long data scenarios: `make chaos` runs them (`make test` skips `long::`).
mod long {
    use super::*;

    /// Real etcd members keep every acknowledged write when the leader's process, then a
    /// follower's, is killed (SIGKILL from the node) under two writing clients: the container
    /// restarts on its data, the member rejoins, and the cluster is Ready with three members again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn etcd_keeps_every_acknowledged_write_when_the_leader_and_a_follower_are_killed() {
        use nix::sys::signal::Signal;
        use testkit::node_process;

        let ns = TestNamespace::new("real-etcd-kill").await;
        let name = "killed";
        let (store, writers) = etcd_with_writers(
            &ns,
            name,
            json!({ "size": 3, "version": "3.6.16" }),
            "kill/",
        )
        .await;
        for victim in ["leader", "follower"] {
            let members = etcd_members_leader_first(&ns, name).await;
            let pod = if victim == "leader" {
                &members[0]
            } else {
                &members[1]
            };
            let before = restarts(&ns, &pod.name_any()).await;
            let killed = node_process::signal(&pod.uid().unwrap(), "etcd", Signal::SIGKILL);
            assert_eq!(killed, 1, "the {victim}'s etcd process, {}", pod.name_any());
            // The container restarts on its data, or the operator replaces the member.
            eventually(
                TIMEOUT,
                &format!("the {victim}'s container restarted"),
                || async {
                    let now = restarts(&ns, &pod.name_any()).await;
                    (now.is_none() || now > before).then_some(())
                },
            )
            .await;
            etcd_settled(&ns, name, 3).await;
            println!(
                "killed the {victim}, {}: the cluster is Ready with 3 members again",
                pod.name_any()
            );
        }
        read_back(
            &store,
            writers,
            "kill/",
            "etcd leader and a follower killed",
        )
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_etcd_cluster_restored_from_a_bucket_after_its_namespace_was_deleted_holds_every_write()
     {
        use testkit::history::Store;
        let bucket = Bucket::of_the_node();
        let source_ns = TestNamespace::new("real-etcd-bucket").await;
        bucket.secret(&source_ns, "bucket-keys", &bucket.secret_key);
        let (store, writers) = etcd_with_writers(
            &source_ns,
            "source",
            json!({ "size": 3, "version": "3.6.16" }),
            "kept/",
        )
        .await;
        eventually(TIMEOUT, "some keys written", || async {
            (store.read_all("kept/").await.ok()?.len() >= 1000).then_some(())
        })
        .await;
        let history = writers.stop().await;
        let key = format!("{}/etcd.db", source_ns.name);
        apply(
            &source_ns,
            &json!({
                "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdBackup",
                "metadata": { "name": "offsite" },
                "spec": {
                    "etcdCluster": { "name": "source" }, "storageType": "S3",
                    "s3": bucket.source(&key, "bucket-keys")
                }
            }),
        );
        let file = eventually(
            Duration::from_secs(300),
            "the snapshot uploaded",
            || async {
                let status = &etcd_backup(&source_ns, "offsite")["status"];
                (status["succeeded"] == true).then(|| status["snapshots"][0]["file"].clone())
            },
        )
        .await;
        assert_eq!(
            file,
            format!("backups/{key}"),
            "the status names the object"
        );
        assert_eq!(
            bucket.objects(&key),
            std::slice::from_ref(&key),
            "the bucket holds it"
        );

        // The namespace, its cluster, its Secret and its EtcdBackup are gone; the object is not.
        let ns = bucket
            .after_deleting(source_ns, "real-etcd-bucket-restored")
            .await;
        apply(
            &ns,
            &json!({
                "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
                "metadata": { "name": "restored" },
                "spec": { "size": 3, "version": "3.6.16",
                          "restore": { "s3": bucket.source(&key, "bucket-keys") } }
            }),
        );
        etcd_settled(&ns, "restored", 3).await;
        let (restored, read) = restored_holds(
            &ns,
            "restored",
            &history,
            "etcd backed up to a bucket, its namespace deleted, restored in another",
        )
        .await;

        // An object damaged at rest is refused before etcd reads it.
        let damaged = format!("{}/damaged.db", ns.name);
        bucket.damaged_copy(&key, &damaged);
        apply(
            &ns,
            &json!({
                "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
                "metadata": { "name": "damaged" },
                "spec": { "size": 1, "version": "3.6.16",
                          "restore": { "s3": bucket.source(&damaged, "bucket-keys") } }
            }),
        );
        let said = eventually(
            TIMEOUT,
            "the damaged restore Degraded/RestoreFailed",
            || async {
                let cluster = etcd_cluster(&ns, "damaged");
                let degraded = condition(&cluster["status"], "Degraded");
                (degraded["reason"] == "RestoreFailed").then_some(())?;
                let pods = ns
                    .api::<Pod>()
                    .list(&ListParams::default().labels("etcd_cluster=damaged"))
                    .await
                    .ok()?;
                pods.items.iter().find_map(|pod| {
                    pod.status
                        .as_ref()?
                        .init_container_statuses
                        .as_ref()?
                        .iter()
                        .filter(|c| c.name == "fetch")
                        .find_map(|c| c.state.as_ref()?.terminated.as_ref()?.message.clone())
                })
            },
        )
        .await;
        println!("the damaged object's fetch said: {}", said.trim());
        assert!(said.contains("is damaged"), "the fetch said: {said}");

        // Credentials the bucket refuses: the backup fails saying so, etcd keeps serving.
        bucket.secret(&ns, "periodic-keys", "not-the-secret");
        let series = format!("{}/periodic.db", ns.name);
        apply(
            &ns,
            &json!({
                "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdBackup",
                "metadata": { "name": "periodic" },
                "spec": {
                    "etcdCluster": { "name": "restored" }, "storageType": "S3",
                    "s3": bucket.source(&series, "periodic-keys"),
                    "backupPolicy": { "backupIntervalInSecond": 15, "maxBackups": 2 }
                }
            }),
        );
        let reason = eventually(TIMEOUT, "the refused backup's reason", || async {
            let status = etcd_backup(&ns, "periodic")["status"].clone();
            let degraded = condition(&status, "Degraded");
            (degraded["reason"] == "BackupFailed")
                .then(|| status["reason"].as_str().map(str::to_owned))?
        })
        .await;
        println!("refused: {reason}");
        assert!(
            reason.contains("refused the Secret's credentials: 403 Forbidden"),
            "{reason}"
        );
        assert!(
            !reason.contains("not-the-secret"),
            "no secret in the status: {reason}"
        );
        let warnings = kubectl_ok(&[
            "get",
            "events",
            "-n",
            &ns.name,
            "--field-selector=type=Warning,reason=BackupFailed",
            "-o",
            "name",
        ]);
        assert!(!warnings.trim().is_empty(), "a BackupFailed Warning");
        assert_eq!(
            restored.read_all("kept/").await.unwrap(),
            read,
            "etcd still serves"
        );

        // Fixed: backups resume, and the bucket keeps exactly the newest two, as the status lists.
        bucket.secret(&ns, "periodic-keys", &bucket.secret_key);
        let listed = eventually(
            Duration::from_secs(240),
            "three uploads, two kept",
            || async {
                let status = etcd_backup(&ns, "periodic")["status"].clone();
                let uploads = succeeded_backups(&ns, "EtcdBackup", "periodic");
                let mut files: Vec<String> = status["snapshots"]
                    .as_array()?
                    .iter()
                    .filter_map(|s| {
                        Some(
                            s["file"]
                                .as_str()?
                                .trim_start_matches("backups/")
                                .to_owned(),
                        )
                    })
                    .collect();
                files.sort();
                (uploads >= 3 && status["succeeded"] == true && bucket.objects(&series) == files)
                    .then_some(files)
            },
        )
        .await;
        println!("the bucket keeps {listed:?}");
        assert_eq!(listed.len(), 2, "maxBackups: {listed:?}");
    }

    /// Point-in-time recovery: a SampleDB archiving its write-ahead log to the bucket, a base
    /// backup taken on demand while two clients write, more rows after it (so only the archived
    /// log holds them), the time read from the database's clock (t1), then rows under another
    /// prefix (t2), a second base backup (too late for t1), and the segment holding the t2 rows
    /// archived. A new SampleDB in another namespace recovered to t1 holds every acknowledged row
    /// written before it, and none written after.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_sampledb_recovered_to_a_time_holds_exactly_the_rows_written_before_it() {
        use testkit::history::{Store, Writers};
        let bucket = Bucket::of_the_node();
        let source_ns = TestNamespace::new("real-sdb-pitr").await;
        bucket.secret(&source_ns, "bucket-keys", &bucket.secret_key);
        let prefix = format!("{}/ledger", source_ns.name);
        let object = sampledb(
            "ledger",
            "15",
            json!({ "backup": { "s3": bucket.source(&prefix, "bucket-keys"), "archiveWal": true } }),
        );
        let writers = sampledb_writing(&source_ns, &object).await;
        let job = backed_up_on_demand(&source_ns, "ledger").await;
        let base = format!("{prefix}/base/{job}.tar.gz");
        assert_eq!(
            bucket.objects(&format!("{prefix}/base/")),
            std::slice::from_ref(&base)
        );
        let store = sampledb_store(&source_ns, "ledger").await;
        let at_backup = store.read_all("row/").await.unwrap().len();
        eventually(TIMEOUT, "50 more rows after the base backup", || async {
            let rows = store.read_all("row/").await.ok()?;
            (rows.len() >= at_backup + 50).then_some(())
        })
        .await;
        let before = writers.stop().await;
        let t1 = store
        .psql(r#"select to_char(clock_timestamp() at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')"#)
        .await
        .unwrap()
        .trim()
        .to_owned();
        let later = std::sync::Arc::new(store);
        let writers = Writers::start(later.clone(), "later/", 2);
        eventually(TIMEOUT, "50 rows after t1", || async {
            (later.read_all("later/").await.ok()?.len() >= 50).then_some(())
        })
        .await;
        let after = writers.stop().await;
        // A base backup after t1 too: the recovery must start from the one before it.
        let too_late = backed_up_on_demand(&source_ns, "ledger").await;
        assert_eq!(
            bucket.objects(&format!("{prefix}/base/")),
            [base.clone(), format!("{prefix}/base/{too_late}.tar.gz")]
        );
        let segment = later
            .psql("select pg_walfile_name(pg_switch_wal())")
            .await
            .unwrap()
            .trim()
            .to_owned();
        eventually(TIMEOUT, "the segment with the t2 rows archived", || async {
            let archived = later
                .psql("select coalesce(last_archived_wal, '') from pg_stat_archiver")
                .await
                .ok()?;
            (archived.trim() >= segment.as_str()).then_some(())
        })
        .await;
        let wal = bucket.objects(&format!("{prefix}/wal/"));
        assert!(
            wal.contains(&format!("{prefix}/wal/{segment}")),
            "{segment} in the bucket: {wal:?}"
        );
        println!(
            "base backup {base}; t1 {t1}; {} segments archived up to {segment}",
            wal.len()
        );

        let ns = TestNamespace::new("real-sdb-pitr-clone").await;
        bucket.secret(&ns, "bucket-keys", &bucket.secret_key);
        apply(
            &ns,
            &sampledb(
                "rewound",
                "15",
                json!({ "restore": { "pointInTime": {
                "s3": bucket.source(&prefix, "bucket-keys"), "targetTime": t1
            } } }),
            ),
        );
        sampledb_read_back(
            &ns,
            "rewound",
            &before,
            "PostgreSQL recovered to t1 from a base backup and the archived log",
        )
        .await;
        let recovered = sampledb_store(&ns, "rewound").await;
        let written_after = recovered.read_all("later/").await.unwrap();
        println!(
            "rows written after t1: {} acknowledged, {} in the recovered database",
            after.acknowledged(),
            written_after.len()
        );
        assert!(after.acknowledged() > 0, "nothing was written after t1");
        assert_eq!(
            written_after.len(),
            0,
            "rows written after t1 were recovered: {:?}",
            written_after.keys().take(5).collect::<Vec<_>>()
        );
    }

    /// Real etcd members keep every write a client was told succeeded while the cluster grows from
    /// one member to five and shrinks back to one, with two clients writing all along through the
    /// cluster's client Service.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn etcd_keeps_every_acknowledged_write_while_it_scales() {
        let ns = TestNamespace::new("real-etcd-history").await;
        let name = "history";
        let (store, writers) = etcd_with_writers(
            &ns,
            name,
            json!({ "size": 1, "version": "3.6.16" }),
            "history/",
        )
        .await;
        for size in [3, 5, 3, 1] {
            merge_patch(&ns, "etcd", name, &json!({ "spec": { "size": size } }));
            etcd_settled(&ns, name, size).await;
        }
        read_back(&store, writers, "history/", "etcd scaled 1 → 3 → 5 → 3 → 1").await;
    }

    /// Real etcd members upgraded one by one from 3.5 to 3.6 (each member Pod's image changed in
    /// place, the data directory kept) keep every write two clients were told succeeded while the
    /// upgrade rolled, though every operator process was killed (SIGKILL) in the middle of it:
    /// the restarted operator finds the half-done upgrade and finishes it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn etcd_upgraded_3_5_to_3_6_through_an_operator_crash_keeps_every_write() {
        let ns = TestNamespace::new("real-etcd-upgrade").await;
        let name = "rolling";
        let (store, writers) = etcd_with_writers(
            &ns,
            name,
            json!({ "size": 3, "version": "3.5.35" }),
            "rolling/",
        )
        .await;
        merge_patch(
            &ns,
            "etcd",
            name,
            &json!({ "spec": { "version": "3.6.16" } }),
        );
        eventually(
            Duration::from_secs(300),
            "a member on 3.6.16 while others are on 3.5.35",
            || async {
                let pods = ns
                    .api::<Pod>()
                    .list(&ListParams::default().labels(&format!("etcd_cluster={name}")))
                    .await
                    .ok()?;
                let images = pods
                    .items
                    .iter()
                    .filter_map(|pod| pod.spec.as_ref()?.containers.first()?.image.clone())
                    .collect::<Vec<_>>();
                (images.iter().any(|i| i.ends_with(":v3.6.16"))
                    && images.iter().any(|i| i.ends_with(":v3.5.35")))
                .then_some(())
            },
        )
        .await;
        let killed = kill_operator().await;
        println!("the upgrade half done: {killed} operator processes killed");
        eventually(
            Duration::from_secs(600),
            "every member at 3.6.16",
            || async {
                let out = kubectl(&["get", "etcd", name, "-n", &ns.name, "-o", "json"]);
                let cluster: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
                let status = &cluster["status"];
                (status["currentVersion"] == "3.6.16" && status["targetVersion"].is_null())
                    .then_some(())
            },
        )
        .await;
        etcd_settled(&ns, name, 3).await;
        read_back(&store, writers, "rolling/", "etcd upgraded 3.5 → 3.6").await;
    }

    /// A member whose process hangs (SIGSTOP from the node: it holds its connections and answers
    /// nothing) is found by its liveness probe, killed, and replaced once the other two hold a
    /// quorum, not waited on forever; the writes acknowledged meanwhile are all kept.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_hung_etcd_member_is_replaced_and_every_acknowledged_write_kept() {
        use nix::sys::signal::Signal;
        use testkit::node_process;

        let ns = TestNamespace::new("real-etcd-hung").await;
        let name = "hung";
        let (store, writers) = etcd_with_writers(
            &ns,
            name,
            json!({ "size": 3, "version": "3.6.16" }),
            "hung/",
        )
        .await;
        let members = etcd_members_leader_first(&ns, name).await;
        let hung = members[1].name_any();
        let stopped = node_process::signal(&members[1].uid().unwrap(), "etcd", Signal::SIGSTOP);
        assert_eq!(stopped, 1, "the follower's etcd process, {hung}");
        let started = Instant::now();
        eventually(
            Duration::from_secs(300),
            "the hung member's Pod replaced",
            || async {
                let pods = ns.api::<Pod>();
                pods.get_opt(&hung).await.ok()?.is_none().then_some(())
            },
        )
        .await;
        etcd_settled(&ns, name, 3).await;
        println!(
            "hung member {hung}: replaced and the cluster Ready with 3 members after {:.0} s",
            started.elapsed().as_secs_f64()
        );
        read_back(&store, writers, "hung/", "etcd member hung").await;
    }

    /// Real PostgreSQL upgraded 15 → 17 by the operator (stopped, converted by its upgrade Job,
    /// started on 17) keeps every acknowledged row with its value, though every operator process
    /// was killed (SIGKILL) while the upgrade Job ran: the restarted operator takes the upgrade up
    /// where its status left it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_sampledb_upgraded_15_to_17_through_an_operator_crash_keeps_every_row() {
        upgraded_15_to_17_through("real-sampledb-upgrade", "an operator crash", || async {
            format!("{} operator processes killed", kill_operator().await)
        })
        .await;
    }

    /// SampleDB `grown` with rows, upgraded 15 → 17 with `fault` made while its upgrade Job runs
    /// (it says what it did): the data reaches 17, the server answers `17.x`, and every
    /// acknowledged row is read back.
    async fn upgraded_15_to_17_through<F, Fut>(namespace: &str, scenario: &str, fault: F)
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = String>,
    {
        let ns = TestNamespace::new(namespace).await;
        let name = "grown";
        let history = sampledb_with_rows(&ns, &sampledb(name, "15", json!({}))).await;
        apply(&ns, &sampledb(name, "17", json!({})));
        let job = eventually(Duration::from_secs(300), "the upgrade Job", || async {
            sampledb_status(&ns, name)["upgrade"]["job"]
                .as_str()
                .map(str::to_owned)
        })
        .await;
        println!("upgrade Job {job} running: {}", fault().await);
        eventually(Duration::from_secs(300), "the data at 17", || async {
            (sampledb_status(&ns, name)["currentVersion"] == "17").then_some(())
        })
        .await;
        let upgraded = sampledb_store(&ns, name).await;
        let version = eventually(TIMEOUT, "the server answers", || async {
            upgraded.psql("show server_version").await.ok()
        })
        .await;
        assert!(version.starts_with("17."), "the server runs {version}");
        sampledb_read_back(
            &ns,
            name,
            &history,
            &format!("sampledb upgraded 15 → 17 through {scenario}"),
        )
        .await;
        // The upgrade Job's Pod names the data claim: the deletion removes it, or the claim (and
        // the SampleDB) would wait on it forever.
        delete_sampledb(&ns, name);
    }

    /// Rows written while backups run every 10 s, and every operator process killed (SIGKILL)
    /// while a backup Job runs: the restarted operator takes the next backups while the rows keep
    /// coming, and one taken after the last write restores every acknowledged row.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_sampledb_backed_up_through_an_operator_crash_restores_every_row() {
        use k8s_openapi::api::batch::v1::Job;

        let ns = TestNamespace::new("real-sampledb-backup-crash").await;
        let name = "ledger";
        let every_10_s = json!({
            "backup": { "schedule": "*/10 * * * * *" }, "deletion": { "policy": "Delete" }
        });
        let writers = sampledb_writing(&ns, &sampledb(name, "15", every_10_s)).await;
        let running = eventually(Duration::from_secs(180), "a backup Job running", || async {
            let jobs = ns.api::<Job>().list(&ListParams::default()).await.ok()?;
            jobs.items
                .into_iter()
                .find(|job| {
                    job.name_any().starts_with(&format!("{name}-backup-"))
                        && job.status.as_ref().and_then(|s| s.active).unwrap_or(0) > 0
                })
                .map(|job| job.name_any())
        })
        .await;
        let killed = kill_operator().await;
        println!("backup Job {running} running: {killed} operator processes killed");
        // The restarted operator backs up again while the rows keep coming.
        let next = backup_after_now(&ns, name).await;
        println!("backup {next} succeeded after the crash");
        let history = writers.stop().await;
        let job = backup_after_now(&ns, name).await;
        recreated_from(
            &ns,
            name,
            &format!("{job}.dump"),
            &history,
            "sampledb backed up through an operator crash and restored",
        )
        .await;
    }

    /// An upgrade that PostgreSQL 17 refuses — the data has a view on a statistic 17 removed
    /// (`pg_stat_bgwriter.checkpoints_timed`), so restoring the dump fails — leaves 15 running
    /// with every row, says why (Degraded `UpgradeFailed`, the server's own error), and setting
    /// the version back to 15 is accepted and clears it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_sampledb_upgrade_leaves_the_old_version_with_every_row_and_can_be_undone() {
        let ns = TestNamespace::new("real-sampledb-failed-upgrade").await;
        let name = "stuck";
        let history = sampledb_with_rows(&ns, &sampledb(name, "15", json!({}))).await;
        sampledb_store(&ns, name)
            .await
            .psql("create view checkpoints as select checkpoints_timed from pg_stat_bgwriter")
            .await
            .unwrap();
        apply(&ns, &sampledb(name, "17", json!({})));
        let status = eventually(Duration::from_secs(300), "the upgrade to fail", || async {
            let status = sampledb_status(&ns, name);
            (condition(&status, "Degraded")["reason"] == "UpgradeFailed").then_some(status)
        })
        .await;
        let message = condition(&status, "Degraded")["message"].clone();
        println!("the failed upgrade says: {message}");
        assert!(
            message.as_str().unwrap().contains("checkpoints_timed"),
            "the message names what PostgreSQL 17 refused: {message}"
        );
        assert_eq!(status["currentVersion"], "15", "{status}");
        let old = sampledb_store(&ns, name).await;
        let version = eventually(TIMEOUT, "the server answers", || async {
            old.psql("show server_version").await.ok()
        })
        .await;
        assert!(version.starts_with("15."), "the server runs {version}");
        sampledb_read_back(&ns, name, &history, "sampledb upgrade to 17 failed").await;

        apply(&ns, &sampledb(name, "15", json!({})));
        let status = eventually(TIMEOUT, "the failure cleared", || async {
            let status = sampledb_status(&ns, name);
            (condition(&status, "Degraded")["status"] == "False"
                && condition(&status, "Ready")["status"] == "True")
                .then_some(status)
        })
        .await;
        assert!(status["upgrade"].is_null(), "no upgrade recorded: {status}");
    }

    /// Deleted with the `Snapshot` policy, a SampleDB leaves a final dump in its backups volume
    /// (which outlives it); a new SampleDB restored from that file holds every acknowledged row.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_sampledb_deleted_with_the_snapshot_policy_restores_from_its_final_dump() {
        let ns = TestNamespace::new("real-sampledb-snapshot").await;
        let name = "kept";
        let snapshot_policy = json!({ "deletion": { "policy": "Snapshot" } });
        let history = sampledb_with_rows(&ns, &sampledb(name, "15", snapshot_policy)).await;
        let out = kubectl_ok(&[
            "get",
            "sampledb",
            name,
            "-n",
            &ns.name,
            "-o",
            "jsonpath={.metadata.uid}",
        ]);
        // The documented name: `<name>-final-snapshot-<first 8 characters of its uid>.dump`.
        let file = format!("{name}-final-snapshot-{}.dump", &out[..8]);
        recreated_from(
            &ns,
            name,
            &file,
            &history,
            "sampledb deleted with a final snapshot and restored",
        )
        .await;
    }

    /// A member (the leader) cut from its peers (its network namespace drops peer traffic, port
    /// 2380, both ways) loses the lead and is reported unreachable while the two others elect a
    /// leader and keep taking writes; healed, it catches up as the same member in the same Pod,
    /// and every acknowledged write is kept.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_etcd_member_cut_from_its_peers_catches_up_when_healed() {
        use testkit::history::Store;
        use testkit::node_process::iptables_in_pod;

        let ns = TestNamespace::new("real-etcd-partition").await;
        let name = "cut";
        let spec = json!({ "size": 3, "version": "3.6.16" });
        let (store, writers) = etcd_with_writers(&ns, name, spec, "cut/").await;
        let cut = etcd_members_leader_first(&ns, name).await.remove(0);
        let (uid, member) = (cut.uid().unwrap(), cut.name_any());
        let rules = [["INPUT", "--dport"], ["OUTPUT", "--dport"]];
        for [chain, port] in rules {
            let args = ["-I", chain, "-p", "tcp", port, "2380", "-j", "DROP"];
            assert!(iptables_in_pod(&uid, "etcd", &args), "cutting {member}");
        }
        eventually(
            Duration::from_secs(120),
            &format!("{member} reported unreachable"),
            || async {
                let status = &etcd_cluster(&ns, name)["status"];
                let degraded = condition(status, "Degraded");
                (degraded["reason"] == "MembersUnreachable"
                    && degraded["message"].as_str()?.contains(&member))
                .then_some(())
            },
        )
        .await;
        let before = store.read_all("cut/").await.unwrap().len();
        eventually(TIMEOUT, "writes acknowledged while cut off", || async {
            let now = store.read_all("cut/").await.ok()?.len();
            (now >= before + 100).then_some(())
        })
        .await;
        println!("{member} cut off: unreachable, the others took writes ({before} keys and on)");
        for [chain, port] in rules {
            let args = ["-D", chain, "-p", "tcp", port, "2380", "-j", "DROP"];
            assert!(iptables_in_pod(&uid, "etcd", &args), "healing {member}");
        }
        etcd_settled(&ns, name, 3).await;
        let pod = ns.api::<Pod>().get(&member).await.unwrap();
        assert_eq!(pod.uid().unwrap(), uid, "{member} came back in its own Pod");
        read_back(
            &store,
            writers,
            "cut/",
            "etcd leader cut from its peers, then healed",
        )
        .await;
    }

    /// The operator cut from the members' client port (its network namespace drops it) while
    /// they serve: the cluster says `EtcdUnreachable`, not a lost quorum, and nothing is changed
    /// blind: a member killed meanwhile is neither removed nor replaced, a scale-out waits. Healed,
    /// the operator replaces the dead member and scales out; every acknowledged write is kept.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_operator_that_cannot_reach_etcd_says_so_and_changes_nothing_blind() {
        use nix::sys::signal::Signal;
        use testkit::node_process::signal;

        let ns = TestNamespace::new("real-etcd-blind").await;
        let name = "blind";
        let spec = json!({ "size": 3, "version": "3.6.16" });
        let (store, writers) = etcd_with_writers(&ns, name, spec, "blind/").await;
        let cut = OperatorCut::new(&["OUTPUT", "-p", "tcp", "--dport", "2379", "-j", "DROP"]).await;
        // A settled cluster is looked at again on a change: this one asks for a scale-out.
        merge_patch(&ns, "etcd", name, &json!({ "spec": { "size": 5 } }));
        eventually(Duration::from_secs(120), "EtcdUnreachable", || async {
            let status = &etcd_cluster(&ns, name)["status"];
            (condition(status, "Degraded")["reason"] == "EtcdUnreachable"
                && condition(status, "Available")["reason"] == "EtcdUnreachable")
                .then_some(())
        })
        .await;
        let victim = etcd_members_leader_first(&ns, name).await.pop().unwrap();
        assert_eq!(
            signal(&victim.uid().unwrap(), "etcd", Signal::SIGKILL),
            1,
            "killing {}",
            victim.name_any()
        );
        let before = member_pods(&ns, name).await.into_keys().collect::<Vec<_>>();
        testkit::stays_for(
            Duration::from_secs(45),
            "no member Pod created or deleted while the operator is cut off",
            || async {
                let now = member_pods(&ns, name).await.into_keys().collect::<Vec<_>>();
                let reason =
                    condition(&etcd_cluster(&ns, name)["status"], "Degraded")["reason"].clone();
                if now != before {
                    return Err(format!("{before:?} became {now:?}"));
                }
                if reason != "EtcdUnreachable" {
                    return Err(format!("Degraded reason {reason}"));
                }
                Ok(())
            },
        )
        .await;
        println!(
            "cut off: {} killed, size 5 asked; the Pods stayed {before:?}, EtcdUnreachable",
            victim.name_any()
        );
        drop(cut);
        etcd_settled(&ns, name, 5).await;
        assert!(
            !member_pods(&ns, name)
                .await
                .contains_key(&victim.name_any()),
            "the dead member was replaced"
        );
        read_back(
            &store,
            writers,
            "blind/",
            "etcd while the operator could not reach it",
        )
        .await;
    }

    /// An iptables rule in the network namespaces of every operator Pod, removed when dropped
    /// (a failed test leaves no operator cut off for the next ones). The namespace is entered
    /// through the Pod's sandbox (`pause`), there while the operator's container restarts.
    struct OperatorCut {
        uids: Vec<String>,
        rule: Vec<String>,
    }

    impl OperatorCut {
        async fn new(rule: &[&str]) -> OperatorCut {
            let client = testkit::client().await;
            let uids: Vec<String> = Api::<Pod>::namespaced(client, OPERATOR_NAMESPACE)
                .list(&ListParams::default().labels("control-plane=controller-manager"))
                .await
                .unwrap()
                .items
                .iter()
                .map(|pod| pod.uid().unwrap())
                .collect();
            let rule: Vec<String> = rule.iter().map(|s| (*s).to_owned()).collect();
            for uid in &uids {
                assert!(
                    Self::iptables(uid, "-I", &rule),
                    "adding {rule:?} in operator Pod {uid}"
                );
            }
            OperatorCut { uids, rule }
        }

        /// Every operator Pod cut off from the API server (the `kubernetes` Service its
        /// in-cluster configuration names): its requests and watches go unanswered.
        async fn from_the_api_server() -> OperatorCut {
            let services: Api<k8s_openapi::api::core::v1::Service> =
                Api::namespaced(testkit::client().await, "default");
            let address = services
                .get("kubernetes")
                .await
                .unwrap()
                .spec
                .unwrap()
                .cluster_ip
                .unwrap();
            let rule = [
                "OUTPUT", "-d", &address, "-p", "tcp", "--dport", "443", "-j", "DROP",
            ];
            OperatorCut::new(&rule).await
        }

        fn iptables(uid: &str, action: &str, rule: &[String]) -> bool {
            let args: Vec<&str> = std::iter::once(action)
                .chain(rule.iter().map(String::as_str))
                .collect();
            testkit::node_process::iptables_in_pod(uid, "pause", &args)
        }
    }

    impl Drop for OperatorCut {
        fn drop(&mut self) {
            for uid in &self.uids {
                if !Self::iptables(uid, "-D", &self.rule) {
                    eprintln!("could not remove {:?} in operator Pod {uid}", self.rule);
                }
            }
        }
    }

    /// How long the operator is kept from the API server in the rows below: past its renew
    /// deadline (10 s), so the leader has stepped down, and long enough for a blind action to
    /// show.
    const API_CUT: Duration = Duration::from_secs(45);
    /// The part of [`API_CUT`] in which the operator may still finish what was on the wire when
    /// the cut came, and its leader steps down.
    const STEPPING_DOWN: Duration = Duration::from_secs(15);

    /// The leader election Lease's holder and last renewal: unchanged while the cut holds, which
    /// shows the operator really is cut off.
    async fn lease_record() -> Option<(String, String)> {
        let leases: Api<Lease> = Api::namespaced(testkit::client().await, OPERATOR_NAMESPACE);
        let spec = leases.get("app-operator.example.com").await.ok()?.spec?;
        Some((
            spec.holder_identity.unwrap_or_default(),
            spec.renew_time.map(|t| t.0.to_string()).unwrap_or_default(),
        ))
    }

    /// Watches, for the rest of [`API_CUT`] after [`STEPPING_DOWN`], that the Lease is not
    /// renewed and `unchanged` holds, failing with `goal` otherwise.
    async fn blind_for_the_cut<F, Fut>(goal: &str, unchanged: F)
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<(), String>>,
    {
        // The leader's last renewals and what it had on the wire may land meanwhile; what is
        // checked starts after.
        tokio::time::sleep(STEPPING_DOWN).await;
        let lease = lease_record().await;
        testkit::stays_for(API_CUT - STEPPING_DOWN, goal, || async {
            let now = lease_record().await;
            if now != lease {
                return Err(format!(
                    "the Lease renewed: {lease:?} became {now:?} (the cut did not hold)"
                ));
            }
            unchanged().await
        })
        .await;
    }

    /// EtcdCluster `name` of 3 members under writes (keys under `prefix`), asked for 5, once
    /// etcd lists a fourth member: a scale-out in flight.
    async fn scaling_out_3_to_5(
        ns: &TestNamespace,
        name: &str,
        prefix: &str,
    ) -> (
        std::sync::Arc<testkit::etcd_store::EtcdStore>,
        testkit::history::Writers,
    ) {
        let spec = json!({ "size": 3, "version": "3.6.16" });
        let (store, writers) = etcd_with_writers(ns, name, spec, prefix).await;
        merge_patch(ns, "etcd", name, &json!({ "spec": { "size": 5 } }));
        eventually(TIMEOUT, "a fourth member added", || async {
            (member_ids(&store).await.len() > 3).then_some(())
        })
        .await;
        (store, writers)
    }

    /// Every operator Pod cut off from the API server right after a scale-out 3 → 5 added its
    /// first member to etcd (the operator can still reach etcd): until it can see the Pods
    /// again it changes no membership (the leader steps down; nobody acts on a cache it can no
    /// longer refresh). Healed, it finishes the scale-out and every acknowledged write is kept.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_operator_cut_from_the_api_server_mid_scale_out_changes_no_member_blind() {
        let ns = TestNamespace::new("real-etcd-api-cut").await;
        let name = "unseen";
        let (store, writers) = scaling_out_3_to_5(&ns, name, "unseen/").await;
        let cut = OperatorCut::from_the_api_server().await;
        let at_cut = member_ids(&store).await;
        // What was already on the wire when the cut came may still land; no removal, and
        // nothing at all once the leader has stepped down.
        blind_for_the_cut(
            "no etcd membership change by an operator cut from the API server",
            || async {
                let now = member_ids(&store).await;
                let removed: Vec<_> = at_cut.keys().filter(|m| !now.contains_key(*m)).collect();
                if removed.is_empty() && now.len() <= at_cut.len() + 1 {
                    Ok(())
                } else {
                    Err(format!("{at_cut:?} became {now:?}"))
                }
            },
        )
        .await;
        let settled = member_ids(&store).await;
        println!(
            "cut from the API server mid scale-out: members {:?} at the cut, {:?} for {API_CUT:?}",
            at_cut.keys().collect::<Vec<_>>(),
            settled.keys().collect::<Vec<_>>()
        );
        drop(cut);
        etcd_settled(&ns, name, 5).await;
        read_back(
            &store,
            writers,
            "unseen/",
            "etcd while the operator could not reach the API server",
        )
        .await;
    }

    /// Every operator Pod cut off from the API server while a SampleDB's upgrade Job (15 → 17)
    /// runs: healed, the operator takes the upgrade up where its status left it, and the
    /// upgraded database holds every acknowledged row.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_sampledb_upgrade_with_the_operator_cut_from_the_api_server_keeps_every_row() {
        upgraded_15_to_17_through(
            "real-sampledb-api-cut",
            "the operator cut from the API server",
            || async {
                let cut = OperatorCut::from_the_api_server().await;
                blind_for_the_cut("the operator cut from the API server", || async { Ok(()) })
                    .await;
                drop(cut);
                format!("the operator cut from the API server for {API_CUT:?}")
            },
        )
        .await;
    }

    /// Every operator process killed (SIGKILL) twice under writes: while a scale-out 3 → 5 adds
    /// members, and after it removed a dead member but before its replacement joined. The
    /// restarted operator takes each up from what etcd and the Pods say; every write is kept.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn etcd_keeps_every_write_when_the_operator_dies_mid_scale_out_and_mid_replacement() {
        use nix::sys::signal::Signal;

        let ns = TestNamespace::new("real-etcd-operator-killed").await;
        let name = "orphaned";
        let (store, writers) = scaling_out_3_to_5(&ns, name, "orphaned/").await;
        println!(
            "mid scale-out: {} operator processes killed",
            kill_operator().await
        );
        etcd_settled(&ns, name, 5).await;

        let dead = etcd_members_leader_first(&ns, name).await.remove(1);
        let killed = testkit::node_process::signal(&dead.uid().unwrap(), "etcd", Signal::SIGKILL);
        assert_eq!(killed, 1, "{}'s etcd process", dead.name_any());
        eventually(
            Duration::from_secs(120),
            "the dead member removed",
            || async {
                let ids = member_ids(&store).await;
                (!ids.contains_key(&dead.name_any())).then_some(())
            },
        )
        .await;
        println!(
            "mid replacement: {} operator processes killed",
            kill_operator().await
        );
        etcd_settled(&ns, name, 5).await;
        read_back(
            &store,
            writers,
            "orphaned/",
            "etcd operator killed mid scale-out and mid replacement",
        )
        .await;
    }

    /// The backups volume full (a 1 MiB filesystem over it on the node, filled): the scheduled
    /// backup fails and says why (no readable dump, 0 KiB free: in the condition and a Warning
    /// event), leaves no partial dump, and the database keeps serving every row; once
    /// space is freed the next backup succeeds and holds every row.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_full_backups_volume_fails_the_backup_clearly_and_the_next_one_succeeds_once_freed() {
        let ns = TestNamespace::new("real-sampledb-full").await;
        let name = "cramped";
        let every_15_s = json!({
            "backup": { "schedule": "*/15 * * * * *" }, "deletion": { "policy": "Delete" }
        });
        let history = sampledb_with_rows(&ns, &sampledb(name, "15", every_15_s)).await;
        let backups = volume_on_node(&ns, &format!("{name}-backups")).await;
        let small = SmallFilesystem::mount(&backups, "1m");
        let filler = backups.join("filler");
        // Fills it: the write stops at "No space left on device".
        let _ = std::fs::write(&filler, vec![0u8; 2 << 20]);
        let message = backup_failed_from_now(&ns, name, "a backup failed for want of space").await;
        println!("the backups volume full: {message}");
        // pg_dump 15 exits 0 having written nothing to a full volume; the check after it fails.
        assert!(message.contains("is not a readable archive"), "{message}");
        assert!(message.contains("0 KiB free on its volume"), "{message}");
        let events = kubectl_ok(&[
            "get",
            "events",
            "-n",
            &ns.name,
            "--field-selector",
            "reason=BackupFailed",
            "-o",
            "jsonpath={.items[*].message}",
        ]);
        assert!(
            events.contains("0 KiB free on its volume"),
            "events: {events}"
        );
        let left: Vec<String> = std::fs::read_dir(&backups)
            .unwrap()
            .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
            .filter(|file| file != "filler")
            .collect();
        assert!(left.is_empty(), "left in the full volume: {left:?}");
        let serving = sampledb_status(&ns, name);
        assert_eq!(condition(&serving, "Ready")["status"], "True", "{serving}");
        sampledb_read_back(
            &ns,
            name,
            &history,
            "sampledb serving with its backups volume full",
        )
        .await;

        std::fs::remove_file(&filler).unwrap();
        let job = backup_after_now(&ns, name).await;
        println!("space freed: backup {job} succeeded");
        let file = format!("{job}.dump");
        let scenario = "sampledb backed up once its full backups volume had space again";
        recreated_from(&ns, name, &file, &history, scenario).await;
        delete_sampledb(&ns, name);
        drop(small);
    }

    /// A member's PersistentVolumeClaim deleted under writes (kept by its Pod meanwhile): the
    /// member, whose data is going, is replaced while the others hold a quorum; the new member
    /// gets a claim of its own, and every acknowledged write is kept.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_member_whose_claim_is_deleted_is_replaced_and_every_write_kept() {
        use k8s_openapi::api::core::v1::PersistentVolumeClaim;

        let ns = TestNamespace::new("real-etcd-claim").await;
        let name = "claimed";
        let (store, writers) = etcd_with_writers(&ns, name, on_volumes(3), "claimed/").await;
        let victim = etcd_members_leader_first(&ns, name)
            .await
            .remove(1)
            .name_any();
        kubectl_ok(&["delete", "pvc", &victim, "-n", &ns.name, "--wait=false"]);
        eventually(
            Duration::from_secs(300),
            &format!("{victim} replaced by a member with a claim of its own"),
            || async {
                let ids = member_ids(&store).await;
                let claims = ns.api::<PersistentVolumeClaim>();
                let claims: Vec<String> = claims
                    .list(&ListParams::default())
                    .await
                    .ok()?
                    .items
                    .iter()
                    .map(|c| c.name_any())
                    .collect();
                let replaced = !ids.contains_key(&victim)
                    && !claims.contains(&victim)
                    && ids.len() == 3
                    && ids.keys().all(|member| claims.contains(member));
                replaced.then_some(())
            },
        )
        .await;
        etcd_settled(&ns, name, 3).await;
        read_back(&store, writers, "claimed/", "etcd member's claim deleted").await;
    }
}

/// A small filesystem (tmpfs) mounted over a directory of the node, unmounted when dropped.
struct SmallFilesystem(std::path::PathBuf);

impl SmallFilesystem {
    fn mount(dir: &std::path::Path, size: &str) -> SmallFilesystem {
        let options = format!("size={size},mode=0777");
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &options, "tmpfs"])
            .arg(dir)
            .status()
            .unwrap();
        assert!(
            status.success(),
            "mounting a {size} tmpfs on {}",
            dir.display()
        );
        SmallFilesystem(dir.to_owned())
    }
}

impl Drop for SmallFilesystem {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

/// Scenarios that restart the node, stopping every Pod of every test: `make chaos` runs them
/// alone, after the others (`make test` skips `node_restart::`).
mod node_restart {
    use super::*;

    /// The node restarted (kubelet and containerd stopped, every container killed, both started
    /// again) under two writing clients: a cluster whose members keep their data on
    /// PersistentVolumes comes back with every acknowledged write and the same member IDs (each
    /// member's Pod created again on its claim); one on emptyDir, whose data went with its Pods,
    /// says it is lost and how to restore it from a backup.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn after_a_node_restart_members_on_volumes_come_back_and_those_on_empty_dir_say_restore()
    {
        let ns = TestNamespace::new("real-node-restart").await;

        apply(
            &ns,
            &json!({
                "apiVersion": "etcd.database.coreos.com/v1beta2", "kind": "EtcdCluster",
                "metadata": { "name": "ephemeral" }, "spec": { "size": 1, "version": "3.6.16" }
            }),
        );
        let (store, writers) = etcd_with_writers(&ns, "durable", on_volumes(3), "durable/").await;
        etcd_settled(&ns, "ephemeral", 1).await;
        let ids = member_ids(&store).await;
        let pods_before = member_pods(&ns, "durable").await;
        eventually(TIMEOUT, "some keys written", || async {
            use testkit::history::Store;
            (store.read_all("durable/").await.ok()?.len() >= 200).then_some(())
        })
        .await;

        let kubeconfig = testkit::kubeconfig();
        let layout = local_cluster::Layout {
            state_dir: kubeconfig.parent().unwrap().to_owned(),
        };
        let started = Instant::now();
        local_cluster::node::restart(&layout, Duration::from_secs(120))
            .await
            .unwrap();
        println!("node restarted in {:.0} s", started.elapsed().as_secs_f64());

        // The status said Ready before the restart: first see the Pods created again.
        eventually(
            Duration::from_secs(600),
            "every member's Pod created again under its name, Ready",
            || async {
                let pods = member_pods(&ns, "durable").await;
                let renewed = pods.keys().eq(pods_before.keys())
                    && pods.iter().all(|(name, (uid, ready))| {
                        *ready && pods_before.get(name).is_some_and(|(old, _)| old != uid)
                    });
                renewed.then_some(())
            },
        )
        .await;
        etcd_settled(&ns, "durable", 3).await;
        println!(
            "the cluster on volumes Ready with 3 members {:.0} s after the restart began",
            started.elapsed().as_secs_f64()
        );
        assert_eq!(
            member_ids(&store).await,
            ids,
            "the same members, by name and ID"
        );
        read_back(
            &store,
            writers,
            "durable/",
            "etcd on volumes through a node restart",
        )
        .await;

        let lost = eventually(
            Duration::from_secs(300),
            "the cluster on emptyDir Degraded (QuorumLost), saying how to restore",
            || async {
                let degraded = condition(&etcd_cluster(&ns, "ephemeral")["status"], "Degraded");
                let message = degraded["message"].as_str()?.to_owned();
                (degraded["reason"] == "QuorumLost" && message.contains("spec.restore.backupName"))
                    .then_some(message)
            },
        )
        .await;
        println!("the cluster on emptyDir: {lost}");
    }
}
