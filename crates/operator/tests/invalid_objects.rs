//! A stored object that no longer decodes (written under an older, looser schema) is reported,
//! and every other object keeps being reconciled. Its own test binary: it swaps the MyApp CRD's
//! schema for a moment, which no other test may see.

// Test code: a failed expectation is a failed test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::io::Write;
use std::sync::{Arc, Mutex};

use app_operator::api::MyApp;
use app_operator::manager::ControllerKind;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps,
};
use kube::CustomResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use support::TIMEOUT;
use testkit::{TestNamespace, eventually, object};

/// Collects the log lines the operator writes in this test process.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

async fn apply_crd(crds: &Api<CustomResourceDefinition>, crd: &CustomResourceDefinition) {
    let name = crd.metadata.name.clone().unwrap();
    crds.patch(
        &name,
        &PatchParams::apply("app-operator-tests").force(),
        &Patch::Apply(crd),
    )
    .await
    .unwrap();
    eventually(TIMEOUT, "the CRD to be Established", || async {
        let crd = crds.get(&name).await.ok()?;
        let established = crd
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        established.then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecodable_myapp_is_reported_and_the_others_converge() {
    let log = Captured::default();
    let writer = log.clone();
    tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_env_filter("warn")
        .with_ansi(false)
        .init();
    let ns = TestNamespace::new("invalid-objects").await;
    support::install_crds().await;
    let crds: Api<CustomResourceDefinition> = Api::all(ns.client.clone());

    // An older, looser schema: any spec goes.
    let real = MyApp::crd();
    let mut loose = real.clone();
    for version in &mut loose.spec.versions {
        let root = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
            .unwrap();
        root.x_kubernetes_validations = None;
        let spec: JSONSchemaProps =
            object(json!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true }));
        root.properties
            .as_mut()
            .unwrap()
            .insert("spec".into(), spec);
        root.required = None;
    }
    apply_crd(&crds, &loose).await;
    let resource = kube::core::ApiResource::erase::<MyApp>(&());
    let raw: Api<kube::core::DynamicObject> =
        Api::namespaced_with(ns.client.clone(), &ns.name, &resource);
    let poison: kube::core::DynamicObject = object(json!({
        "apiVersion": "example.com/v1", "kind": "MyApp", "metadata": { "name": "poison" },
        "spec": { "image": "nginx:1.27", "port": "eighty" }
    }));
    // The API server serves a changed schema a moment after the CRD is updated.
    eventually(
        TIMEOUT,
        "the loose schema to accept the poison object",
        || async { raw.create(&PostParams::default(), &poison).await.ok() },
    )
    .await;
    apply_crd(&crds, &real).await;
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let mut again = poison.clone();
    again.metadata.name = Some("poison-again".into());
    eventually(TIMEOUT, "the real schema to refuse it again", || async {
        match raw.create(&dry_run, &again).await {
            Err(kube::Error::Api(status)) if status.code == 422 => Some(()),
            _ => None,
        }
    })
    .await;

    let operator = support::start(&ns, &[ControllerKind::Myapp]).await;
    let apps = ns.api::<MyApp>();
    for name in ["good-a", "good-b"] {
        let app: MyApp = object(json!({
            "apiVersion": "example.com/v1", "kind": "MyApp", "metadata": { "name": name },
            "spec": { "image": "nginx:1.27" }
        }));
        apps.create(&PostParams::default(), &app).await.unwrap();
    }
    for name in ["good-a", "good-b"] {
        eventually(TIMEOUT, &format!("MyApp {name} Ready"), || async {
            let status = apps.get(name).await.ok()?.status?;
            status
                .conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
                .then_some(())
        })
        .await;
    }
    let series = format!(
        "app_operator_invalid_objects{{controller=\"myapp\",namespace=\"{}\",name=\"poison\"}} 1",
        ns.name
    );
    let metrics = operator.metrics.encode().unwrap();
    assert!(metrics.contains(&series), "no {series} in\n{metrics}");
    let lines = String::from_utf8(log.0.lock().unwrap().clone()).unwrap();
    assert!(
        lines
            .lines()
            .any(|l| l.contains("WARN") && l.contains("poison") && l.contains("does not decode")),
        "no WARN line names the poison object:\n{lines}"
    );
    let events = ns.api::<k8s_openapi::api::events::v1::Event>();
    eventually(TIMEOUT, "a Warning event on the poison object", || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("InvalidObject")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("poison")
            })
            .then_some(())
    })
    .await;

    // Fixed by hand: it decodes again, is reconciled, and the metric goes.
    raw.patch(
        "poison",
        &PatchParams::default(),
        &Patch::Merge(&json!({ "spec": { "port": 8080 } })),
    )
    .await
    .unwrap();
    eventually(TIMEOUT, "the fixed MyApp to be Ready", || async {
        let status = apps.get("poison").await.ok()?.status?;
        (support::condition(&status.conditions, "Ready")?.0 == "True").then_some(())
    })
    .await;
    let metrics = operator.metrics.encode().unwrap();
    assert!(!metrics.contains("name=\"poison\""), "{metrics}");
}
