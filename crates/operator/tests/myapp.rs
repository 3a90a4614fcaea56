//! MyApp on a real control plane: what a user sees after `kubectl apply`.

// Test code: a failed expectation is a failed test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::time::Duration;

use app_operator::api::MyApp;
use app_operator::api::conditions::{DEGRADED, READY};
use app_operator::manager::ControllerKind;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use serde_json::json;
use support::{TIMEOUT, condition, rejection};
use testkit::watch::Watch;
use testkit::{TestNamespace, eventually, kubectl_ok, object, settled, stays_for};

fn my_app_json(name: &str, spec: serde_json::Value) -> serde_json::Value {
    json!({ "apiVersion": "example.com/v1", "kind": "MyApp", "metadata": { "name": name }, "spec": spec })
}

fn my_app(name: &str, spec: serde_json::Value) -> MyApp {
    object(my_app_json(name, spec))
}

async fn wait_ready(apps: &Api<MyApp>, name: &str, replicas: i32) -> MyApp {
    eventually(
        TIMEOUT,
        "MyApp Ready=True with all replicas ready",
        || async {
            let app = apps.get(name).await.ok()?;
            let status = app.status.as_ref()?;
            let ready =
                condition(&status.conditions, READY)? == ("True".into(), "DeploymentReady".into());
            (ready
                && status.ready_replicas == replicas
                && status.observed_generation == app.metadata.generation)
                .then_some(app)
        },
    )
    .await
}

async fn deployment_replicas(deployments: &Api<Deployment>, name: &str, replicas: i32) {
    eventually(
        TIMEOUT,
        &format!("Deployment {name} spec.replicas == {replicas}"),
        || async { (deployments.get(name).await.ok()?.spec?.replicas? == replicas).then_some(()) },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_myapp_becomes_a_deployment_and_a_service_and_reports_ready() {
    let ns = TestNamespace::new("myapp-create").await;
    let _operator = support::start(&ns, &[ControllerKind::Myapp]).await;
    // The Secret the env reads: kwok would report the Pods Ready without it, a kubelet would not
    // start them (real_node.rs shows a MyApp waiting for a missing one).
    ns.api::<Secret>()
        .create(
            &PostParams::default(),
            &object(
                json!({ "metadata": { "name": "db" }, "stringData": { "password": "s3cret" } }),
            ),
        )
        .await
        .unwrap();
    let apps = ns.api::<MyApp>();
    let spec = json!({
        "replicas": 2, "image": "nginx:1.27", "port": 9090, "serviceType": "NodePort",
        "resources": { "requests": { "cpu": "100m", "memory": "64Mi" }, "limits": { "cpu": 2, "memory": "128Mi" } },
        "env": [
            { "name": "MODE", "value": "prod" },
            { "name": "PASSWORD", "valueFrom": { "secretKeyRef": { "name": "db", "key": "password" } } }
        ]
    });
    apps.create(&PostParams::default(), &my_app("web", spec))
        .await
        .unwrap();

    let app = wait_ready(&apps, "web", 2).await;
    let deployment = ns.api::<Deployment>().get("web").await.unwrap();
    let owner = &deployment.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("MyApp", app.uid().unwrap().as_str())
    );
    assert_eq!(
        (owner.controller, owner.block_owner_deletion),
        (Some(true), Some(true))
    );
    for label in ["app.kubernetes.io/name", "app.kubernetes.io/instance"] {
        assert_eq!(
            deployment.labels().get(label).map(String::as_str),
            Some("web")
        );
    }
    assert_eq!(
        deployment
            .labels()
            .get("app.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("app-operator")
    );
    // Its Pods are the ReplicaSet's, not the operator's: without `managed-by` they stay out of
    // the operator's Pod cache, which is for AppCluster Pods.
    let pods = ns
        .api::<Pod>()
        .list(&ListParams::default().labels("app.kubernetes.io/instance=web"))
        .await
        .unwrap();
    assert_eq!(pods.items.len(), 2);
    assert!(
        pods.items
            .iter()
            .all(|pod| !pod.labels().contains_key("app.kubernetes.io/managed-by"))
    );
    let pod_spec = deployment
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap();
    let container = &pod_spec.containers[0];
    assert_eq!(
        (container.name.as_str(), container.image.as_deref()),
        ("app", Some("nginx:1.27"))
    );
    let port = &container.ports.as_ref().unwrap()[0];
    assert_eq!(
        (port.name.as_deref(), port.container_port),
        (Some("http"), 9090)
    );
    let env = container.env.as_ref().unwrap();
    assert_eq!(env[0].value.as_deref(), Some("prod"));
    let secret = env[1]
        .value_from
        .as_ref()
        .unwrap()
        .secret_key_ref
        .as_ref()
        .unwrap();
    assert_eq!(
        (secret.name.as_str(), secret.key.as_str()),
        ("db", "password")
    );
    let resources = container.resources.as_ref().unwrap();
    assert_eq!(resources.requests.as_ref().unwrap()["cpu"].0, "100m");
    assert_eq!(resources.limits.as_ref().unwrap()["memory"].0, "128Mi");
    // `cpu: 2`, a number, as Pods take it.
    assert_eq!(resources.limits.as_ref().unwrap()["cpu"].0, "2");

    let service = ns.api::<Service>().get("web").await.unwrap();
    let service_spec = service.spec.unwrap();
    assert_eq!(service_spec.type_.as_deref(), Some("NodePort"));
    let service_port = &service_spec.ports.unwrap()[0];
    assert_eq!(service_port.port, 9090);
    assert_eq!(
        format!("{:?}", service_port.target_port),
        r#"Some(String("http"))"#
    );
    assert_eq!(
        service_spec
            .selector
            .unwrap()
            .get("app.kubernetes.io/instance")
            .map(String::as_str),
        Some("web")
    );

    let status = app.status.unwrap();
    assert_eq!(status.available_replicas, 2);
    assert_eq!(condition(&status.conditions, DEGRADED).unwrap().0, "False");
    assert_eq!(
        status.selector.as_deref(),
        Some("app.kubernetes.io/instance=web,app.kubernetes.io/name=web")
    );
    let described = kubectl_ok(&["describe", "myapp", "web", "-n", &ns.name]);
    assert!(described.contains("Created Deployment web"), "{described}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_scale_and_spec_edits_reach_the_deployment() {
    let ns = TestNamespace::new("myapp-scale").await;
    let _operator = support::start(&ns, &[ControllerKind::Myapp]).await;
    let apps = ns.api::<MyApp>();
    let deployments = ns.api::<Deployment>();
    apps.create(
        &PostParams::default(),
        &my_app("web", json!({ "image": "nginx:1.27" })),
    )
    .await
    .unwrap();
    wait_ready(&apps, "web", 1).await;

    kubectl_ok(&["scale", "myapp/web", "--replicas=3", "-n", &ns.name]);
    deployment_replicas(&deployments, "web", 3).await;
    wait_ready(&apps, "web", 3).await;

    let image = json!({ "spec": { "image": "nginx:1.28" } });
    apps.patch("web", &PatchParams::default(), &Patch::Merge(&image))
        .await
        .unwrap();
    eventually(TIMEOUT, "the new image in the Deployment", || async {
        let deployment = deployments.get("web").await.ok()?;
        let image = deployment
            .spec?
            .template
            .spec?
            .containers
            .first()?
            .image
            .clone()?;
        (image == "nginx:1.28").then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn autoscaling_hands_replicas_to_an_hpa_and_disabling_it_takes_them_back() {
    let ns = TestNamespace::new("myapp-hpa").await;
    let _operator = support::start(&ns, &[ControllerKind::Myapp]).await;
    let apps = ns.api::<MyApp>();
    let deployments = ns.api::<Deployment>();
    let hpas = ns.api::<HorizontalPodAutoscaler>();
    let spec = json!({ "replicas": 1, "image": "nginx:1.27", "autoScaling": { "enabled": true, "minReplicas": 2, "maxReplicas": 5 } });
    apps.create(&PostParams::default(), &my_app("web", spec))
        .await
        .unwrap();

    let hpa = eventually(TIMEOUT, "the HPA", || async {
        hpas.get_opt("web").await.ok().flatten()
    })
    .await;
    let hpa_spec = hpa.spec.unwrap();
    assert_eq!((hpa_spec.min_replicas, hpa_spec.max_replicas), (Some(2), 5));
    assert_eq!(hpa_spec.scale_target_ref.name, "web");
    // The HPA controller raises the Deployment to minReplicas; the operator never writes replicas
    // (and never 0) while autoscaling is on.
    deployment_replicas(&deployments, "web", 2).await;
    let deployment = deployments.get("web").await.unwrap();
    let ours = deployment
        .managed_fields()
        .iter()
        .find(|f| f.manager.as_deref() == Some("app-operator"))
        .unwrap();
    let fields = serde_json::to_string(&ours.fields_v1).unwrap();
    assert!(
        !fields.contains("f:replicas"),
        "app-operator must not own spec.replicas: {fields}"
    );
    wait_ready(&apps, "web", 2).await;

    let off = json!({ "spec": { "autoScaling": { "enabled": false, "maxReplicas": 5 } } });
    apps.patch("web", &PatchParams::default(), &Patch::Merge(&off))
        .await
        .unwrap();
    eventually(TIMEOUT, "the HPA to be deleted", || async {
        hpas.get_opt("web").await.ok()?.is_none().then_some(())
    })
    .await;
    deployment_replicas(&deployments, "web", 1).await;
}

/// Turning autoscaling on for a running MyApp hands `replicas` to the HPA without a dip: server-
/// side apply would reset a field that its only manager stops applying.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enabling_autoscaling_keeps_the_current_replicas_until_the_hpa_acts() {
    let ns = TestNamespace::new("myapp-handover").await;
    let _operator = support::start(&ns, &[ControllerKind::Myapp]).await;
    let apps = ns.api::<MyApp>();
    let deployments = ns.api::<Deployment>();
    apps.create(
        &PostParams::default(),
        &my_app("web", json!({ "replicas": 5, "image": "nginx:1.27" })),
    )
    .await
    .unwrap();
    wait_ready(&apps, "web", 5).await;

    // Every value of spec.replicas the Deployment takes from here on, from a synced watch.
    let (synced_tx, synced_rx) = tokio::sync::oneshot::channel();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<i32>::new()));
    let events = watcher(deployments.clone(), watcher::Config::default()).default_backoff();
    let watch = Watch::spawn("the Deployments", events, {
        let seen = seen.clone();
        let mut synced = Some(synced_tx);
        move |event| {
            match event {
                watcher::Event::Apply(d) | watcher::Event::InitApply(d) => {
                    if let Some(replicas) = d.spec.and_then(|s| s.replicas) {
                        seen.lock().unwrap().push(replicas);
                    }
                }
                watcher::Event::InitDone => {
                    if let Some(tx) = synced.take() {
                        let _ = tx.send(());
                    }
                }
                _ => {}
            }
            async {}
        }
    });
    if synced_rx.await.is_err() {
        // The sender went with the watch's handler: the watch stopped before it synced.
        watch.assert_alive();
    }
    let on = json!({ "spec": { "autoScaling": { "enabled": true, "minReplicas": 2, "maxReplicas": 10 } } });
    apps.patch("web", &PatchParams::default(), &Patch::Merge(&on))
        .await
        .unwrap();
    let hpas = ns.api::<HorizontalPodAutoscaler>();
    eventually(TIMEOUT, "the HPA to exist", || async {
        hpas.get_opt("web").await.ok().flatten()
    })
    .await;
    // The HPA controller syncs every 15 s: watch through more than one of its passes.
    stays_for(
        Duration::from_secs(20),
        "spec.replicas never below 5 while the HPA takes over",
        || async {
            watch.alive()?;
            let seen = seen.lock().unwrap();
            if seen.is_empty() || seen.iter().any(|r| *r < 5) {
                return Err(format!("spec.replicas took {seen:?}"));
            }
            Ok(())
        },
    )
    .await;
    watch.stop().await;
    let ours = deployments.get("web").await.unwrap();
    let fields = ours
        .managed_fields()
        .iter()
        .find(|f| f.manager.as_deref() == Some("app-operator"))
        .map(|f| serde_json::to_string(&f.fields_v1).unwrap())
        .unwrap();
    assert!(
        !fields.contains("f:replicas"),
        "app-operator must not own spec.replicas while autoscaling: {fields}"
    );

    // Disabling autoscaling hands replicas back to the MyApp.
    let off = json!({ "spec": { "replicas": 3, "autoScaling": { "enabled": false, "maxReplicas": 10 } } });
    apps.patch("web", &PatchParams::default(), &Patch::Merge(&off))
        .await
        .unwrap();
    deployment_replicas(&deployments, "web", 3).await;
    wait_ready(&apps, "web", 3).await;
}

/// Names a MyApp's Service or labels cannot carry are refused at apply, with the schema's message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_a_service_cannot_have_are_refused_by_kubectl_apply() {
    let ns = TestNamespace::new("myapp-names").await;
    support::install_crds().await;
    let long = format!("a{}", "b".repeat(63));
    for name in ["web.v2", "1web", long.as_str()] {
        let manifest =
            serde_json::to_string(&my_app_json(name, json!({ "image": "nginx" }))).unwrap();
        let path = std::env::temp_dir().join(format!("{}-{}.json", ns.name, name.len()));
        std::fs::write(&path, manifest).unwrap();
        let output = testkit::kubectl(&["apply", "-n", &ns.name, "-f", path.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{name} was accepted");
        assert!(
            stderr.contains("metadata.name must be at most 63 characters")
                && stderr.contains("DNS-1035 label"),
            "{name}: {stderr}"
        );
    }
}

/// A child the API server refuses as invalid (422) is a permanent error: Degraded with the API
/// server's own message, a Warning, and no further request until the MyApp changes or a retry is
/// asked for (the reconcile-requested-at annotation).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_refused_as_invalid_waits_for_a_change_of_the_myapp() {
    let ns = TestNamespace::new("myapp-refused").await;
    support::install_crds().await;
    let policy = support::refuse_services(&ns).await;

    let operator = support::start(&ns, &[ControllerKind::Myapp]).await;
    let apps = ns.api::<MyApp>();
    apps.create(
        &PostParams::default(),
        &my_app("refused", json!({ "image": "nginx:1.27" })),
    )
    .await
    .unwrap();
    let degraded = eventually(TIMEOUT, "MyApp refused Degraded", || async {
        let status = apps.get("refused").await.ok()?.status?;
        status
            .conditions
            .into_iter()
            .find(|c| c.type_ == DEGRADED && c.status == "True")
    })
    .await;
    assert!(
        degraded
            .message
            .contains("services named refused* are not allowed here")
            && !degraded.message.contains("Status {"),
        "{}",
        degraded.message
    );
    // `kubectl get` tells the failing MyApp from a healthy one.
    let table = testkit::kubectl_ok(&["get", "mya", "refused", "-n", &ns.name]);
    let header = table.lines().next().unwrap_or_default();
    let row = table.lines().nth(1).unwrap_or_default();
    assert!(
        header.contains("READY") && header.contains("STATUS") && row.contains("False"),
        "{table}"
    );
    let warnings = ns.api::<k8s_openapi::api::events::v1::Event>();
    eventually(TIMEOUT, "a Warning event", || async {
        let list = warnings.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .any(|e| {
                e.type_.as_deref() == Some("Warning") && e.reason.as_deref() == Some("ApplyFailed")
            })
            .then_some(())
    })
    .await;
    // The Deployment's own progress wakes the controller; it sends nothing for this MyApp.
    let requests = || {
        ["GET", "POST", "PUT", "PATCH", "DELETE"]
            .map(|m| operator.metrics.api_requests(m))
            .iter()
            .sum::<u64>()
    };
    let before = settled(
        TIMEOUT,
        Duration::from_secs(3),
        "the operator's requests for the failure",
        || async { requests() },
    )
    .await;
    stays_for(
        Duration::from_secs(15),
        "no request while the MyApp waits for a change",
        || async {
            let now = requests();
            (now == before)
                .then_some(())
                .ok_or(format!("{} requests since", now - before))
        },
    )
    .await;

    // The policy goes and a reconcile is asked for (`kubectl app-operator retry`): it converges.
    support::admit_services_again(&ns, &policy).await;
    apps.patch(
        "refused",
        &PatchParams::default(),
        &Patch::Merge(&json!({ "metadata": { "annotations": {
            app_operator::api::RECONCILE_REQUESTED_AT: "2026-11-28T03:00:00Z"
        } } })),
    )
    .await
    .unwrap();
    wait_ready(&apps, "refused", 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_on_the_deployment_and_the_service_is_reverted() {
    let ns = TestNamespace::new("myapp-drift").await;
    let _operator = support::start(&ns, &[ControllerKind::Myapp]).await;
    let apps = ns.api::<MyApp>();
    let deployments = ns.api::<Deployment>();
    let services = ns.api::<Service>();
    apps.create(
        &PostParams::default(),
        &my_app("web", json!({ "replicas": 2, "image": "nginx:1.27" })),
    )
    .await
    .unwrap();
    wait_ready(&apps, "web", 2).await;

    kubectl_ok(&["scale", "deployment/web", "--replicas=5", "-n", &ns.name]);
    deployment_replicas(&deployments, "web", 2).await;

    let port = json!({ "spec": { "ports": [{ "name": "http", "port": 9999, "targetPort": "http", "protocol": "TCP" }] } });
    services
        .patch("web", &PatchParams::default(), &Patch::Merge(&port))
        .await
        .unwrap();
    eventually(TIMEOUT, "the Service port back at 8080", || async {
        let ports = services.get("web").await.ok()?.spec?.ports?;
        (ports.len() == 1 && ports[0].port == 8080).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unowned_deployment_of_the_same_name_is_left_alone_and_reported() {
    let ns = TestNamespace::new("myapp-conflict").await;
    let _operator = support::start(&ns, &[ControllerKind::Myapp]).await;
    let deployments = ns.api::<Deployment>();
    let theirs: Deployment = object(json!({
        "metadata": { "name": "web" },
        "spec": {
            "replicas": 1,
            "selector": { "matchLabels": { "owner": "someone-else" } },
            "template": { "metadata": { "labels": { "owner": "someone-else" } },
                          "spec": { "containers": [{ "name": "c", "image": "busybox" }] } }
        }
    }));
    let before = deployments
        .create(&PostParams::default(), &theirs)
        .await
        .unwrap();
    let apps = ns.api::<MyApp>();
    apps.create(
        &PostParams::default(),
        &my_app("web", json!({ "image": "nginx:1.27" })),
    )
    .await
    .unwrap();

    let degraded = eventually(TIMEOUT, "Degraded=True", || async {
        let status = apps.get("web").await.ok()?.status?;
        let c = status
            .conditions
            .into_iter()
            .find(|c| c.type_ == DEGRADED && c.status == "True")?;
        Some(c)
    })
    .await;
    assert_eq!(degraded.reason, "ChildConflict");
    assert!(
        degraded.message.contains("Deployment web"),
        "{}",
        degraded.message
    );
    let after = deployments.get("web").await.unwrap();
    assert!(
        after.owner_references().is_empty(),
        "the Deployment was taken over"
    );
    assert_eq!(after.metadata.generation, before.metadata.generation);
    let described = kubectl_ok(&["describe", "myapp", "web", "-n", &ns.name]);
    assert!(
        described.contains("ChildConflict"),
        "no Warning event: {described}"
    );
}

/// The first apply of a child the cache does not hold is sent without a lookup: a hand-made
/// object whose fields all hold the values the operator would set must still not be taken over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unowned_deployment_equal_to_ours_is_not_taken_over() {
    let ns = TestNamespace::new("myapp-twin").await;
    let _operator = support::start(&ns, &[ControllerKind::Myapp]).await;
    let mut app = my_app("web", json!({ "image": "nginx:1.27" }));
    app.metadata.namespace = Some(ns.name.clone());
    // What the operator builds, made by hand: without an owner, and without the managed-by
    // label, so the operator's cache does not select it.
    let mut twin = app_operator::controllers::myapp::deployment(&app, Default::default());
    twin.metadata.owner_references = None;
    twin.labels_mut().remove("app.kubernetes.io/managed-by");
    let deployments = ns.api::<Deployment>();
    let before = deployments
        .create(&PostParams::default(), &twin)
        .await
        .unwrap();
    let apps = ns.api::<MyApp>();
    apps.create(&PostParams::default(), &app).await.unwrap();

    let degraded = eventually(TIMEOUT, "Degraded=True", || async {
        let status = apps.get("web").await.ok()?.status?;
        status
            .conditions
            .into_iter()
            .find(|c| c.type_ == DEGRADED && c.status == "True")
    })
    .await;
    assert_eq!(degraded.reason, "ChildConflict", "{}", degraded.message);
    let after = deployments.get("web").await.unwrap();
    assert!(
        after.owner_references().is_empty(),
        "the Deployment was taken over: {:?}",
        after.owner_references()
    );
    assert_eq!(after.labels(), before.labels(), "labels changed");
    assert!(
        !after
            .annotations()
            .contains_key(app_operator::reconcile::apply::APPLIED_DIGEST_ANNOTATION),
        "{:?}",
        after.annotations()
    );
    assert_eq!(after.spec, before.spec);
    // Deployments count annotation changes as generations: our digest annotation came and went
    // once (the apply that found the object, and the release), and was not tried again.
    stays_for(
        Duration::from_secs(5),
        "the Deployment at most 2 generations past its creation",
        || async {
            let later = deployments.get("web").await.map_err(|e| e.to_string())?;
            (later.metadata.generation <= before.metadata.generation.map(|g| g + 2))
                .then_some(())
                .ok_or(format!(
                    "applied again and again: generation {:?} -> {:?}",
                    before.metadata.generation, later.metadata.generation
                ))
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_converged_myapp_causes_no_writes() {
    let ns = TestNamespace::new("myapp-idle").await;
    let operator = support::start(&ns, &[ControllerKind::Myapp]).await;
    let apps = ns.api::<MyApp>();
    apps.create(
        &PostParams::default(),
        &my_app("web", json!({ "replicas": 2, "image": "nginx:1.27" })),
    )
    .await
    .unwrap();
    wait_ready(&apps, "web", 2).await;

    let versions = || async {
        (
            apps.get("web").await.unwrap().resource_version(),
            ns.api::<Deployment>()
                .get("web")
                .await
                .unwrap()
                .resource_version(),
            ns.api::<Service>()
                .get("web")
                .await
                .unwrap()
                .resource_version(),
        )
    };
    let writes = || {
        ["POST", "PUT", "PATCH", "DELETE"]
            .map(|m| operator.metrics.api_requests(m))
            .iter()
            .sum::<u64>()
    };
    // The last Deployment status updates land before the baseline is taken.
    let (before, writes_before, reconciles_before) = settled(
        TIMEOUT,
        Duration::from_secs(3),
        "the resourceVersions and the operator's writes and reconciles",
        || async {
            (
                versions().await,
                writes(),
                operator.metrics.reconciles("myapp"),
            )
        },
    )
    .await;
    let deployment_before = ns.api::<Deployment>().get("web").await.unwrap();
    stays_for(
        Duration::from_secs(60),
        "no change, write or reconcile while idle",
        || async {
            let after = versions().await;
            if after != before {
                let deployment_after = ns.api::<Deployment>().get("web").await.unwrap();
                return Err(format!(
                    "(MyApp, Deployment, Service) resourceVersions {before:?} -> {after:?}; Deployment before:\n{}\nafter:\n{}",
                    serde_json::to_string(&(
                        &deployment_before.metadata.managed_fields,
                        &deployment_before.status
                    ))
                    .unwrap(),
                    serde_json::to_string(&(
                        &deployment_after.metadata.managed_fields,
                        &deployment_after.status
                    ))
                    .unwrap(),
                ));
            }
            if writes() != writes_before {
                return Err(format!("the operator wrote {} times", writes() - writes_before));
            }
            let reconciles = operator.metrics.reconciles("myapp");
            (reconciles == reconciles_before)
                .then_some(())
                .ok_or(format!(
                    "the operator reconciled {} times",
                    reconciles - reconciles_before
                ))
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_rejects_invalid_myapps_with_the_schemas_message() {
    let ns = TestNamespace::new("myapp-invalid").await;
    support::install_crds().await;
    // Untyped: most of these do not even deserialize into the Rust type.
    let resource = kube::core::ApiResource::erase::<MyApp>(&());
    let apps: Api<kube::core::DynamicObject> =
        Api::namespaced_with(ns.client.clone(), &ns.name, &resource);
    let cases = [
        (json!({ "image": "nginx", "replicas": 0 }), "spec.replicas"),
        (
            json!({ "image": "nginx", "replicas": 101 }),
            "spec.replicas",
        ),
        (json!({ "image": "nginx latest" }), "spec.image"),
        (json!({ "image": "nginx", "port": 0 }), "spec.port"),
        (json!({ "image": "nginx", "port": 70000 }), "spec.port"),
        (
            json!({ "image": "nginx", "serviceType": "Foo" }),
            "spec.serviceType",
        ),
        (
            json!({ "image": "nginx", "resources": { "limits": { "cpu": "abc" } } }),
            "spec.resources.limits.cpu",
        ),
        (
            json!({ "image": "nginx", "resources": { "limits": { "cpu": -1 } } }),
            "a quantity cannot be negative",
        ),
        (
            json!({ "image": "nginx", "resources": { "requests": { "cpu": 3 }, "limits": { "cpu": "2" } } }),
            "resources.requests.cpu must be less than or equal to resources.limits.cpu",
        ),
        (
            json!({ "image": "nginx", "autoScaling": { "enabled": true, "minReplicas": 5, "maxReplicas": 2 } }),
            "minReplicas must be less than or equal to maxReplicas",
        ),
        (
            json!({ "image": "nginx", "env": [{ "name": "A", "value": "x", "valueFrom": { "configMapKeyRef": { "name": "c", "key": "k" } } }] }),
            "exactly one of value or valueFrom must be set",
        ),
        (
            json!({ "image": "nginx", "resources": { "requests": { "cpu": "1500m" }, "limits": { "cpu": "1" } } }),
            "resources.requests.cpu must be less than or equal to resources.limits.cpu",
        ),
        (
            json!({ "image": "nginx", "resources": { "requests": { "memory": "1Gi" }, "limits": { "memory": "512Mi" } } }),
            "resources.requests.memory must be less than or equal to resources.limits.memory",
        ),
    ];
    for (spec, expected) in cases {
        let bad: kube::core::DynamicObject = object(my_app_json("bad", spec.clone()));
        let error = rejection(apps.create(&PostParams::default(), &bad).await);
        assert_eq!(error.code, 422, "{spec}: {error:?}");
        assert!(
            error.message.contains(expected),
            "{spec}: {:?} does not mention {expected:?}",
            error.message
        );
    }
    // Requests equal to or below limits in other units are fine.
    let within = json!({ "image": "nginx", "resources": { "requests": { "cpu": "500m", "memory": "256Mi" }, "limits": { "cpu": "1", "memory": "1Gi" } } });
    apps.create(
        &PostParams::default(),
        &object(my_app_json("within", within)),
    )
    .await
    .unwrap();
    // A digest and an underscore are valid images (the seed's pattern refused them).
    let digest = "registry.example.com/team_a/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    ns.api::<MyApp>()
        .create(
            &PostParams::default(),
            &my_app("digest", json!({ "image": digest })),
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_myapp_garbage_collects_its_children_and_the_sample_applies() {
    let ns = TestNamespace::new("myapp-delete").await;
    let _operator = support::start(&ns, &[ControllerKind::Myapp]).await;
    let sample = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../config/samples/example_v1_myapp.yaml"
    );
    kubectl_ok(&["apply", "-n", &ns.name, "-f", sample]);
    let apps = ns.api::<MyApp>();
    let name = "myapp-sample";
    let patch = json!({ "spec": { "autoScaling": { "enabled": true, "maxReplicas": 4 } } });
    apps.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let hpas = ns.api::<HorizontalPodAutoscaler>();
    eventually(TIMEOUT, "the HPA", || async {
        hpas.get_opt(name).await.ok().flatten()
    })
    .await;

    apps.delete(name, &DeleteParams::background())
        .await
        .unwrap();
    eventually(
        TIMEOUT,
        "the Deployment, Service and HPA to be garbage-collected",
        || async {
            let deployment = ns.api::<Deployment>().get_opt(name).await.ok()?;
            let service = ns.api::<Service>().get_opt(name).await.ok()?;
            let hpa = hpas.get_opt(name).await.ok()?;
            (deployment.is_none() && service.is_none() && hpa.is_none()).then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_myapp_deleted_in_the_foreground_is_not_rebuilt_while_it_goes() {
    let ns = TestNamespace::new("myapp-foreground").await;
    let _operator = support::start(&ns, &[ControllerKind::Myapp]).await;
    let apps = ns.api::<MyApp>();
    apps.create(
        &PostParams::default(),
        &my_app("web", json!({ "replicas": 1, "image": "nginx:1.27" })),
    )
    .await
    .unwrap();
    wait_ready(&apps, "web", 1).await;

    // Every Deployment `web` that ever exists, by UID.
    let seen = std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::new()));
    let config = watcher::Config::default().fields("metadata.name=web");
    let events = watcher(ns.api::<Deployment>(), config).applied_objects();
    let recorder = Watch::spawn("Deployment web", events, {
        let seen = seen.clone();
        move |deployment| {
            seen.lock()
                .unwrap()
                .insert(deployment.uid().unwrap_or_default());
            async {}
        }
    });
    eventually(TIMEOUT, "the watch to see the Deployment", || async {
        recorder.assert_alive();
        (!seen.lock().unwrap().is_empty()).then_some(())
    })
    .await;

    // Foreground: the garbage collector deletes the children first, while the MyApp (marked
    // for deletion) still exists and its controller is woken by each child's deletion.
    apps.delete("web", &DeleteParams::foreground())
        .await
        .unwrap();
    eventually(TIMEOUT, "the MyApp to be gone", || async {
        apps.get_opt("web").await.ok()?.is_none().then_some(())
    })
    .await;
    stays_for(
        Duration::from_secs(2),
        "the Deployment not re-created while its MyApp was being deleted",
        || async {
            recorder.alive()?;
            let seen = seen.lock().unwrap();
            (seen.len() == 1)
                .then_some(())
                .ok_or(format!("Deployments web by UID: {seen:?}"))
        },
    )
    .await;
    recorder.stop().await;
    assert!(
        ns.api::<Deployment>()
            .get_opt("web")
            .await
            .unwrap()
            .is_none()
    );
    assert!(ns.api::<Service>().get_opt("web").await.unwrap().is_none());
}
