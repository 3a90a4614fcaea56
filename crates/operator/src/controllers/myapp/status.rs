use app_operator_api::conditions::{PROGRESSING, READY};
use app_operator_api::{MyApp, MyAppStatus};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ContainerStateWaiting, ContainerStatus, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use super::labels::selector_string;
use crate::reconcile::Error;
use crate::reconcile::conditions::{Desired, degraded, set};

/// A container the kubelet cannot start, in its words: why a MyApp is not Ready when its Pods
/// exist but do not run (a missing Secret, an image that cannot be pulled, a crash loop).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    pub pod: String,
    pub container: String,
    /// The kubelet's reason: `CreateContainerConfigError`, `ImagePullBackOff`, …
    pub reason: String,
    pub message: String,
}

/// Waiting reasons that are progress (creating, initialising), not a problem.
const PROGRESS: &[&str] = &["ContainerCreating", "PodInitializing"];

/// Every container of `pods` that waits, with its Pod.
fn waiting(pods: &[Pod]) -> impl Iterator<Item = (&Pod, &ContainerStatus, &ContainerStateWaiting)> {
    pods.iter().flat_map(|pod| {
        let status = pod.status.as_ref();
        let init = status.and_then(|s| s.init_container_statuses.as_ref());
        let main = status.and_then(|s| s.container_statuses.as_ref());
        init.into_iter()
            .flatten()
            .chain(main.into_iter().flatten())
            .filter_map(move |container| {
                let waiting = container.state.as_ref()?.waiting.as_ref()?;
                Some((pod, container, waiting))
            })
    })
}

/// The first container of `pods` that waits for something other than its own start.
pub fn waiting_container(pods: &[Pod]) -> Option<Waiting> {
    waiting(pods).find_map(|(pod, container, waiting)| {
        let reason = waiting
            .reason
            .clone()
            .filter(|r| !PROGRESS.contains(&r.as_str()))?;
        Some(Waiting {
            pod: pod.name_any(),
            container: container.name.clone(),
            reason,
            message: waiting.message.clone().unwrap_or_default(),
        })
    })
}

/// Whether a container of `pods` is still being created, or a Pod has no container status yet
/// (the kubelet has not reported it): the kubelet may yet find it cannot start (a missing
/// Secret), which changes no Deployment field and so wakes nobody.
pub fn starting(pods: &[Pod]) -> bool {
    let unreported = pods.iter().any(|pod| {
        pod.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .is_none_or(Vec::is_empty)
    });
    unreported || waiting(pods).next().is_some()
}

/// Whether the Deployment's status counts Pods of it. Until its ReplicaSet has made one, no Pod
/// can say why the MyApp is not Ready, and the status change that counts the first one wakes
/// the MyApp: a look at the Pods before that lists a namespace for nothing.
pub fn has_pods(deployment: Option<&Deployment>) -> bool {
    deployment
        .and_then(|d| d.status.as_ref())
        .and_then(|s| s.replicas)
        .is_some_and(|replicas| replicas > 0)
}

/// The status a MyApp should have, given its Deployment as last seen, a container of its that
/// cannot start (if one was looked for) and the reconcile's error. `lastUpdateTime` is carried
/// over: the caller stamps it only when the status really changes.
pub fn status(
    app: &MyApp,
    deployment: Option<&Deployment>,
    waiting: Option<&Waiting>,
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
        None => match waiting {
            Some(waiting) => Desired {
                type_: READY,
                status: false,
                reason: waiting.reason.as_str(),
                message: format!(
                    "{replicas_message}; Pod {} container {}: {}",
                    waiting.pod, waiting.container, waiting.message
                ),
            },
            None => Desired {
                type_: READY,
                status: false,
                reason: "ReplicasNotReady",
                message: replicas_message.clone(),
            },
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

#[cfg(test)]
mod tests {
    use app_operator_api::conditions::{Condition, DEGRADED};
    use k8s_openapi::jiff::Timestamp;
    use serde_json::json;

    use super::super::labels::tests::minimal_app;
    use super::*;

    fn time(seconds: i64) -> Time {
        Time(Timestamp::constant(seconds, 0))
    }

    /// A MyApp asking for 3 replicas, at generation 2.
    fn app() -> MyApp {
        let mut app = minimal_app();
        app.spec.replicas = 3;
        app.metadata.generation = Some(2);
        app
    }

    /// The Deployment as the watch shows it. `generation`/`observed` are the Deployment's own
    /// generation and the one its controller last observed; `spec_replicas` is what it is asked
    /// for (the MyApp's replicas, or the HPA's choice), the rest are its status counts.
    struct Seen {
        generation: i64,
        observed: i64,
        spec_replicas: i32,
        replicas: i32,
        updated: i32,
        ready: i32,
        available: i32,
    }

    fn deployment(seen: Seen) -> Deployment {
        serde_json::from_value(json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": { "name": "web", "namespace": "demo", "generation": seen.generation },
            "spec": {
                "replicas": seen.spec_replicas,
                "selector": { "matchLabels": { "app.kubernetes.io/name": "web" } },
                "template": { "spec": { "containers": [{ "name": "app" }] } }
            },
            "status": {
                "observedGeneration": seen.observed,
                "replicas": seen.replicas,
                "updatedReplicas": seen.updated,
                "readyReplicas": seen.ready,
                "availableReplicas": seen.available
            }
        }))
        .expect("a Deployment")
    }

    /// A Deployment at generation 1 that observed it, asked for `spec_replicas`, with `ready` of
    /// them ready and all of them updated.
    fn rolled(spec_replicas: i32, ready: i32) -> Deployment {
        deployment(Seen {
            generation: 1,
            observed: 1,
            spec_replicas,
            replicas: spec_replicas,
            updated: spec_replicas,
            ready,
            available: ready,
        })
    }

    /// Pods are looked at only once the Deployment counts some: before, none can be found.
    #[test]
    fn pods_are_looked_at_once_the_deployment_counts_some() {
        assert!(!has_pods(None));
        let mut unreported = rolled(1, 0);
        unreported.status = None;
        assert!(!has_pods(Some(&unreported)));
        let none_yet = deployment(Seen {
            generation: 1,
            observed: 1,
            spec_replicas: 1,
            replicas: 0,
            updated: 0,
            ready: 0,
            available: 0,
        });
        assert!(!has_pods(Some(&none_yet)));
        assert!(has_pods(Some(&rolled(1, 0))));
    }

    fn conflict() -> Error {
        Error::Conflict {
            kind: "Service".into(),
            name: "web".into(),
        }
    }

    fn apply_forbidden() -> Error {
        let status: kube::core::Status = serde_json::from_value(json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 403,
            "reason": "Forbidden",
            "message": "deployments.apps \"web\" is forbidden: exceeded quota: compute"
        }))
        .expect("a Status");
        Error::Apply {
            kind: "Deployment".into(),
            name: "web".into(),
            source: kube::Error::Api(status.boxed()),
        }
    }

    fn condition<'a>(status: &'a MyAppStatus, type_: &str) -> &'a Condition {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
            .unwrap_or_else(|| panic!("no {type_} condition in {status:?}"))
    }

    struct Case {
        name: &'static str,
        deployment: Option<Deployment>,
        error: Option<Error>,
        /// (status, reason) of Ready, Progressing, Degraded.
        ready: (&'static str, &'static str),
        progressing: (&'static str, &'static str),
        degraded: (&'static str, &'static str),
        ready_replicas: i32,
        available_replicas: i32,
        /// Ready's message (its start, when there is an error).
        message: &'static str,
    }

    const NOT_READY: (&str, &str) = ("False", "ReplicasNotReady");
    const ROLLING_OUT: (&str, &str) = ("True", "RollingOut");
    const HEALTHY: (&str, &str) = ("False", "ReconcileSuccess");

    #[test]
    fn conditions_across_a_rollout() {
        let cases = [
            Case {
                name: "no Deployment yet",
                deployment: None,
                error: None,
                ready: NOT_READY,
                progressing: ROLLING_OUT,
                degraded: HEALTHY,
                ready_replicas: 0,
                available_replicas: 0,
                message: "0 of 3 replicas ready",
            },
            Case {
                name: "Deployment with 0 of 3 ready",
                deployment: Some(rolled(3, 0)),
                error: None,
                ready: NOT_READY,
                progressing: ROLLING_OUT,
                degraded: HEALTHY,
                ready_replicas: 0,
                available_replicas: 0,
                message: "0 of 3 replicas ready",
            },
            Case {
                name: "2 of 3 ready",
                deployment: Some(rolled(3, 2)),
                error: None,
                ready: NOT_READY,
                progressing: ROLLING_OUT,
                degraded: HEALTHY,
                ready_replicas: 2,
                available_replicas: 2,
                message: "2 of 3 replicas ready",
            },
            Case {
                name: "old replicas ready, 1 of 3 updated",
                deployment: Some(deployment(Seen {
                    generation: 2,
                    observed: 2,
                    spec_replicas: 3,
                    replicas: 4,
                    updated: 1,
                    ready: 3,
                    available: 3,
                })),
                error: None,
                ready: NOT_READY,
                progressing: ROLLING_OUT,
                degraded: HEALTHY,
                ready_replicas: 3,
                available_replicas: 3,
                message: "3 of 3 replicas ready",
            },
            Case {
                name: "all updated and ready, an old replica still there",
                deployment: Some(deployment(Seen {
                    generation: 2,
                    observed: 2,
                    spec_replicas: 3,
                    replicas: 4,
                    updated: 3,
                    ready: 3,
                    available: 3,
                })),
                error: None,
                ready: NOT_READY,
                progressing: ROLLING_OUT,
                degraded: HEALTHY,
                ready_replicas: 3,
                available_replicas: 3,
                message: "3 of 3 replicas ready",
            },
            Case {
                name: "all ready, but the Deployment's new generation not yet observed",
                deployment: Some(deployment(Seen {
                    generation: 3,
                    observed: 2,
                    spec_replicas: 3,
                    replicas: 3,
                    updated: 3,
                    ready: 3,
                    available: 3,
                })),
                error: None,
                ready: NOT_READY,
                progressing: ROLLING_OUT,
                degraded: HEALTHY,
                ready_replicas: 3,
                available_replicas: 3,
                message: "3 of 3 replicas ready",
            },
            Case {
                name: "all ready, observedGeneration matching",
                deployment: Some(rolled(3, 3)),
                error: None,
                ready: ("True", "DeploymentReady"),
                progressing: ("False", "RolloutComplete"),
                degraded: HEALTHY,
                ready_replicas: 3,
                available_replicas: 3,
                message: "3 of 3 replicas ready",
            },
            Case {
                name: "all ready, but a child conflicts",
                deployment: Some(rolled(3, 3)),
                error: Some(conflict()),
                ready: ("False", "ChildConflict"),
                progressing: ("False", "ChildConflict"),
                degraded: ("True", "ChildConflict"),
                ready_replicas: 3,
                available_replicas: 3,
                message: "Service web already exists and is not controlled by this resource; it is left alone (delete or rename it to let the operator manage it)",
            },
            Case {
                name: "no Deployment, its apply refused",
                deployment: None,
                error: Some(apply_forbidden()),
                ready: ("False", "ApplyFailed"),
                progressing: ("False", "ApplyFailed"),
                degraded: ("True", "ApplyFailed"),
                ready_replicas: 0,
                available_replicas: 0,
                message: "applying Deployment web: ",
            },
            Case {
                name: "HPA scaled up to 5: 3 ready is not enough",
                deployment: Some(rolled(5, 3)),
                error: None,
                ready: NOT_READY,
                progressing: ROLLING_OUT,
                degraded: HEALTHY,
                ready_replicas: 3,
                available_replicas: 3,
                message: "3 of 5 replicas ready",
            },
            Case {
                name: "HPA scaled down to 2: 2 ready is enough",
                deployment: Some(rolled(2, 2)),
                error: None,
                ready: ("True", "DeploymentReady"),
                progressing: ("False", "RolloutComplete"),
                degraded: HEALTHY,
                ready_replicas: 2,
                available_replicas: 2,
                message: "2 of 2 replicas ready",
            },
        ];
        let app = app();
        for case in cases {
            let name = case.name;
            let status = status(
                &app,
                case.deployment.as_ref(),
                None,
                case.error.as_ref(),
                &time(100),
            );
            let got = |type_| {
                let c = condition(&status, type_);
                (c.status.as_str(), c.reason.as_str())
            };
            assert_eq!(got(READY), case.ready, "{name}: Ready");
            assert_eq!(got(PROGRESSING), case.progressing, "{name}: Progressing");
            assert_eq!(got(DEGRADED), case.degraded, "{name}: Degraded");
            assert_eq!(status.ready_replicas, case.ready_replicas, "{name}");
            assert_eq!(status.available_replicas, case.available_replicas, "{name}");
            let message = &condition(&status, READY).message;
            match &case.error {
                Some(error) => {
                    // The error's own text (its source's text is kube's to format).
                    assert!(message.starts_with(case.message), "{name}: {message}");
                    assert_eq!(*message, error.to_string(), "{name}");
                    assert_eq!(
                        condition(&status, DEGRADED).message,
                        error.to_string(),
                        "{name}"
                    );
                }
                None => {
                    assert_eq!(message, case.message, "{name}");
                    assert_eq!(
                        condition(&status, PROGRESSING).message,
                        case.message,
                        "{name}"
                    );
                    assert_eq!(
                        condition(&status, DEGRADED).message,
                        "all children applied",
                        "{name}"
                    );
                }
            }
            assert_eq!(status.observed_generation, Some(2), "{name}");
            let types: Vec<_> = status.conditions.iter().map(|c| c.type_.as_str()).collect();
            assert_eq!(types, [READY, PROGRESSING, DEGRADED], "{name}");
            assert!(
                status
                    .conditions
                    .iter()
                    .all(|c| c.observed_generation == Some(2)),
                "{name}: the conditions observed the MyApp's generation"
            );
            assert_eq!(
                status.selector.as_deref(),
                Some("app.kubernetes.io/instance=web,app.kubernetes.io/name=web"),
                "{name}"
            );
        }
    }

    #[test]
    fn the_transition_time_moves_only_when_a_condition_flips() {
        let mut app = app();
        let transitions = |status: &MyAppStatus| {
            [READY, PROGRESSING, DEGRADED]
                .map(|t| condition(status, t).last_transition_time.clone())
        };

        let created = status(&app, None, None, None, &time(10));
        assert_eq!(transitions(&created), [time(10), time(10), time(10)]);
        app.status = Some(MyAppStatus {
            last_update_time: Some(time(11)),
            ..created
        });

        // Still rolling out: nothing flips, however the counts and messages change.
        let rolling = status(&app, Some(&rolled(3, 1)), None, None, &time(20));
        assert_eq!(transitions(&rolling), [time(10), time(10), time(10)]);
        assert_eq!(rolling.ready_replicas, 1);
        assert_eq!(rolling.last_update_time, Some(time(11)));
        app.status = Some(rolling);

        // Rolled out: Ready and Progressing flip, Degraded stays False.
        let done = status(&app, Some(&rolled(3, 3)), None, None, &time(30));
        assert_eq!(transitions(&done), [time(30), time(30), time(10)]);
        app.status = Some(done);

        // A conflict: Ready and Degraded flip, Progressing stays False (with another reason).
        let failed = status(
            &app,
            Some(&rolled(3, 3)),
            None,
            Some(&conflict()),
            &time(40),
        );
        assert_eq!(transitions(&failed), [time(40), time(30), time(40)]);
        assert_eq!(condition(&failed, PROGRESSING).reason, "ChildConflict");
        assert_eq!(failed.last_update_time, Some(time(11)));
    }

    fn pod(name: &str, init: Option<(&str, &str)>, app: Option<(&str, &str)>) -> Pod {
        let status = |waiting: Option<(&str, &str)>, name: &str| {
            json!([{
                "name": name, "image": "x", "imageID": "", "ready": false, "restartCount": 0,
                "state": match waiting {
                    Some((reason, message)) => json!({ "waiting": { "reason": reason, "message": message } }),
                    None => json!({ "running": {} }),
                },
            }])
        };
        serde_json::from_value(json!({
            "metadata": { "name": name },
            "status": {
                "initContainerStatuses": status(init, "init"),
                "containerStatuses": status(app, "app"),
            },
        }))
        .unwrap()
    }

    #[test]
    fn a_container_that_cannot_start_is_the_reason_a_myapp_is_not_ready() {
        let secret = ("CreateContainerConfigError", "secret \"db\" not found");
        let pods = [
            pod("web-a", None, Some(("ContainerCreating", ""))),
            pod("web-b", None, Some(secret)),
        ];
        let waiting = waiting_container(&pods).unwrap();
        assert_eq!(
            (
                waiting.pod.as_str(),
                waiting.container.as_str(),
                waiting.reason.as_str()
            ),
            ("web-b", "app", "CreateContainerConfigError")
        );
        // Progress is no problem, but it is looked at again: it may become one.
        assert_eq!(waiting_container(&pods[..1]), None);
        assert!(starting(&pods[..1]));
        assert!(!starting(&[pod("web-d", None, None)]), "all running");
        // Created, not yet reported by the kubelet (seen under load): looked at again too.
        let unreported: Pod = serde_json::from_value(json!({
            "metadata": { "name": "web-e" }, "status": { "phase": "Pending" }
        }))
        .unwrap();
        assert!(starting(&[unreported]));
        let init = [pod("web-c", Some(("ImagePullBackOff", "not found")), None)];
        assert_eq!(waiting_container(&init).unwrap().container, "init");

        let stuck = status(&app(), Some(&rolled(3, 1)), Some(&waiting), None, &time(20));
        let ready = condition(&stuck, READY);
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "CreateContainerConfigError")
        );
        assert_eq!(
            ready.message,
            "1 of 3 replicas ready; Pod web-b container app: secret \"db\" not found"
        );
        // Rolled out, a waiting container (a stale look) does not make it not Ready.
        let done = status(&app(), Some(&rolled(3, 3)), Some(&waiting), None, &time(30));
        assert_eq!(condition(&done, READY).status, "True");
    }
}
