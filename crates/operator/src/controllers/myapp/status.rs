use app_operator_api::conditions::{PROGRESSING, READY};
use app_operator_api::{MyApp, MyAppStatus};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::labels::selector_string;
use crate::reconcile::Error;
use crate::reconcile::conditions::{Desired, degraded, set};

/// The status a MyApp should have, given its Deployment as last seen and the reconcile's error.
/// `lastUpdateTime` is carried over: the caller stamps it only when the status really changes.
pub fn status(
    app: &MyApp,
    deployment: Option<&Deployment>,
    error: Option<&Error>,
    now: &Time,
) -> MyAppStatus {
    let previous = app.status.clone().unwrap_or_default();
    let generation = app.metadata.generation;
    let observed = deployment.and_then(|d| d.status.as_ref());
    let count = |field: fn(&k8s_openapi::api::apps::v1::DeploymentStatus) -> Option<i32>| {
        observed.and_then(field).unwrap_or(0)
    };
    let ready_replicas = count(|s| s.ready_replicas);
    let updated_replicas = count(|s| s.updated_replicas);
    let total_replicas = count(|s| s.replicas);
    // While the HPA owns `replicas`, the Deployment's value is the one to meet.
    let desired = deployment
        .and_then(|d| d.spec.as_ref()?.replicas)
        .unwrap_or(app.spec.replicas);
    let deployment_current = deployment.is_some_and(|d| {
        let observed_generation = d.status.as_ref().and_then(|s| s.observed_generation);
        observed_generation.is_some() && observed_generation >= d.metadata.generation
    });
    let rolled_out = deployment_current
        && updated_replicas >= desired
        && ready_replicas >= desired
        && total_replicas == updated_replicas;
    let replicas_message = format!("{ready_replicas} of {desired} replicas ready");

    let ready = match error {
        Some(error) => Desired {
            type_: READY,
            status: false,
            reason: error.reason(),
            message: error.to_string(),
        },
        None if rolled_out => Desired {
            type_: READY,
            status: true,
            reason: "DeploymentReady",
            message: replicas_message.clone(),
        },
        None => Desired {
            type_: READY,
            status: false,
            reason: "ReplicasNotReady",
            message: replicas_message.clone(),
        },
    };
    let progressing = match error {
        Some(error) => Desired {
            type_: PROGRESSING,
            status: false,
            reason: error.reason(),
            message: error.to_string(),
        },
        None if rolled_out => Desired {
            type_: PROGRESSING,
            status: false,
            reason: "RolloutComplete",
            message: replicas_message,
        },
        None => Desired {
            type_: PROGRESSING,
            status: true,
            reason: "RollingOut",
            message: replicas_message,
        },
    };
    let degraded = degraded(error, "all children applied");
    MyAppStatus {
        conditions: [ready, progressing, degraded]
            .into_iter()
            .map(|desired| set(&previous.conditions, desired, generation, now))
            .collect(),
        ready_replicas,
        available_replicas: count(|s| s.available_replicas),
        observed_generation: generation,
        last_update_time: previous.last_update_time,
        selector: Some(selector_string(app)),
    }
}
