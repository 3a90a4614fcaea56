use app_operator_api::conditions::{PROGRESSING, READY};
use app_operator_api::{AppCluster, AppClusterStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::pods::selector;
use crate::reconcile::Error;
use crate::reconcile::conditions::{Desired, degraded, set};

/// The status an AppCluster should have given how many of its Pods exist (active) and are Ready.
pub fn status(
    cluster: &AppCluster,
    active: usize,
    ready: usize,
    error: Option<&Error>,
    now: &Time,
) -> AppClusterStatus {
    let previous = cluster.status.clone().unwrap_or_default();
    let size = usize::try_from(cluster.spec.size).unwrap_or(0);
    let ready_count = i32::try_from(ready).unwrap_or(i32::MAX);
    let message = format!("{ready} of {size} pods ready");
    let settled = active == size && ready == size;
    let desired = [
        if settled {
            Desired {
                type_: READY,
                status: true,
                reason: "PodsReady",
                message: message.clone(),
            }
        } else {
            Desired {
                type_: READY,
                status: false,
                reason: "PodsNotReady",
                message: message.clone(),
            }
        },
        if settled {
            Desired {
                type_: PROGRESSING,
                status: false,
                reason: "Scaled",
                message: message.clone(),
            }
        } else {
            Desired {
                type_: PROGRESSING,
                status: true,
                reason: "Scaling",
                message: format!("{active} pods for size {size}, {message}"),
            }
        },
        degraded(error, "pods reconciled"),
    ];
    AppClusterStatus {
        ready: ready_count,
        conditions: desired
            .into_iter()
            .map(|d| set(&previous.conditions, d, cluster.metadata.generation, now))
            .collect(),
        observed_generation: cluster.metadata.generation,
        selector: Some(selector(cluster)),
    }
}
