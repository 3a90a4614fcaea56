//! The MyApp controller: a Deployment, a Service and (while autoscaling is enabled) an HPA per
//! MyApp, applied with server-side apply; status from the Deployment.

mod deployment;
mod hpa;
mod labels;
mod service;
mod status;

pub use deployment::deployment;
pub use hpa::hpa;
pub use service::{ports_drifted, service};
pub use status::status;

use std::sync::Arc;

use tracing::Instrument;

use app_operator_api::MyApp;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::Store;
use kube::{Resource, ResourceExt};

use super::{
    Common, Settings, cached, child_cache, drain, log_start, primary_cache, reconcile_span,
};
use crate::reconcile::apply::{Applied, apply_child, controller_reference, is_controlled_by};
use crate::reconcile::{Error, FIELD_MANAGER};

pub const NAME: &str = "myapp";

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

struct Context {
    common: Common,
    deployments: Store<Deployment>,
    services: Store<Service>,
    hpas: Store<HorizontalPodAutoscaler>,
}

/// Runs the controller until `shutdown` resolves (then lets in-flight reconciles finish).
pub async fn run(settings: Settings, shutdown: impl Future<Output = ()> + Send + Sync + 'static) {
    let (apps, app_events) = primary_cache::<MyApp>(&settings, NAME);
    let (deployments, deployment_events) = child_cache(&settings, NAME);
    let (services, service_events) = child_cache(&settings, NAME);
    let (hpas, hpa_events) = child_cache(&settings, NAME);
    let controller = Controller::for_stream(app_events, apps)
        .owns_stream(deployment_events)
        .owns_stream(service_events)
        .owns_stream(hpa_events)
        .with_config(controller::Config::default().concurrency(settings.concurrency))
        .graceful_shutdown_on(shutdown);
    let context = Arc::new(Context {
        common: Common::new(NAME, &settings),
        deployments,
        services,
        hpas,
    });
    log_start(NAME, &settings);
    drain(controller.run(reconcile, error_policy, context)).await;
    tracing::info!(controller = NAME, "Stopped Controller");
}

async fn reconcile(app: Arc<MyApp>, ctx: Arc<Context>) -> Result<Action, Error> {
    let span = reconcile_span(NAME, app.as_ref());
    reconcile_object(app, ctx).instrument(span).await
}

async fn reconcile_object(app: Arc<MyApp>, ctx: Arc<Context>) -> Result<Action, Error> {
    let _timer = ctx.common.metrics.reconcile_started(NAME);
    let namespace = app.namespace().ok_or(Error::MissingMetadata("namespace"))?;
    if app.meta().deletion_timestamp.is_some() {
        // Going away: in a foreground deletion the garbage collector deletes the children first,
        // and each one rebuilt would hold the MyApp up (for as long as the race went on).
        return Ok(Action::await_change());
    }
    let (outcome, changes) = apply_children(&app, &namespace, &ctx).await;
    let deployment = match &outcome {
        Ok(deployment) => Some(deployment.clone()),
        Err(_) => cached(&ctx.deployments, &app.name_any(), &namespace).map(|d| (*d).clone()),
    };
    let now = Time(Timestamp::now());
    let desired = status(&app, deployment.as_ref(), outcome.as_ref().err(), &now);
    let stamp =
        |status: &mut app_operator_api::MyAppStatus| status.last_update_time = Some(now.clone());
    let outcome = outcome.map(|_| ());
    // The event and the status write are independent: sent together, a reconcile holds its
    // worker for one round trip less. What did change is announced even when another child
    // failed.
    let (_, result) = futures::join!(
        announce(&ctx, &app, &changes),
        ctx.common.conclude(
            app.as_ref(),
            app.status.as_ref(),
            desired,
            stamp,
            outcome,
            Action::await_change(),
        )
    );
    result
}

fn error_policy(app: Arc<MyApp>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.common.retry(app.as_ref(), error)
}

/// How applying changed each child kind (`None`: it failed, or was not tried).
type Changes = [(&'static str, Option<Applied>); 3];

/// Applies the children (Service, Deployment and HPA, concurrently: none depends on another).
/// Returns the Deployment as the API server has it after the apply (or the first error), and
/// what changed.
async fn apply_children(
    app: &MyApp,
    namespace: &str,
    ctx: &Context,
) -> (Result<Deployment, Error>, Changes) {
    let (Some(uid), Some(owner)) = (app.uid(), controller_reference(app)) else {
        let untried = [
            ("Deployment", None),
            ("Service", None),
            ("HorizontalPodAutoscaler", None),
        ];
        return (Err(Error::MissingMetadata("uid")), untried);
    };
    let Children {
        service,
        deployment,
        hpa,
    } = children(app, &owner);
    let (deployment, service, hpa) = futures::join!(
        apply_deployment(namespace, deployment, &uid, ctx),
        apply_service(namespace, service, &uid, ctx),
        apply_hpa(app, namespace, hpa, &uid, ctx),
    );
    let changes = [
        (
            "Deployment",
            deployment.as_ref().ok().map(|(_, change)| *change),
        ),
        ("Service", service.as_ref().ok().copied()),
        ("HorizontalPodAutoscaler", hpa.as_ref().ok().copied()),
    ];
    let deployment = match (deployment, service, hpa) {
        (Ok((deployment, _)), Ok(_), Ok(_)) => Ok(deployment),
        (Err(error), _, _) | (_, Err(error), _) | (_, _, Err(error)) => Err(error),
    };
    (deployment, changes)
}

async fn apply_service(
    namespace: &str,
    service: Service,
    uid: &str,
    ctx: &Context,
) -> Result<Applied, Error> {
    let services: Api<Service> = Api::namespaced(ctx.common.client.clone(), namespace);
    let cached_service = cached(&ctx.services, &service.name_any(), namespace);
    // Edited ports must go before applying: an edited port beside ours can make the Service
    // invalid (two ports named `http`), and apply cannot remove another manager's port.
    let drifted = cached_service
        .as_deref()
        .filter(|s| is_controlled_by(*s, uid) && ports_drifted(&service, s));
    if drifted.is_some() {
        restore_ports(&services, &service).await?;
    }
    let (_, change) = apply_child(&services, &service, cached_service.as_deref(), uid).await?;
    Ok(if drifted.is_some() {
        Applied::Changed
    } else {
        change
    })
}

async fn apply_deployment(
    namespace: &str,
    deployment: Deployment,
    uid: &str,
    ctx: &Context,
) -> Result<(Deployment, Applied), Error> {
    let name = deployment.name_any();
    let deployments: Api<Deployment> = Api::namespaced(ctx.common.client.clone(), namespace);
    let cached_deployment = cached(&ctx.deployments, &name, namespace);
    apply_child(&deployments, &deployment, cached_deployment.as_deref(), uid).await
}

/// Applies the HPA while autoscaling is enabled; deletes ours once it is disabled (and says so
/// in an event of its own).
async fn apply_hpa(
    app: &MyApp,
    namespace: &str,
    hpa: Option<HorizontalPodAutoscaler>,
    uid: &str,
    ctx: &Context,
) -> Result<Applied, Error> {
    let name = app.name_any();
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(ctx.common.client.clone(), namespace);
    let cached_hpa = cached(&ctx.hpas, &name, namespace);
    if let Some(hpa) = hpa {
        let (_, change) = apply_child(&hpas, &hpa, cached_hpa.as_deref(), uid).await?;
        return Ok(change);
    }
    let Some(existing) = cached_hpa.filter(|h| is_controlled_by(h.as_ref(), uid)) else {
        return Ok(Applied::Unchanged);
    };
    hpas.delete(&existing.name_any(), &DeleteParams::background())
        .await
        .map_err(|source| Error::Delete {
            kind: "HorizontalPodAutoscaler".into(),
            name: name.clone(),
            source,
        })?;
    let note = format!("Deleted HorizontalPodAutoscaler {name}: autoscaling is disabled");
    ctx.common
        .publish(app, EventType::Normal, "Deleted", "Delete", note)
        .await;
    Ok(Applied::Unchanged)
}

/// One Normal event per verb for the children that were created or changed (none when all
/// matched), e.g. "Created Deployment web, Service web": one write per reconcile, not per child.
async fn announce(ctx: &Context, app: &MyApp, changes: &Changes) {
    let name = app.name_any();
    for (change, reason) in [(Applied::Created, "Created"), (Applied::Changed, "Updated")] {
        let children: Vec<String> = changes
            .iter()
            .filter(|(_, applied)| *applied == Some(change))
            .map(|(kind, _)| format!("{kind} {name}"))
            .collect();
        if children.is_empty() {
            continue;
        }
        ctx.common
            .publish(
                app,
                EventType::Normal,
                reason,
                "Apply",
                format!("{reason} {}", children.join(", ")),
            )
            .await;
    }
}

/// Replaces the Service's port list with ours (a JSON merge patch replaces lists whole).
async fn restore_ports(services: &Api<Service>, desired: &Service) -> Result<(), Error> {
    let name = desired.name_any();
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
