//! GitOps health: Flux judges an object by kstatus's rules (sigs.k8s.io/cli-utils), Argo CD by a
//! Lua health check (docs/gitops.md gives one). Every version of each kind that a watch saw
//! through its lifecycle (created, Ready, changed, Ready again; refused, then retried or deleted)
//! is judged by kstatus itself and by the documented Lua check run as Argo CD runs it (the
//! `gitops-health` tool, built from the Go modules), and each verdict must be ours: healthy when
//! Ready for the object's generation (a Sample, which has no conditions: when its generation is
//! observed), failed while Stalled for it, in progress otherwise, also before the operator's
//! first status (the CRDs default it to `observedGeneration: 0`).

// Test code: a failed expectation is a failed test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use app_operator::api::{
    AppCluster, EtcdBackup, EtcdCluster, MyApp, RECONCILE_REQUESTED_AT, Sample, SampleDB,
};
use app_operator::manager::ControllerKind;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use serde_json::{Value, json};
use testkit::watch::Watch;
use testkit::{TestNamespace, eventually, object, tools};

/// Every version of every object of kind `K` in the namespace, as the API server sent it.
fn record<K: Resource<DynamicType = ()>>(
    ns: &TestNamespace,
    client: &kube::Client,
    versions: &Arc<Mutex<Vec<Value>>>,
) -> Watch {
    let resource = kube::discovery::ApiResource::erase::<K>(&());
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns.name, &resource);
    let stream = watcher(api, watcher::Config::default()).default_backoff();
    let versions = versions.clone();
    Watch::spawn(&format!("the {}s", K::kind(&())), stream, move |event| {
        if let watcher::Event::Apply(object) | watcher::Event::InitApply(object) = event {
            versions
                .lock()
                .unwrap()
                .push(serde_json::to_value(&object).unwrap());
        }
        async {}
    })
}

fn condition_true(object: &Value, type_: &str) -> bool {
    object["status"]["conditions"]
        .as_array()
        .is_some_and(|all| {
            all.iter()
                .any(|c| c["type"] == type_ && c["status"] == "True")
        })
}

/// Our reading of an object, in kstatus's words.
fn ours(object: &Value) -> &'static str {
    let generation = &object["metadata"]["generation"];
    if &object["status"]["observedGeneration"] != generation {
        "InProgress"
    } else if object["kind"] == "Sample" {
        "Current"
    } else if condition_true(object, "Stalled") {
        "Failed"
    } else if condition_true(object, "Ready") {
        "Current"
    } else {
        "InProgress"
    }
}

/// The verdict of `gitops-health <mode>` on each object, in order: `(status, message)`.
fn judged(mode: &[&str], objects: &[Value]) -> Vec<(String, String)> {
    let list = json!({ "apiVersion": "v1", "kind": "List", "items": objects }).to_string();
    let mut child = Command::new(tools().bin("gitops-health"))
        .args(mode)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(list.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let (status, message) = line.split_once('\t').unwrap_or((line, ""));
            (status.to_owned(), message.to_owned())
        })
        .collect()
}

/// kstatus and the Argo CD check of docs/gitops.md judge every version as we do: how many
/// versions got each of our verdicts.
fn verdicts_agree(versions: &[Value]) -> std::collections::BTreeMap<&'static str, usize> {
    let kstatus = judged(&["kstatus"], versions);
    let script = argocd_health_check();
    let argocd = judged(&["argocd", script.to_str().unwrap()], versions);
    std::fs::remove_file(&script).unwrap();
    assert_eq!(
        (kstatus.len(), argocd.len()),
        (versions.len(), versions.len())
    );
    let mut seen = std::collections::BTreeMap::new();
    let mut mismatches = Vec::new();
    for ((object, (kstatus, message)), (argocd, _)) in versions.iter().zip(&kstatus).zip(&argocd) {
        let expected = ours(object);
        *seen.entry(expected).or_default() += 1;
        let argocd_expected = match expected {
            "Current" => "Healthy",
            "Failed" => "Degraded",
            _ => "Progressing",
        };
        if kstatus != expected || argocd != argocd_expected {
            mismatches.push(format!(
                "{} {} rv {}: kstatus {kstatus} ({message}), Argo CD {argocd}, we say {expected}; status {}",
                object["kind"],
                object["metadata"]["name"],
                object["metadata"]["resourceVersion"],
                object["status"]
            ));
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
    eprintln!(
        "kstatus and the Argo CD check agreed on {} versions: {seen:?}",
        versions.len()
    );
    seen
}

/// The Argo CD health check of docs/gitops.md: the Lua under the MyApp key, written to a file.
fn argocd_health_check() -> std::path::PathBuf {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/gitops.md"))
        .unwrap();
    let script: Vec<&str> = doc
        .lines()
        .skip_while(|line| {
            !line.ends_with(
                "resource.customizations.health.example.com_MyApp: &app-operator-health |",
            )
        })
        .skip(1)
        .take_while(|line| line.starts_with("    "))
        .map(|line| &line[4..])
        .collect();
    assert!(script.len() > 10, "no Lua check in docs/gitops.md");
    let path = std::env::temp_dir().join(format!("argocd-health-{}.lua", std::process::id()));
    std::fs::write(&path, script.join("\n")).unwrap();
    path
}

async fn ready_for_generation<K>(api: &Api<K>, name: &str, generation: i64)
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + serde::Serialize,
    K: std::fmt::Debug,
{
    eventually(
        support::etcd::SLOW,
        &format!("{name} Ready for generation {generation}"),
        || async {
            let object = serde_json::to_value(api.get(name).await.ok()?).ok()?;
            (ours(&object) == "Current" && object["metadata"]["generation"] == generation)
                .then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kstatus_reads_each_kind_healthy_exactly_when_it_is_ready_for_its_generation() {
    let ns = TestNamespace::new("gitops").await;
    let policy = support::refuse_services(&ns).await;
    let _operator = support::start(
        &ns,
        &[
            ControllerKind::Myapp,
            ControllerKind::Appcluster,
            ControllerKind::Sampledb,
        ],
    )
    .await;
    let client = testkit::client().await;
    let versions = Arc::new(Mutex::new(Vec::new()));
    let watches = [
        record::<MyApp>(&ns, &client, &versions),
        record::<AppCluster>(&ns, &client, &versions),
        record::<SampleDB>(&ns, &client, &versions),
    ];

    let apps = ns.api::<MyApp>();
    let clusters = ns.api::<AppCluster>();
    let databases = ns.api::<SampleDB>();
    let post = PostParams::default();
    apps.create(
        &post,
        &object(json!({ "apiVersion": "example.com/v1", "kind": "MyApp",
        "metadata": { "name": "web" }, "spec": { "image": "nginx:1.27", "replicas": 2 } })),
    )
    .await
    .unwrap();
    clusters
        .create(
            &post,
            &object(
                json!({ "apiVersion": "demo.demo.io/v1", "kind": "AppCluster",
            "metadata": { "name": "pods" }, "spec": { "size": 2 } }),
            ),
        )
        .await
        .unwrap();
    databases
        .create(
            &post,
            &object(json!({ "apiVersion": "db.example.com/v1alpha1",
            "kind": "SampleDB", "metadata": { "name": "db" }, "spec": { "version": "15.8" } })),
        )
        .await
        .unwrap();
    apps.create(
        &post,
        &object(json!({ "apiVersion": "example.com/v1", "kind": "MyApp",
        "metadata": { "name": "refused" }, "spec": { "image": "nginx:1.27" } })),
    )
    .await
    .unwrap();
    ready_for_generation(&apps, "web", 1).await;
    ready_for_generation(&clusters, "pods", 1).await;
    ready_for_generation(&databases, "db", 1).await;
    eventually(support::TIMEOUT, "MyApp refused Stalled", || async {
        let object = serde_json::to_value(apps.get("refused").await.ok()?).ok()?;
        (ours(&object) == "Failed").then_some(())
    })
    .await;

    let merge = |value: Value| Patch::Merge(value);
    apps.patch(
        "web",
        &PatchParams::default(),
        &merge(json!({ "spec": { "image": "nginx:1.28" } })),
    )
    .await
    .unwrap();
    clusters
        .patch(
            "pods",
            &PatchParams::default(),
            &merge(json!({ "spec": { "size": 3 } })),
        )
        .await
        .unwrap();
    ready_for_generation(&apps, "web", 2).await;
    ready_for_generation(&clusters, "pods", 2).await;
    support::admit_services_again(&ns, &policy).await;
    apps.patch(
        "refused",
        &PatchParams::default(),
        &merge(json!({ "metadata": { "annotations": {
            RECONCILE_REQUESTED_AT: "2026-11-28T04:00:00Z"
        } } })),
    )
    .await
    .unwrap();
    ready_for_generation(&apps, "refused", 1).await;
    for watch in watches {
        watch.stop().await;
    }

    let seen = verdicts_agree(&versions.lock().unwrap());
    // Each verdict occurred: the comparison covered progress, health and failure.
    for verdict in ["InProgress", "Current", "Failed"] {
        assert!(seen.get(verdict).is_some_and(|n| *n > 0), "{seen:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kstatus_reads_etcd_clusters_backups_and_samples_healthy_exactly_when_they_are() {
    let setup = support::etcd::setup(
        "gitops-etcd",
        &[
            ControllerKind::Etcdcluster,
            ControllerKind::Etcdbackup,
            ControllerKind::Sample,
        ],
    )
    .await;
    let ns = &setup.ns;
    let client = testkit::client().await;
    let versions = Arc::new(Mutex::new(Vec::new()));
    let watches = [
        record::<EtcdCluster>(ns, &client, &versions),
        record::<EtcdBackup>(ns, &client, &versions),
        record::<Sample>(ns, &client, &versions),
    ];
    let clusters = ns.api::<EtcdCluster>();
    let backups = ns.api::<EtcdBackup>();
    let samples = ns.api::<Sample>();
    let post = PostParams::default();
    clusters
        .create(
            &post,
            &object(json!({ "apiVersion": "etcd.database.coreos.com/v1beta2",
            "kind": "EtcdCluster", "metadata": { "name": "etcd" }, "spec": { "size": 1 } })),
        )
        .await
        .unwrap();
    samples
        .create(
            &post,
            &object(
                json!({ "apiVersion": "example.com/v1alpha1", "kind": "Sample",
            "metadata": { "name": "sample" }, "testString": "first" }),
            ),
        )
        .await
        .unwrap();
    ready_for_generation(&clusters, "etcd", 1).await;
    ready_for_generation(&samples, "sample", 1).await;
    backups
        .create(
            &post,
            &object(json!({ "apiVersion": "etcd.database.coreos.com/v1beta2",
            "kind": "EtcdBackup", "metadata": { "name": "once" },
            "spec": { "etcdCluster": { "name": "etcd" } } })),
        )
        .await
        .unwrap();
    support::etcd::patch_spec(ns, "etcd", json!({ "size": 3 })).await;
    samples
        .patch(
            "sample",
            &PatchParams::default(),
            &Patch::Merge(json!({ "testString": "second" })),
        )
        .await
        .unwrap();
    ready_for_generation(&backups, "once", 1).await;
    ready_for_generation(&clusters, "etcd", 2).await;
    ready_for_generation(&samples, "sample", 2).await;
    for watch in watches {
        watch.stop().await;
    }

    let seen = verdicts_agree(&versions.lock().unwrap());
    for verdict in ["InProgress", "Current"] {
        assert!(seen.get(verdict).is_some_and(|n| *n > 0), "{seen:?}");
    }
}
