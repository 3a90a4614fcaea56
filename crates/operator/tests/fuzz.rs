//! MyApp specs generated over raw JSON, so values the Rust types cannot hold are tried too
//! (bounds ±1, 2³¹, floats, strings for numbers, nulls, quantity and image edge cases, env
//! combinations, autoscaling bounds, unknown fields), with a fixed seed:
//! - the API server accepts or refuses each one at `kubectl apply` (server-side dry run);
//! - whatever it accepts decodes into the operator's type, and every child the operator builds
//!   from it passes a server-side dry-run apply (no accepted spec can only fail later);
//! - a sample of the accepted specs, created for real, each reach Ready or Degraded with a reason.
//!
//! `make test` runs 256 cases; `FUZZ_CASES=<n>` runs more.

// Test code: a failed expectation is a failed test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use app_operator::api::MyApp;
use app_operator::controllers::myapp::children;
use app_operator::manager::ControllerKind;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};
use serde_json::{Value, json};
use testkit::{TestNamespace, eventually};

/// The seed: the same cases on every run, so a failure repeats.
const SEED: [u8; 32] = *b"app-operator myapp spec fuzzing!";
/// Accepted specs also created for real.
const CREATED_FOR_REAL: usize = 8;

/// Mostly `valid` values, one time in four an edge case: both kinds of input are exercised, and
/// enough specs pass as a whole to build children from.
fn weighted(valid: Vec<Value>, edges: Vec<Value>) -> BoxedStrategy<Value> {
    prop_oneof![
        3 => proptest::sample::select(valid),
        1 => proptest::sample::select(edges),
    ]
    .boxed()
}

/// `None` leaves the field out.
fn maybe(valid: Vec<Value>, edges: Vec<Value>) -> BoxedStrategy<Option<Value>> {
    proptest::option::of(weighted(valid, edges)).boxed()
}

fn count() -> BoxedStrategy<Option<Value>> {
    maybe(
        vec![json!(1), json!(2), json!(3), json!(100)],
        vec![
            json!(0),
            json!(101),
            json!(-1),
            json!(2_147_483_647),
            json!(2_147_483_648_i64),
            json!(1.5),
            json!(3.0),
            json!("3"),
            Value::Null,
        ],
    )
}

fn quantity() -> BoxedStrategy<Option<Value>> {
    maybe(
        vec![
            json!("100m"),
            json!("1"),
            json!(2),
            json!(0.5),
            json!("1.5Gi"),
            json!("64Mi"),
            json!("1e3"),
            json!("0"),
            json!("1Ki"),
        ],
        vec![
            json!("-1"),
            json!("abc"),
            json!(""),
            json!("1.5.0"),
            Value::Null,
        ],
    )
}

fn resource_list() -> BoxedStrategy<Option<Value>> {
    proptest::option::of((quantity(), quantity()).prop_map(|(cpu, memory)| {
        let mut list = serde_json::Map::new();
        if let Some(cpu) = cpu {
            list.insert("cpu".into(), cpu);
        }
        if let Some(memory) = memory {
            list.insert("memory".into(), memory);
        }
        Value::Object(list)
    }))
    .boxed()
}

fn env_var() -> BoxedStrategy<Value> {
    (
        weighted(
            vec![json!("APP_ENV"), json!("a_b"), json!("A.B-c")],
            vec![json!("1X"), json!(""), json!("has space"), json!("a=b")],
        ),
        maybe(
            vec![json!("production"), json!("")],
            vec![json!(5), Value::Null],
        ),
        proptest::option::of(weighted(
            vec![
                json!({ "secretKeyRef": { "name": "creds", "key": "password" } }),
                json!({ "configMapKeyRef": { "name": "settings", "key": "mode" } }),
            ],
            vec![
                json!({ "secretKeyRef": { "name": "creds", "key": "password" }, "configMapKeyRef": { "name": "settings", "key": "mode" } }),
                json!({}),
                json!({ "secretKeyRef": { "name": "", "key": "password" } }),
            ],
        )),
    )
        .prop_map(|(name, value, from)| {
            let mut var = json!({ "name": name });
            if let Some(value) = value {
                var["value"] = value;
            }
            if let Some(from) = from {
                var["valueFrom"] = from;
            }
            var
        })
        .boxed()
}

fn auto_scaling() -> BoxedStrategy<Option<Value>> {
    proptest::option::of(
        (
            maybe(
                vec![json!(true), json!(false)],
                vec![json!("yes"), Value::Null],
            ),
            count(),
            count(),
            count(),
        )
            .prop_map(|(enabled, min, max, target)| {
                let mut spec = serde_json::Map::new();
                for (field, value) in [
                    ("enabled", enabled),
                    ("minReplicas", min),
                    ("maxReplicas", max),
                    ("targetCPUUtilizationPercentage", target),
                ] {
                    if let Some(value) = value {
                        spec.insert(field.into(), value);
                    }
                }
                Value::Object(spec)
            }),
    )
    .boxed()
}

/// A MyApp spec, field by field, each left out, valid, or an edge case.
fn spec() -> impl Strategy<Value = Value> {
    (
        count(),
        maybe(
            vec![
                json!("nginx:1.27"),
                json!("nginx"),
                json!("registry.example:5000/team/app:v1"),
                json!(format!("nginx@sha256:{}", "a".repeat(64))),
            ],
            vec![
                json!("Nginx:Latest"),
                json!("has space:1"),
                json!(""),
                json!("a".repeat(513)),
                json!(5),
                Value::Null,
            ],
        ),
        maybe(
            vec![json!(1), json!(80), json!(65535), json!(8080)],
            vec![
                json!(0),
                json!(65536),
                json!(-1),
                json!("80"),
                json!(8080.0),
            ],
        ),
        maybe(
            vec![json!("ClusterIP"), json!("NodePort"), json!("LoadBalancer")],
            vec![json!("ExternalName"), json!("clusterip"), json!("")],
        ),
        (resource_list(), resource_list()),
        proptest::option::of(proptest::collection::vec(env_var(), 0..4)),
        auto_scaling(),
        proptest::bool::weighted(0.2),
    )
        .prop_map(
            |(replicas, image, port, service_type, (limits, requests), env, scaling, unknown)| {
                let mut spec = serde_json::Map::new();
                for (field, value) in [
                    ("replicas", replicas),
                    ("image", image),
                    ("port", port),
                    ("serviceType", service_type),
                    ("env", env.map(Value::Array)),
                    ("autoScaling", scaling),
                ] {
                    if let Some(value) = value {
                        spec.insert(field.into(), value);
                    }
                }
                if limits.is_some() || requests.is_some() {
                    let mut resources = serde_json::Map::new();
                    if let Some(limits) = limits {
                        resources.insert("limits".into(), limits);
                    }
                    if let Some(requests) = requests {
                        resources.insert("requests".into(), requests);
                    }
                    spec.insert("resources".into(), Value::Object(resources));
                }
                if unknown {
                    spec.insert("bogus".into(), json!(1));
                }
                Value::Object(spec)
            },
        )
}

fn my_app(name: &str, spec: &Value) -> Value {
    json!({ "apiVersion": "example.com/v1", "kind": "MyApp", "metadata": { "name": name }, "spec": spec })
}

/// One case: refused with a message, or accepted, decodable, and buildable into valid children.
async fn check(ns: &str, spec: &Value, accepted: &Mutex<Vec<Value>>) -> Result<(), TestCaseError> {
    let client = testkit::client().await;
    let apps: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<MyApp>(&()));
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let object: DynamicObject = serde_json::from_value(my_app("fuzz", spec)).unwrap();
    let created = match apps.create(&dry_run, &object).await {
        Ok(created) => created,
        Err(kube::Error::Api(status)) if matches!(status.code, 400 | 422) => {
            prop_assert!(
                !status.message.is_empty(),
                "refused without a message: {spec}"
            );
            return Ok(());
        }
        Err(error) => return Err(TestCaseError::fail(format!("{spec}: {error}"))),
    };
    let app: MyApp = serde_json::from_value(serde_json::to_value(&created).unwrap())
        .map_err(|e| TestCaseError::fail(format!("accepted but does not decode ({e}): {spec}")))?;
    let owner = OwnerReference {
        api_version: MyApp::api_version(&()).into_owned(),
        kind: MyApp::kind(&()).into_owned(),
        name: "fuzz".into(),
        uid: "00000000-0000-0000-0000-000000000000".into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    let built = children(&app, &owner);
    let apply = PatchParams::apply("fuzz").dry_run();
    let refused = |kind: &str, error: kube::Error| {
        TestCaseError::fail(format!(
            "accepted, but its {kind} is refused ({error}): {spec}"
        ))
    };
    Api::<Deployment>::namespaced(client.clone(), ns)
        .patch("fuzz", &apply, &Patch::Apply(&built.deployment))
        .await
        .map_err(|e| refused("Deployment", e))?;
    Api::<Service>::namespaced(client.clone(), ns)
        .patch("fuzz", &apply, &Patch::Apply(&built.service))
        .await
        .map_err(|e| refused("Service", e))?;
    if let Some(hpa) = &built.hpa {
        Api::<HorizontalPodAutoscaler>::namespaced(client, ns)
            .patch("fuzz", &apply, &Patch::Apply(hpa))
            .await
            .map_err(|e| refused("HorizontalPodAutoscaler", e))?;
    }
    let mut accepted = accepted.lock().unwrap();
    if !accepted.contains(spec) {
        accepted.push(spec.clone());
    }
    Ok(())
}

#[test]
fn generated_specs_are_refused_at_apply_or_built_and_converged() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let ns = runtime.block_on(TestNamespace::new("fuzz"));
    runtime.block_on(support::install_crds());
    let cases = std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(256);
    let mut runner = TestRunner::new_with_rng(
        Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &SEED),
    );
    let accepted = Arc::new(Mutex::new(Vec::new()));
    let result = runner.run(&spec(), |spec| {
        runtime.block_on(check(&ns.name, &spec, &accepted))
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
    let accepted = accepted.lock().unwrap().clone();
    assert!(
        accepted.len() >= CREATED_FOR_REAL,
        "only {} distinct specs accepted of {cases}: the generator hardly reaches valid input",
        accepted.len()
    );

    // Some accepted specs for real: each ends Ready, or Degraded with a reason.
    runtime.block_on(async {
        let _operator = support::start(&ns, &[ControllerKind::Myapp]).await;
        let apps: Api<DynamicObject> = Api::namespaced_with(
            testkit::client().await,
            &ns.name,
            &ApiResource::erase::<MyApp>(&()),
        );
        for (index, spec) in accepted.iter().take(CREATED_FOR_REAL).enumerate() {
            let object: DynamicObject =
                serde_json::from_value(my_app(&format!("fuzz-{index}"), spec)).unwrap();
            apps.create(&PostParams::default(), &object).await.unwrap();
        }
        let typed = ns.api::<MyApp>();
        for index in 0..CREATED_FOR_REAL {
            let name = format!("fuzz-{index}");
            eventually(
                Duration::from_secs(90),
                &format!("MyApp {name} Ready or Degraded with a reason"),
                || async {
                    let app = typed.get(&name).await.ok()?;
                    let conditions = app.status?.conditions;
                    let settled = conditions.iter().any(|c| {
                        (c.type_ == "Ready" && c.status == "True")
                            || (c.type_ == "Degraded" && c.status == "True" && !c.reason.is_empty())
                    });
                    settled.then_some(())
                },
            )
            .await;
        }
    });
    println!("{} distinct specs accepted of {cases}", accepted.len());
}
