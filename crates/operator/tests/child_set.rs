//! The child set on a real API server: a change to an immutable field is handled as the child
//! kind declares (re-create, or refuse with a reason), and children no longer wanted are pruned.

// Test code: a failed expectation is a failed test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::time::Duration;

use app_operator::reconcile::children::{OnImmutable, Owned, Verb};
use app_operator::reconcile::compact::Compact;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::PostParams;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use testkit::{TestNamespace, eventually, object};

const TIMEOUT: Duration = Duration::from_secs(60);

/// A label-selected ConfigMap cache of the namespace, synced, kept as the operator keeps it.
async fn cache(ns: &TestNamespace) -> (Store<Compact<ConfigMap>>, tokio::task::JoinHandle<()>) {
    let (store, writer) = reflector::store();
    let config = watcher::Config::default().labels("app.kubernetes.io/managed-by=app-operator");
    // With the backoff the watch retries its errors and never ends while the test runs.
    let task = tokio::spawn(
        watcher(ns.api::<Compact<ConfigMap>>(), config)
            .default_backoff()
            .reflect(writer)
            .for_each(|_| async {}),
    );
    tokio::time::timeout(TIMEOUT, store.wait_until_ready())
        .await
        .unwrap()
        .unwrap();
    (store, task)
}

fn config_map(ns: &TestNamespace, owner_uid: &str, name: &str, value: &str) -> ConfigMap {
    object(json!({
        "metadata": { "name": name, "namespace": ns.name,
            "labels": { "app.kubernetes.io/managed-by": "app-operator" },
            "ownerReferences": [{ "apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                                  "uid": owner_uid, "controller": true }] },
        "immutable": true,
        "data": { "value": value }
    }))
}

/// The uid of an owner object in the namespace (children need a real one to survive GC).
async fn owner(ns: &TestNamespace) -> String {
    let owner: ConfigMap = object(json!({ "metadata": { "name": "owner" } }));
    let created = ns
        .api::<ConfigMap>()
        .create(&PostParams::default(), &owner)
        .await
        .unwrap();
    created.uid().unwrap()
}

async fn value_becomes(ns: &TestNamespace, name: &str, value: &str) -> String {
    eventually(TIMEOUT, &format!("{name} to hold {value}"), || async {
        let map = ns.api::<ConfigMap>().get(name).await.ok()?;
        (map.data.as_ref()?.get("value")? == value).then(|| map.uid().unwrap_or_default())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_immutable_change_is_recreated_or_refused_as_declared_and_orphans_are_pruned() {
    let ns = TestNamespace::new("child-set").await;
    let owner_uid = owner(&ns).await;
    let (store, _task) = cache(&ns).await;
    let client = ns.client.clone();

    // Re-create: a new object with the new data.
    let recreated = Owned::new(store.clone(), OnImmutable::Recreate);
    let (_, change) = recreated
        .apply(
            &client,
            &owner_uid,
            &config_map(&ns, &owner_uid, "settings", "one"),
        )
        .await
        .unwrap();
    assert_eq!(change.map(|c| c.verb), Some(Verb::Created));
    let first = value_becomes(&ns, "settings", "one").await;
    eventually(TIMEOUT, "the cache to hold settings", || async {
        recreated.get(&ns.name, "settings").map(|_| ())
    })
    .await;
    let (_, change) = recreated
        .apply(
            &client,
            &owner_uid,
            &config_map(&ns, &owner_uid, "settings", "two"),
        )
        .await
        .unwrap();
    assert_eq!(change.map(|c| c.verb), Some(Verb::Updated));
    let second = value_becomes(&ns, "settings", "two").await;
    assert_ne!(first, second, "re-created as a new object");

    // Refuse: the object stays as it is and the error says why, with its reason.
    let refused = Owned::new(store.clone(), OnImmutable::Refuse);
    eventually(TIMEOUT, "the cache to hold the new settings", || async {
        let cached = refused.get(&ns.name, "settings")?;
        (cached.uid().as_deref() == Some(second.as_str())).then_some(())
    })
    .await;
    let error = refused
        .apply(
            &client,
            &owner_uid,
            &config_map(&ns, &owner_uid, "settings", "three"),
        )
        .await
        .unwrap_err();
    assert_eq!(error.reason(), "ImmutableFieldChanged");
    assert!(error.is_permanent(), "{error}");
    assert!(
        error
            .to_string()
            .contains("ConfigMap settings cannot be changed in place"),
        "{error}"
    );
    value_becomes(&ns, "settings", "two").await;

    // Prune: of two children, the one no longer wanted goes.
    let extra = config_map(&ns, &owner_uid, "extra", "x");
    recreated.apply(&client, &owner_uid, &extra).await.unwrap();
    eventually(TIMEOUT, "the cache to hold extra", || async {
        recreated.get(&ns.name, "extra").map(|_| ())
    })
    .await;
    let wanted = [config_map(&ns, &owner_uid, "settings", "two")];
    let changes = recreated
        .sync(&client, &owner_uid, &ns.name, &wanted)
        .await
        .unwrap();
    let deleted: Vec<&str> = changes
        .iter()
        .filter(|c| c.verb == Verb::Deleted)
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(deleted, ["extra"]);
    eventually(TIMEOUT, "extra to be gone", || async {
        ns.api::<ConfigMap>()
            .get_opt("extra")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        ns.api::<ConfigMap>()
            .get_opt("settings")
            .await
            .unwrap()
            .is_some()
    );
}
