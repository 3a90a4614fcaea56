//! Events say what changed: an operator restarted over converged objects reconciles every one of
//! them again and records no event, so `kubectl describe` is not flooded after each rollout.

// Test code: a failed expectation is a failed test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::time::Duration;

use app_operator::api::{AppCluster, MyApp, Sample};
use app_operator::manager::ControllerKind;
use k8s_openapi::api::events::v1::Event;
use kube::api::ListParams;
use support::TIMEOUT;
use testkit::{TestNamespace, eventually, kubectl_ok, settled, stays_for};

const CONTROLLERS: [ControllerKind; 3] = [
    ControllerKind::Myapp,
    ControllerKind::Appcluster,
    ControllerKind::Sample,
];

/// Every occurrence of every event in the namespace: `(reason, object, count)`, sorted.
async fn events(ns: &TestNamespace) -> Vec<(String, String, i32)> {
    let mut events: Vec<_> = ns
        .api::<Event>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|e| {
            (
                e.reason.unwrap_or_default(),
                e.regarding.and_then(|r| r.name).unwrap_or_default(),
                e.series.map_or(1, |s| s.count),
            )
        })
        .collect();
    events.sort();
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_operator_records_no_event_for_what_did_not_change() {
    let ns = TestNamespace::new("restart-events").await;
    let first = support::start(&ns, &CONTROLLERS).await;
    for sample in [
        "example_v1_myapp.yaml",
        "demo_v1_appcluster.yaml",
        "example_v1alpha1_sample.yaml",
    ] {
        let path = format!(
            "{}/../../config/samples/{sample}",
            env!("CARGO_MANIFEST_DIR")
        );
        kubectl_ok(&["apply", "-n", &ns.name, "-f", &path]);
    }
    let ready = |conditions: &[app_operator::api::conditions::Condition]| {
        conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    };
    eventually(TIMEOUT, "every sample converged", || async {
        let app = ns.api::<MyApp>().get("myapp-sample").await.ok()?;
        let cluster = ns.api::<AppCluster>().get("appcluster-sample").await.ok()?;
        let sample = ns.api::<Sample>().get("sample-resource-1").await.ok()?;
        (ready(&app.status?.conditions)
            && ready(&cluster.status?.conditions)
            && sample.status?.observed_generation == sample.metadata.generation)
            .then_some(())
    })
    .await;
    let before = settled(
        TIMEOUT,
        Duration::from_secs(2),
        "the first operator's events",
        || events(&ns),
    )
    .await;
    assert!(
        before.iter().any(|(reason, ..)| reason == "Created")
            && before.iter().any(|(reason, ..)| reason == "Observed"),
        "the first operator recorded what it did: {before:?}"
    );
    drop(first);

    let second = support::start(&ns, &CONTROLLERS).await;
    eventually(TIMEOUT, "every object reconciled again", || async {
        ["myapp", "appcluster", "sample"]
            .iter()
            .all(|name| second.metrics.reconciles(name) >= 1)
            .then_some(())
    })
    .await;
    stays_for(
        Duration::from_secs(3),
        "no event after the restart",
        || async {
            let now = events(&ns).await;
            (now == before)
                .then_some(())
                .ok_or(format!("events {before:?} -> {now:?}"))
        },
    )
    .await;
}
