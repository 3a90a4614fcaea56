//! AppCluster on a real control plane: the tutorial's walkthrough (seed 000, section 6), scaling
//! without overshoot, and the scale subresource.

// Test code: a failed expectation is a failed test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use app_operator::api::AppCluster;
use app_operator::manager::ControllerKind;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use support::{PodCount, TIMEOUT, rejection};
use testkit::{TestNamespace, eventually, kubectl_ok, object, running_and_ready};

const SAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../config/samples/demo_v1_appcluster.yaml"
);

/// Waits until exactly `count` Pods labelled `app=<name>` exist, all Running and Ready, and
/// `status.ready == count`.
async fn settled(ns: &TestNamespace, name: &str, count: usize) -> Vec<Pod> {
    let pods = ns.api::<Pod>();
    let clusters = ns.api::<AppCluster>();
    eventually(
        TIMEOUT,
        &format!("{count} ready pods and status.ready == {count}"),
        || async {
            let list = pods
                .list(&ListParams::default().labels(&format!("app={name}")))
                .await
                .ok()?;
            let ready = clusters.get(name).await.ok()?.status?.ready;
            let all_ready = list.items.iter().all(running_and_ready);
            (list.items.len() == count && all_ready && usize::try_from(ready).ok()? == count)
                .then_some(list.items)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tutorial_walkthrough() {
    let ns = TestNamespace::new("appcluster-tutorial").await;
    let _operator = support::start(&ns, &[ControllerKind::Appcluster]).await;
    let name = "appcluster-sample";

    // 6.2: apply the sample (size: 2) → two Running, Ready Pods named <name>-pod-*, status.ready 2.
    kubectl_ok(&["apply", "-n", &ns.name, "-f", SAMPLE]);
    let pods = settled(&ns, name, 2).await;
    for pod in &pods {
        assert!(
            pod.name_any().starts_with("appcluster-sample-pod-"),
            "{}",
            pod.name_any()
        );
        assert_eq!(pod.owner_references()[0].kind, "AppCluster");
    }
    // `-o wide` names the image the Pods run.
    let wide = kubectl_ok(&["get", "appc", name, "-n", &ns.name, "-o", "wide"]);
    let image = pods[0].spec.as_ref().unwrap().containers[0].image.clone();
    assert!(
        wide.lines().nth(1).is_some_and(|row| row
            .split_whitespace()
            .any(|cell| Some(cell) == image.as_deref())),
        "{wide}"
    );

    // 6.5: delete one Pod → it is replaced, status.ready returns to 2.
    let deleted = pods[0].name_any();
    kubectl_ok(&["delete", "pod", &deleted, "-n", &ns.name]);
    let pods = settled(&ns, name, 2).await;
    assert!(
        pods.iter().all(|p| p.name_any() != deleted),
        "the deleted Pod is still listed"
    );

    // 6.6: delete the AppCluster → no Pods with app=<name> remain.
    kubectl_ok(&["delete", "appcluster", name, "-n", &ns.name]);
    let pod_api = ns.api::<Pod>();
    eventually(TIMEOUT, "the Pods to be garbage-collected", || async {
        pod_api
            .list(&ListParams::default().labels(&format!("app={name}")))
            .await
            .ok()?
            .items
            .is_empty()
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_0_to_50_never_overshoots_and_50_to_3_settles_at_3() {
    let ns = TestNamespace::new("appcluster-scale").await;
    let _operator = support::start(&ns, &[ControllerKind::Appcluster]).await;
    let clusters = ns.api::<AppCluster>();
    let cluster: AppCluster = object(json!({
        "apiVersion": "demo.demo.io/v1", "kind": "AppCluster", "metadata": { "name": "big" }, "spec": { "size": 0 }
    }));
    clusters
        .create(&Default::default(), &cluster)
        .await
        .unwrap();

    // A watch that has synced before the first change counts the Pods that are not terminating.
    let count = PodCount::start(ns.api::<Pod>(), "app=big").await;

    let scale = |size: i32| {
        let clusters = clusters.clone();
        async move {
            let patch = json!({ "spec": { "size": size } });
            clusters
                .patch("big", &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .unwrap();
        }
    };
    scale(50).await;
    settled(&ns, "big", 50).await;
    assert!(
        count.most() <= 50,
        "{} pods existed at once for size 50",
        count.most()
    );

    count.reset_fewest();
    scale(3).await;
    settled(&ns, "big", 3).await;
    assert_eq!(
        count.fewest(),
        3,
        "scaling down to 3 must never leave fewer than 3 pods"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_scale_works_and_a_negative_size_is_rejected() {
    let ns = TestNamespace::new("appcluster-kubectl").await;
    let _operator = support::start(&ns, &[ControllerKind::Appcluster]).await;
    kubectl_ok(&["apply", "-n", &ns.name, "-f", SAMPLE]);
    settled(&ns, "appcluster-sample", 2).await;
    kubectl_ok(&[
        "scale",
        "appcluster/appcluster-sample",
        "--replicas=4",
        "-n",
        &ns.name,
    ]);
    settled(&ns, "appcluster-sample", 4).await;
    let columns = kubectl_ok(&["get", "appc", "appcluster-sample", "-n", &ns.name]);
    assert!(
        ["SIZE", "READY PODS", "READY", "STATUS", "AGE"]
            .iter()
            .all(|column| columns.contains(column))
            && columns.contains("True"),
        "{columns}"
    );

    let resource = kube::core::ApiResource::erase::<AppCluster>(&());
    let raw: Api<kube::core::DynamicObject> =
        Api::namespaced_with(ns.client.clone(), &ns.name, &resource);
    let negative: kube::core::DynamicObject = object(json!({
        "apiVersion": "demo.demo.io/v1", "kind": "AppCluster", "metadata": { "name": "negative" }, "spec": { "size": -1 }
    }));
    let error = rejection(raw.create(&Default::default(), &negative).await);
    assert_eq!(error.code, 422);
    assert!(error.message.contains("spec.size"), "{}", error.message);
    ns.api::<AppCluster>()
        .delete("appcluster-sample", &DeleteParams::default())
        .await
        .unwrap();
}

/// A large size is reached in passes of at most 500 creates, each starting small (slow start),
/// and never with a Pod too many.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_0_to_2000_creates_in_bounded_passes() {
    let ns = TestNamespace::new("appcluster-burst").await;
    let _operator = support::start(&ns, &[ControllerKind::Appcluster]).await;
    let count = PodCount::start(ns.api::<Pod>(), "app=huge").await;
    let cluster: AppCluster = object(json!({
        "apiVersion": "demo.demo.io/v1", "kind": "AppCluster", "metadata": { "name": "huge" }, "spec": { "size": 2000 }
    }));
    ns.api::<AppCluster>()
        .create(&Default::default(), &cluster)
        .await
        .unwrap();
    eventually(
        std::time::Duration::from_secs(240),
        "2000 pods of huge ready",
        || async {
            let ready = ns.api::<AppCluster>().get("huge").await.ok()?.status?.ready;
            (ready == 2000).then_some(())
        },
    )
    .await;
    assert!(
        count.most() <= 2000,
        "{} pods existed at once",
        count.most()
    );
    // Each pass announces what it created: "Created N pod(s) for size 2000".
    let events = ns.api::<k8s_openapi::api::events::v1::Event>();
    let list = events.list(&ListParams::default()).await.unwrap();
    let passes: Vec<usize> = list
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some("PodsCreated"))
        .filter_map(|e| {
            let note = e.note.as_deref()?;
            note.strip_prefix("Created ")?
                .split(' ')
                .next()?
                .parse()
                .ok()
        })
        .collect();
    assert_eq!(passes.iter().sum::<usize>(), 2000, "passes {passes:?}");
    assert!(
        passes.len() >= 4 && passes.iter().all(|n| *n <= 500),
        "creates must come in passes of at most 500: {passes:?}"
    );
}

/// A Pod that keeps crashing a moment after it became Ready (kwok's chaos stage fails every Pod
/// this test labels) is replaced after 1 s, 2 s, 4 s, … — not in a hot loop — and the cluster
/// recovers on its own once Pods stop crashing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_looping_pod_is_replaced_with_growing_delays() {
    use kube::runtime::{WatchStreamExt, watcher};
    use testkit::watch::Watch;

    let ns = TestNamespace::new("appcluster-crash").await;
    let _operator = support::start(&ns, &[ControllerKind::Appcluster]).await;
    let cluster: AppCluster = object(json!({
        "apiVersion": "demo.demo.io/v1", "kind": "AppCluster", "metadata": { "name": "crashy" }, "spec": { "size": 1 }
    }));
    ns.api::<AppCluster>()
        .create(&Default::default(), &cluster)
        .await
        .unwrap();

    // Every Pod that reaches Ready gets the chaos label: kwok then fails it at once. The crasher
    // records each crashed Pod's name and creation time (whole seconds, set by the API server).
    let pods = ns.api::<Pod>();
    let crashed = std::sync::Arc::new(std::sync::Mutex::new(Vec::<(String, i64)>::new()));
    let events = watcher(
        pods.clone(),
        watcher::Config::default().labels("app=crashy"),
    )
    .default_backoff()
    .applied_objects();
    let crasher = Watch::spawn("the Pods app=crashy", events, {
        let (pods, crashed) = (pods.clone(), crashed.clone());
        move |pod: Pod| {
            let (pods, crashed) = (pods.clone(), crashed.clone());
            async move {
                let crash = json!({ "metadata": {
                    "labels": { "pod-container-running-failed.stage.kwok.x-k8s.io": "true" },
                    "annotations": {
                        "pod-container-running-failed.stage.kwok.x-k8s.io/delay": "0s",
                        "pod-container-running-failed.stage.kwok.x-k8s.io/jitter-delay": "0s"
                    }
                }});
                let name = pod.name_any();
                let seen = crashed.lock().unwrap().iter().any(|(n, _)| *n == name);
                if running_and_ready(&pod) && !seen {
                    // Recorded once the patch is in: the crasher is stopped at any point, and a
                    // Pod recorded but never crashed would be taken for a crashed one left running.
                    pods.patch(&name, &PatchParams::default(), &Patch::Merge(&crash))
                        .await
                        .unwrap();
                    let created = pod.creation_timestamp().unwrap().0.as_second();
                    crashed.lock().unwrap().push((name, created));
                }
            }
        }
    });
    // The first Pod and four replacements: enough to see three delays.
    eventually(
        std::time::Duration::from_secs(180),
        "five Pods crashed",
        || async {
            crasher.assert_alive();
            (crashed.lock().unwrap().len() >= 5).then_some(())
        },
    )
    .await;
    crasher.stop().await;
    let crashed = crashed.lock().unwrap().clone();

    // The first replacement goes at once; each next one waits 1 s, 2 s, 4 s after the one before
    // (the delay runs from the moment the one before was created). Creation times are whole
    // seconds, and whole seconds a delay d apart are at least d apart; without a backoff each
    // round takes well under a second.
    let gaps: Vec<i64> = crashed[1..5]
        .windows(2)
        .map(|pair| pair[1].1 - pair[0].1)
        .collect();
    assert!(
        gaps.iter().zip([1, 2, 4]).all(|(gap, delay)| *gap >= delay),
        "replacements must wait at least 1 s, 2 s, 4 s after the one before; they came {gaps:?} s apart"
    );

    // Pods no longer crash: the last failed one is replaced after its delay, and runs.
    eventually(
        std::time::Duration::from_secs(90),
        "one Running and Ready Pod that never crashed, once the crashes stop",
        || async {
            let list = pods
                .list(&ListParams::default().labels("app=crashy"))
                .await
                .ok()?;
            let [pod] = list.items.as_slice() else {
                return None;
            };
            let crashed_before = crashed.iter().any(|(name, _)| *name == pod.name_any());
            (running_and_ready(pod) && !crashed_before).then_some(())
        },
    )
    .await;
}

/// A Pod an earlier version made (labelled only `app: <name>`, before AppCluster Pods had a label
/// of their own) still counts after an upgrade: it gets the new label and stays, and only the
/// missing Pods are made — never more than `size`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_of_an_earlier_version_is_kept_after_an_upgrade() {
    let ns = TestNamespace::new("appcluster-upgrade").await;
    // The AppCluster and its earlier Pod exist before the operator starts (which would install
    // the CRDs): this test may be the binary's first.
    support::install_crds().await;
    let cluster: AppCluster = object(json!({
        "apiVersion": "demo.demo.io/v1", "kind": "AppCluster", "metadata": { "name": "kept" }, "spec": { "size": 2 }
    }));
    let cluster = ns
        .api::<AppCluster>()
        .create(&Default::default(), &cluster)
        .await
        .unwrap();
    let pods = ns.api::<Pod>();
    let earlier: Pod = object(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "kept-pod-earlier",
            "labels": { "app": "kept", "app.kubernetes.io/managed-by": "app-operator" },
            "ownerReferences": [{
                "apiVersion": "demo.demo.io/v1", "kind": "AppCluster", "name": "kept",
                "uid": cluster.uid().unwrap(), "controller": true, "blockOwnerDeletion": true
            }]
        },
        "spec": { "containers": [{ "name": "nginx", "image": "nginx:latest" }] }
    }));
    pods.create(&Default::default(), &earlier).await.unwrap();
    let count = PodCount::start(pods.clone(), "app=kept").await;

    let _operator = support::start(&ns, &[ControllerKind::Appcluster]).await;
    let settled = settled(&ns, "kept", 2).await;
    assert!(
        settled
            .iter()
            .any(|pod| pod.name_any() == "kept-pod-earlier"),
        "the earlier Pod must be kept: {:?}",
        settled
            .iter()
            .map(ResourceExt::name_any)
            .collect::<Vec<_>>()
    );
    let labelled = pods.get("kept-pod-earlier").await.unwrap();
    assert_eq!(
        labelled
            .labels()
            .get("demo.demo.io/appcluster")
            .map(String::as_str),
        Some("kept")
    );
    assert_eq!(count.most(), 2, "never more Pods than size");
}
