//! The local control plane is a real one: the scheduler places Pods on the kwok Node, kwok makes
//! them Ready, the controller manager runs Deployments, Jobs and garbage collection, and RBAC is
//! enforced.

use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, PostParams};
use testkit::{TestNamespace, eventually, object};

const TIMEOUT: Duration = Duration::from_secs(60);

fn pod_is_ready(pod: &Pod) -> bool {
    let status = pod.status.as_ref();
    status.and_then(|s| s.phase.as_deref()) == Some("Running")
        && status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn web_deployment() -> Deployment {
    object(serde_json::json!({
        "metadata": { "name": "web" },
        "spec": {
            "replicas": 2,
            "selector": { "matchLabels": { "app": "web" } },
            "template": {
                "metadata": { "labels": { "app": "web" } },
                "spec": { "containers": [{ "name": "nginx", "image": "nginx:latest" }] }
            }
        }
    }))
}

#[tokio::test]
async fn deployment_pods_are_scheduled_on_the_kwok_node_and_become_ready() {
    let ns = TestNamespace::new("smoke-deploy").await;
    let deployments = ns.api::<Deployment>();
    deployments
        .create(&PostParams::default(), &web_deployment())
        .await
        .unwrap();

    let ready = eventually(TIMEOUT, "deployment web readyReplicas == 2", || async {
        let d = deployments.get("web").await.ok()?;
        let status = d.status?;
        (status.ready_replicas? == 2).then_some(status)
    })
    .await;
    assert_eq!(
        (ready.replicas, ready.available_replicas),
        (Some(2), Some(2)),
        "both replicas of web exist and are available"
    );

    let pods = ns
        .api::<Pod>()
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap();
    assert_eq!(pods.items.len(), 2);
    for pod in &pods.items {
        let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
        assert!(
            node.is_some_and(|n| n.starts_with("kwok-node-")),
            "scheduled on {node:?}"
        );
        assert!(
            pod_is_ready(pod),
            "pod {:?} is not Running and Ready",
            pod.metadata.name
        );
    }
}

#[tokio::test]
async fn deleting_a_deployment_garbage_collects_its_replicaset_and_pods() {
    let ns = TestNamespace::new("smoke-gc").await;
    let deployments = ns.api::<Deployment>();
    let replica_sets = ns.api::<ReplicaSet>();
    let pods = ns.api::<Pod>();
    deployments
        .create(&PostParams::default(), &web_deployment())
        .await
        .unwrap();
    eventually(TIMEOUT, "2 pods of deployment web", || async {
        let list = pods
            .list(&ListParams::default().labels("app=web"))
            .await
            .ok()?;
        (list.items.len() == 2).then_some(())
    })
    .await;
    assert_eq!(
        replica_sets
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );

    deployments
        .delete("web", &DeleteParams::background())
        .await
        .unwrap();

    eventually(
        TIMEOUT,
        "the ReplicaSet and Pods to be garbage-collected",
        || async {
            let sets = replica_sets.list(&ListParams::default()).await.ok()?;
            let remaining = pods
                .list(&ListParams::default().labels("app=web"))
                .await
                .ok()?;
            (sets.items.is_empty() && remaining.items.is_empty()).then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn a_job_pod_completes_and_the_job_succeeds() {
    let ns = TestNamespace::new("smoke-job").await;
    let jobs = ns.api::<Job>();
    let job: Job = object(serde_json::json!({
        "metadata": { "name": "once" },
        "spec": {
            "backoffLimit": 0,
            "template": { "spec": {
                "restartPolicy": "Never",
                "containers": [{ "name": "main", "image": "busybox", "command": ["true"] }]
            }}
        }
    }));
    jobs.create(&PostParams::default(), &job).await.unwrap();

    let succeeded = eventually(TIMEOUT, "job once to succeed", || async {
        jobs.get("once")
            .await
            .ok()?
            .status?
            .succeeded
            .filter(|n| *n >= 1)
    })
    .await;
    assert_eq!(succeeded, 1);
    let pods = ns
        .api::<Pod>()
        .list(&ListParams::default().labels("job-name=once"))
        .await
        .unwrap();
    let phases: Vec<_> = pods
        .items
        .iter()
        .filter_map(|p| p.status.as_ref()?.phase.clone())
        .collect();
    assert_eq!(phases, ["Succeeded"]);
}

#[tokio::test]
async fn rbac_is_enforced_for_a_service_account_without_permissions() {
    let ns = TestNamespace::new("smoke-rbac").await;
    let nobody = format!("system:serviceaccount:{}:nobody", ns.name);
    let client =
        testkit::client_as(&nobody, &["system:serviceaccounts", "system:authenticated"]).await;
    let pods: kube::Api<Pod> = kube::Api::namespaced(client, &ns.name);

    let error = pods
        .list(&ListParams::default())
        .await
        .expect_err("listing pods must be forbidden");
    match error {
        kube::Error::Api(status) => assert_eq!(status.code, 403, "{status:?}"),
        other => panic!("expected a 403 from the API server, got {other}"),
    }
    // The admin can, so the 403 is RBAC and not a broken namespace.
    assert!(ns.api::<Pod>().list(&ListParams::default()).await.is_ok());
}
