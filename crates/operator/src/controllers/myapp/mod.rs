//! The MyApp controller: a Deployment, a Service and (while autoscaling is enabled) an HPA per
//! MyApp, applied with server-side apply; status from the Deployment.

mod deployment;
mod hpa;
mod labels;
mod service;
mod status;

pub use deployment::deployment;
pub use hpa::hpa;
pub use service::service;

use std::time::Duration;

use app_operator_api::conditions::READY;
use app_operator_api::{MyApp, MyAppStatus};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Client, ResourceExt};

use self::service::ports_drifted;
use self::status::{has_pods, starting, status, waiting_container};
use super::Wiring;
use crate::mutation::{self, Mutation};
use crate::reconcile::apply::is_controlled_by;
use crate::reconcile::children::{ChildChange, OnImmutable, Owned, Verb, describe};
use crate::reconcile::conditions::is_true;
use crate::reconcile::runner::{Announcement, Reconciled, Reconciler, Runner, Target};
use crate::reconcile::{Error, FIELD_MANAGER};

pub const NAME: &str = "myapp";

/// The field manager that holds a Deployment's `replicas` while autoscaling takes it over (the
/// Kubernetes docs' "transferring ownership", `handover-to-hpa`).
pub const HANDOVER_MANAGER: &str = "app-operator-handover-to-hpa";

/// A MyApp's children. Destructured without `..` where they are applied, so a new child kind
/// cannot be built and forgotten.
pub struct Children {
    pub service: Service,
    pub deployment: Deployment,
    pub hpa: Option<HorizontalPodAutoscaler>,
}

/// Everything a MyApp's spec asks for, built without I/O.
pub fn children(app: &MyApp, owner: &OwnerReference) -> Children {
    Children {
        service: service(app, owner.clone()),
        deployment: deployment(app, owner.clone()),
        hpa: hpa(app, owner.clone()),
    }
}

pub async fn run(wiring: Wiring, shutdown: impl Future<Output = ()> + Send + Sync + 'static) {
    let settings = wiring.settings;
    let mut runner = Runner::<MyApp>::new(NAME, &settings);
    let reconciler = MyAppReconciler {
        deployments: Owned::new(runner.owns(), OnImmutable::Refuse),
        services: Owned::new(runner.owns(), OnImmutable::Refuse),
        hpas: Owned::new(runner.owns(), OnImmutable::Refuse),
    };
    runner.run(reconciler, shutdown).await;
}

struct MyAppReconciler {
    deployments: Owned<Deployment>,
    services: Owned<Service>,
    hpas: Owned<HorizontalPodAutoscaler>,
}

impl Reconciler for MyAppReconciler {
    type Object = MyApp;
    type Memory = ();

    async fn reconcile(&self, target: &Target<'_, MyApp>) -> Reconciled<MyAppStatus> {
        let (app, namespace, client) = (target.object, &target.namespace, &target.shared.client);
        if target.deleting() {
            // Going away: in a foreground deletion the garbage collector deletes the children
            // first, and each one rebuilt would hold the MyApp up (for as long as the race went on).
            return Reconciled::unchanged(Ok(Action::await_change()));
        }
        if mutation::active(Mutation::SkipReadyAtGeneration) && ready_at_generation(app) {
            return Reconciled::unchanged(Ok(Action::await_change()));
        }
        let (outcome, changes) = self.apply_children(target).await;
        let mut announce = announcements(&changes);
        let deployment = match &outcome {
            Ok(deployment) => Some(deployment.clone()),
            Err(_) => self.deployments.get(namespace, &target.name),
        };
        let now = Time(Timestamp::now());
        let mut desired = status(app, deployment.as_ref(), None, outcome.as_ref().err(), &now);
        if outcome.is_ok()
            && never_written(app)
            && let Some(wait) = first_status_wait(app, &desired, &now)
        {
            return Reconciled::unchanged(Ok(Action::requeue(wait))).announcing(announce);
        }
        // Not Ready while its Pods exist: say why if a container cannot start. A kubelet's
        // waiting reason changes no Deployment field, so while a container waits (still being
        // created, or unable to start) the Pods are looked at again now and then.
        let mut next = Action::await_change();
        if outcome.is_ok() && !is_true(&desired.conditions, READY) && has_pods(deployment.as_ref())
        {
            let pods = self.pods(app, namespace, client).await;
            if starting(&pods) {
                next = Action::requeue(WAITING_RECHECK);
            }
            if let Some(waiting) = &waiting_container(&pods) {
                desired = status(app, deployment.as_ref(), Some(waiting), None, &now);
                let reported = app.status.as_ref().and_then(|s| {
                    s.conditions
                        .iter()
                        .find(|c| c.type_ == READY)
                        .map(|c| c.reason.clone())
                });
                if reported.as_deref() != Some(waiting.reason.as_str()) {
                    announce.push(Announcement {
                        type_: EventType::Warning,
                        reason: waiting.reason.clone(),
                        action: "Start",
                        note: format!(
                            "Pod {} container {}: {}",
                            waiting.pod, waiting.container, waiting.message
                        ),
                    });
                }
            }
        }
        // What did change is announced even when another child failed.
        Reconciled::status(desired, outcome.map(|_| ()), next).announcing(announce)
    }
}

impl MyAppReconciler {
    /// The MyApp's Pods (by its selector; not cached: read only while it is not Ready), as the
    /// API server's watch cache has them: a diagnosis needs no consistent read. A failed read
    /// finds none: the status then says only how many replicas are ready.
    async fn pods(&self, app: &MyApp, namespace: &str, client: &Client) -> Vec<Pod> {
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let selector = labels::selector_string(app);
        match pods
            .list(&ListParams::default().labels(&selector).match_any())
            .await
        {
            Ok(list) => list.items,
            Err(error) => {
                tracing::debug!(%error, "could not list a MyApp's Pods");
                Vec::new()
            }
        }
    }

    /// Applies the children (Service, Deployment and HPA, concurrently: none depends on another)
    /// and removes an HPA no longer wanted. Returns the Deployment as the API server has it after
    /// the apply (or the first error), and what changed.
    async fn apply_children(
        &self,
        target: &Target<'_, MyApp>,
    ) -> (Result<Deployment, Error>, Vec<ChildChange>) {
        let (namespace, client, uid) = (&target.namespace, &target.shared.client, &target.uid);
        let Children {
            service,
            deployment,
            hpa,
        } = children(target.object, &target.owner);
        let autoscaling = hpa.is_some();
        let (deployment, service, hpa) = futures::join!(
            async {
                self.hand_replicas_to_hpa(client, &deployment, uid, autoscaling)
                    .await?;
                self.deployments.apply(client, uid, &deployment).await
            },
            self.apply_service(client, &service, uid),
            self.hpas.sync(client, uid, namespace, hpa.as_slice()),
        );
        let mut changes = Vec::new();
        if let Ok((_, change)) = &deployment {
            changes.extend(change.clone());
        }
        if let Ok(change) = &service {
            changes.extend(change.clone());
        }
        if let Ok(hpa_changes) = &hpa {
            changes.extend(hpa_changes.iter().cloned());
        }
        let deployment = match (deployment, service, hpa) {
            (Ok((deployment, _)), Ok(_), Ok(_)) => Ok(deployment),
            (Err(error), _, _) | (_, Err(error), _) | (_, _, Err(error)) => Err(error),
        };
        (deployment, changes)
    }

    /// Autoscaling is being turned on (no HPA yet) for a Deployment that exists: its current
    /// `replicas` is applied under a manager of its own first, so applying the Deployment
    /// without the field does not reset it to 1 before the HPA acts. The HPA controller takes
    /// the field over when it scales; disabling autoscaling takes it back by forced apply.
    async fn hand_replicas_to_hpa(
        &self,
        client: &Client,
        desired: &Deployment,
        owner_uid: &str,
        autoscaling: bool,
    ) -> Result<(), Error> {
        let namespace = desired.namespace().unwrap_or_default();
        let name = desired.name_any();
        if !autoscaling || self.hpas.get(&namespace, &name).is_some() {
            return Ok(());
        }
        let Some(current) = self.deployments.get(&namespace, &name) else {
            return Ok(());
        };
        let replicas = current.spec.as_ref().and_then(|s| s.replicas);
        let (true, Some(replicas)) = (is_controlled_by(&current, owner_uid), replicas) else {
            return Ok(());
        };
        let patch = serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": name },
            "spec": { "replicas": replicas },
        });
        let api: Api<Deployment> = Api::namespaced(client.clone(), &namespace);
        api.patch(
            &name,
            &PatchParams::apply(HANDOVER_MANAGER),
            &Patch::Apply(&patch),
        )
        .await
        .map(|_| ())
        .map_err(|source| Error::Apply {
            kind: "Deployment".into(),
            name,
            source,
        })
    }

    async fn apply_service(
        &self,
        client: &Client,
        service: &Service,
        uid: &str,
    ) -> Result<Option<ChildChange>, Error> {
        let namespace = service.namespace().unwrap_or_default();
        let cached = self.services.get(&namespace, &service.name_any());
        // Edited ports must go before applying: an edited port beside ours can make the Service
        // invalid (two ports named `http`), and apply cannot remove another manager's port.
        let drifted = cached
            .as_ref()
            .filter(|s| is_controlled_by(*s, uid) && ports_drifted(service, s));
        if drifted.is_some() {
            restore_ports(client, service).await?;
        }
        let (_, change) = self.services.apply(client, uid, service).await?;
        Ok(match (drifted, change) {
            (Some(_), None) => Some(ChildChange {
                kind: "Service".into(),
                name: service.name_any(),
                verb: Verb::Updated,
            }),
            (_, change) => change,
        })
    }
}

/// How long after its creation a new MyApp's first status waits for its Deployment to become
/// available: one that is Ready by then gets one status write, not one per step of its first
/// rollout (created, Pods scheduled, Pods ready). Failures are written at once, and the
/// "Created" event tells at once that the MyApp was seen. 60 s covers the first rollouts of
/// 1000 MyApps created at once on a small control plane (with 10 s most got two writes, with
/// 30 s a third did).
const FIRST_STATUS_WAIT: Duration = Duration::from_secs(60);

/// How often a MyApp whose container cannot start is looked at again.
const WAITING_RECHECK: Duration = Duration::from_secs(30);

/// Whether the operator has written no status for the MyApp yet: it has none, or the API
/// server's default (`observedGeneration: 0`).
fn never_written(app: &MyApp) -> bool {
    app.status
        .as_ref()
        .and_then(|status| status.observed_generation)
        .unwrap_or_default()
        == 0
}

/// Whether the MyApp's status says Ready at its current generation (what
/// [`Mutation::SkipReadyAtGeneration`] wrongly takes for "nothing to do").
fn ready_at_generation(app: &MyApp) -> bool {
    app.status.as_ref().is_some_and(|status| {
        status.observed_generation == app.metadata.generation && is_true(&status.conditions, READY)
    })
}

/// While a MyApp that never had a status is younger than [`FIRST_STATUS_WAIT`] and `desired`
/// is not Ready yet: how long is left (the reconcile that ends it writes whatever is true then).
fn first_status_wait(app: &MyApp, desired: &MyAppStatus, now: &Time) -> Option<Duration> {
    let ready = is_true(&desired.conditions, READY);
    let created = app.metadata.creation_timestamp.as_ref()?;
    let age = Duration::try_from(now.0.duration_since(created.0)).unwrap_or(Duration::ZERO);
    (!ready)
        .then(|| FIRST_STATUS_WAIT.checked_sub(age))
        .flatten()
        .filter(|left| !left.is_zero())
}

/// One Normal event per verb for the children that were created, changed or removed (none when
/// all matched), e.g. "Created Deployment web, Service web": one write per reconcile, not per child.
fn announcements(changes: &[ChildChange]) -> Vec<Announcement> {
    describe(changes)
        .into_iter()
        .map(|(verb, note)| {
            let (reason, action) = match verb {
                Verb::Created => ("Created", "Apply"),
                Verb::Updated => ("Updated", "Apply"),
                Verb::Deleted => ("Deleted", "Delete"),
            };
            Announcement {
                type_: EventType::Normal,
                reason: reason.into(),
                action,
                note,
            }
        })
        .collect()
}

/// Replaces the Service's port list with ours (a JSON merge patch replaces lists whole).
async fn restore_ports(client: &Client, desired: &Service) -> Result<(), Error> {
    let name = desired.name_any();
    let services: Api<Service> =
        Api::namespaced(client.clone(), &desired.namespace().unwrap_or_default());
    let ports = desired.spec.as_ref().and_then(|s| s.ports.clone());
    let patch = serde_json::json!({ "spec": { "ports": ports } });
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    services
        .patch(&name, &params, &Patch::Merge(&patch))
        .await
        .map(|_| ())
        .map_err(|source| Error::Apply {
            kind: "Service".into(),
            name,
            source,
        })
}

#[cfg(test)]
mod tests {
    use app_operator_api::MyAppStatus;

    use super::labels::tests::minimal_app;
    use super::*;

    #[test]
    fn a_status_is_unwritten_until_it_observed_a_generation() {
        let mut app = minimal_app();
        assert!(never_written(&app), "no status");
        app.status = Some(MyAppStatus {
            observed_generation: Some(0),
            ..MyAppStatus::default()
        });
        assert!(never_written(&app), "the CRD's default status");
        app.status = Some(MyAppStatus {
            observed_generation: Some(1),
            ..MyAppStatus::default()
        });
        assert!(!never_written(&app), "a status the operator wrote");
    }
}
