use app_operator_api::conditions::{PROGRESSING, READY};
use app_operator_api::{AppCluster, AppClusterStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::pods::{IMAGE, selector};
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
        image: Some(IMAGE.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use app_operator_api::conditions::{Condition, DEGRADED};
    use k8s_openapi::jiff::Timestamp;
    use serde_json::json;

    use super::*;

    fn time(seconds: i64) -> Time {
        Time(Timestamp::constant(seconds, 0))
    }

    fn cluster(size: i32) -> AppCluster {
        serde_json::from_value(json!({
            "apiVersion": "demo.demo.io/v1",
            "kind": "AppCluster",
            "metadata": {
                "name": "appcluster-sample",
                "namespace": "demo",
                "uid": "00000000-0000-4000-8000-000000000003",
                "generation": 7
            },
            "spec": { "size": size }
        }))
        .expect("an AppCluster")
    }

    fn create_forbidden() -> Error {
        let status: kube::core::Status = serde_json::from_value(json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 403,
            "reason": "Forbidden", "message": "pods \"appcluster-sample-pod-x\" is forbidden: exceeded quota"
        }))
        .expect("a Status");
        Error::CreatePod {
            source: kube::Error::Api(status.boxed()),
        }
    }

    fn condition<'a>(status: &'a AppClusterStatus, type_: &str) -> &'a Condition {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
            .unwrap_or_else(|| panic!("no {type_} condition in {status:?}"))
    }

    #[test]
    fn conditions_by_active_and_ready_pods() {
        const NOT_READY: (&str, &str) = ("False", "PodsNotReady");
        const SCALING: (&str, &str) = ("True", "Scaling");
        const PODS_READY: (&str, &str) = ("True", "PodsReady");
        const SCALED: (&str, &str) = ("False", "Scaled");
        const HEALTHY: (&str, &str) = ("False", "ReconcileSuccess");
        // (case, size, active, ready, error, [Ready, Progressing, Degraded], Progressing message)
        let cases = [
            (
                "0 of 3",
                3,
                0,
                0,
                None,
                [NOT_READY, SCALING, HEALTHY],
                "0 pods for size 3, 0 of 3 pods ready",
            ),
            (
                "all created, 1 of 3 ready",
                3,
                3,
                1,
                None,
                [NOT_READY, SCALING, HEALTHY],
                "3 pods for size 3, 1 of 3 pods ready",
            ),
            (
                "2 of 3 created, both ready",
                3,
                2,
                2,
                None,
                [NOT_READY, SCALING, HEALTHY],
                "2 pods for size 3, 2 of 3 pods ready",
            ),
            (
                "scaling down: 3 of 3 ready, one too many",
                3,
                4,
                3,
                None,
                [NOT_READY, SCALING, HEALTHY],
                "4 pods for size 3, 3 of 3 pods ready",
            ),
            (
                "all ready",
                3,
                3,
                3,
                None,
                [PODS_READY, SCALED, HEALTHY],
                "3 of 3 pods ready",
            ),
            (
                "size 0, no pods",
                0,
                0,
                0,
                None,
                [PODS_READY, SCALED, HEALTHY],
                "0 of 0 pods ready",
            ),
            (
                "a Pod could not be created",
                3,
                2,
                2,
                Some(create_forbidden()),
                [NOT_READY, SCALING, ("True", "PodCreateFailed")],
                "2 pods for size 3, 2 of 3 pods ready",
            ),
            (
                "all ready, but the reconcile failed",
                3,
                3,
                3,
                Some(Error::MissingMetadata("uid")),
                [PODS_READY, SCALED, ("True", "InvalidObject")],
                "3 of 3 pods ready",
            ),
        ];
        for (name, size, active, ready, error, expected, progressing_message) in cases {
            let cluster = cluster(size);
            let status = status(&cluster, active, ready, error.as_ref(), &time(100));
            let got = [READY, PROGRESSING, DEGRADED].map(|t| {
                let c = condition(&status, t);
                (c.status.as_str(), c.reason.as_str())
            });
            assert_eq!(got, expected, "{name}");
            assert_eq!(
                condition(&status, PROGRESSING).message,
                progressing_message,
                "{name}"
            );
            assert_eq!(
                condition(&status, READY).message,
                format!("{ready} of {size} pods ready"),
                "{name}"
            );
            let degraded_message = error
                .as_ref()
                .map_or_else(|| "pods reconciled".to_owned(), ToString::to_string);
            assert_eq!(
                condition(&status, DEGRADED).message,
                degraded_message,
                "{name}"
            );
            assert_eq!(status.ready, i32::try_from(ready).unwrap(), "{name}");
            assert_eq!(status.observed_generation, Some(7), "{name}");
            assert!(
                status
                    .conditions
                    .iter()
                    .all(|c| c.observed_generation == Some(7)),
                "{name}"
            );
            assert_eq!(
                status.selector.as_deref(),
                Some("app=appcluster-sample"),
                "{name}"
            );
        }
    }

    #[test]
    fn the_transition_time_moves_only_when_a_condition_flips() {
        let mut cluster = cluster(3);
        let transitions = |status: &AppClusterStatus| {
            [READY, PROGRESSING, DEGRADED]
                .map(|t| condition(status, t).last_transition_time.clone())
        };

        let created = status(&cluster, 0, 0, None, &time(10));
        assert_eq!(transitions(&created), [time(10), time(10), time(10)]);
        cluster.status = Some(created);

        let partial = status(&cluster, 3, 2, None, &time(20));
        assert_eq!(transitions(&partial), [time(10), time(10), time(10)]);
        cluster.status = Some(partial);

        let settled = status(&cluster, 3, 3, None, &time(30));
        assert_eq!(transitions(&settled), [time(30), time(30), time(10)]);
        cluster.status = Some(settled);

        let failed = status(&cluster, 3, 3, Some(&create_forbidden()), &time(40));
        assert_eq!(transitions(&failed), [time(30), time(30), time(40)]);
    }
}
