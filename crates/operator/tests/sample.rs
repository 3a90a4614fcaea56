//! Sample: the tutorial's YAML applies unchanged, its column shows, the controller watches (an
//! Event per change, once) and is silent while nothing changes.

// Test code: a failed expectation is a failed test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::time::Duration;

use app_operator::manager::ControllerKind;
use k8s_openapi::api::events::v1::Event;
use kube::api::ListParams;
use support::TIMEOUT;
use testkit::{TestNamespace, eventually, kubectl_ok, settled, stays_for};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tutorials_sample_applies_shows_its_column_and_is_watched_not_polled() {
    let ns = TestNamespace::new("sample").await;
    let operator = support::start(&ns, &[ControllerKind::Sample]).await;
    let yaml = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../config/samples/example_v1alpha1_sample.yaml"
    );
    kubectl_ok(&["apply", "-n", &ns.name, "-f", yaml]);

    let table = kubectl_ok(&["get", "samples", "-n", &ns.name]);
    assert!(table.contains("TEST STRING"), "{table}");
    assert!(
        table.contains("sample-resource-1") && table.contains("first sample resource"),
        "{table}"
    );

    let events = ns.api::<Event>();
    let observed = eventually(TIMEOUT, "a Normal event on the Sample", || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items.into_iter().find(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("sample-resource-1")
                && e.reason.as_deref() == Some("Observed")
        })
    })
    .await;
    assert_eq!(observed.type_.as_deref(), Some("Normal"));
    assert!(
        observed
            .note
            .unwrap_or_default()
            .contains("first sample resource")
    );

    // Idle: no reconcile and no request at all (the tutorial's controller listed every second).
    let requests = || {
        ["GET", "POST", "PUT", "PATCH", "DELETE"]
            .map(|m| operator.metrics.api_requests(m))
            .iter()
            .sum::<u64>()
    };
    let counts = || async { (requests(), operator.metrics.reconciles("sample")) };
    let before = settled(
        TIMEOUT,
        Duration::from_secs(2),
        "the first reconcile's requests",
        counts,
    )
    .await;
    let reconciles_before = before.1;
    stays_for(
        Duration::from_secs(10),
        "no API request and no reconcile while nothing changes",
        || async {
            let now = counts().await;
            (now == before)
                .then_some(())
                .ok_or(format!("(requests, reconciles) {before:?} -> {now:?}"))
        },
    )
    .await;

    // A change is seen at once, through the watch: one more reconcile, and one more occurrence of
    // the event (a second Event, or a series count of 2 where the recorder aggregated them).
    kubectl_ok(&[
        "patch",
        "sample",
        "sample-resource-1",
        "-n",
        &ns.name,
        "--type=merge",
        "-p",
        r#"{"testString":"changed"}"#,
    ]);
    eventually(TIMEOUT, "a second occurrence of the event", || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        let occurrences: i32 = list
            .items
            .iter()
            .filter(|e| e.reason.as_deref() == Some("Observed"))
            .map(|e| e.series.as_ref().map_or(1, |s| s.count))
            .sum();
        (occurrences >= 2).then_some(())
    })
    .await;
    // The change's reconcile writes status.observedGeneration, whose watch event wakes one more
    // reconcile that records and writes nothing; then nothing more.
    eventually(TIMEOUT, "the change's reconciles to be counted", || async {
        (operator.metrics.reconciles("sample") >= reconciles_before + 2).then_some(())
    })
    .await;
    stays_for(
        Duration::from_secs(2),
        "one reconcile for the change, one for its status write",
        || async {
            let reconciles = operator.metrics.reconciles("sample") - reconciles_before;
            (reconciles == 2)
                .then_some(())
                .ok_or(format!("{reconciles} reconciles since the change"))
        },
    )
    .await;
    let sample = ns
        .api::<app_operator::api::Sample>()
        .get("sample-resource-1")
        .await
        .unwrap();
    assert_eq!(
        sample.status.and_then(|s| s.observed_generation),
        sample.metadata.generation
    );
}
