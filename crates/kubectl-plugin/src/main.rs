//! `kubectl app-operator`: day-two verbs for app-operator's objects, as a kubectl plugin (kubectl
//! runs `kubectl-app_operator` from PATH; krew installs it the same way).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim, Pod, Service};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config, Resource};
use kubectl_app_operator::{Kind, parse_reference, render_status};
use serde_json::Value;

#[derive(Parser)]
#[command(
    name = "kubectl app-operator",
    about = "Day-two verbs for app-operator's objects (MyApp, AppCluster, Sample, EtcdCluster, EtcdBackup, SampleDB)"
)]
struct Cli {
    /// The object's namespace (default: the kubeconfig context's, else `default`).
    #[arg(short, long, global = true)]
    namespace: Option<String>,
    /// A kubeconfig other than $KUBECONFIG or ~/.kube/config.
    #[arg(long, global = true)]
    kubeconfig: Option<PathBuf>,
    /// A context of the kubeconfig other than its current one.
    #[arg(long, global = true)]
    context: Option<String>,
    #[command(subcommand)]
    verb: Verb,
}

#[derive(Subcommand)]
enum Verb {
    /// One screen on KIND/NAME (e.g. etcd/example-etcd-cluster): Ready for which generation, the
    /// conditions, the status (members, backups, versions), the children and the last events.
    Status { reference: String },
    /// Ask the operator to reconcile KIND/NAME now, also one that failed permanently and waits
    /// for a change: sets the app-operator.example.com/reconcile-requested-at annotation.
    Retry { reference: String },
}

#[derive(Debug, thiserror::Error)]
enum PluginError {
    #[error(transparent)]
    Reference(#[from] kubectl_app_operator::ReferenceError),
    #[error("reading the kubeconfig: {0}")]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    #[error("no kubeconfig found: {0}")]
    Infer(#[from] kube::config::InferConfigError),
    #[error("{0}")]
    Api(#[from] kube::Error),
    #[error("reading the answer: {0}")]
    Json(#[from] serde_json::Error),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let ran = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|error| error.to_string())
        .and_then(|runtime| {
            runtime
                .block_on(run(cli))
                .map_err(|error| error.to_string())
        });
    match ran {
        Ok(output) => {
            print!("{output}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<String, PluginError> {
    let config = match (&cli.kubeconfig, &cli.context) {
        (None, None) => Config::infer().await?,
        (path, context) => {
            let kubeconfig = match path {
                Some(path) => Kubeconfig::read_from(path)?,
                None => Kubeconfig::read()?,
            };
            let options = KubeConfigOptions {
                context: context.clone(),
                ..KubeConfigOptions::default()
            };
            Config::from_custom_kubeconfig(kubeconfig, &options).await?
        }
    };
    let namespace = cli
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = Client::try_from(config)?;
    match &cli.verb {
        Verb::Status { reference } => {
            let (kind, name) = parse_reference(reference)?;
            status(&client, &namespace, kind, name).await
        }
        Verb::Retry { reference } => {
            let (kind, name) = parse_reference(reference)?;
            retry(&client, &namespace, kind, name).await
        }
    }
}

fn object_api(client: &Client, namespace: &str, kind: &Kind) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, &kind.api_resource())
}

async fn status(
    client: &Client,
    namespace: &str,
    kind: &Kind,
    name: &str,
) -> Result<String, PluginError> {
    let object = object_api(client, namespace, kind).get(name).await?;
    let uid = object.metadata.uid.clone().unwrap_or_default();
    let mut children = Vec::new();
    children.extend(owned::<Pod>(client, namespace, &uid).await?);
    children.extend(owned::<Deployment>(client, namespace, &uid).await?);
    children.extend(owned::<StatefulSet>(client, namespace, &uid).await?);
    children.extend(owned::<Service>(client, namespace, &uid).await?);
    children.extend(owned::<HorizontalPodAutoscaler>(client, namespace, &uid).await?);
    children.extend(owned::<PersistentVolumeClaim>(client, namespace, &uid).await?);
    children.extend(owned::<CronJob>(client, namespace, &uid).await?);
    children.extend(owned::<Job>(client, namespace, &uid).await?);
    let events = Api::<Event>::namespaced(client.clone(), namespace)
        .list(&ListParams::default().fields(&format!("involvedObject.uid={uid}")))
        .await?;
    let mut events = events
        .items
        .into_iter()
        .map(serde_json::to_value)
        .collect::<Result<Vec<Value>, _>>()?;
    events.sort_by_key(|event| {
        [
            "/lastTimestamp",
            "/eventTime",
            "/metadata/creationTimestamp",
        ]
        .iter()
        .find_map(|pointer| event.pointer(pointer).and_then(Value::as_str))
        .unwrap_or_default()
        .to_owned()
    });
    Ok(render_status(
        &serde_json::to_value(&object)?,
        &children,
        &events,
    ))
}

/// The objects of kind `K` in `namespace` controlled by the object of `uid`, as JSON with their
/// kind set (a list's items carry none).
async fn owned<K>(client: &Client, namespace: &str, uid: &str) -> Result<Vec<Value>, PluginError>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
{
    let list = Api::<K>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await?;
    let mut owned = Vec::new();
    for item in list.items {
        let controlled = item
            .meta()
            .owner_references
            .iter()
            .flatten()
            .any(|owner| owner.uid == uid && owner.controller == Some(true));
        if controlled {
            let mut value = serde_json::to_value(&item)?;
            if let Some(fields) = value.as_object_mut() {
                fields.insert("kind".to_owned(), K::kind(&()).into_owned().into());
            }
            owned.push(value);
        }
    }
    Ok(owned)
}

async fn retry(
    client: &Client,
    namespace: &str,
    kind: &Kind,
    name: &str,
) -> Result<String, PluginError> {
    let now = Timestamp::now().to_string();
    let patch = serde_json::json!({
        "metadata": { "annotations": { app_operator_api::RECONCILE_REQUESTED_AT: now } }
    });
    object_api(client, namespace, kind)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(format!(
        "{}/{name} in {namespace}: reconcile requested at {now}; follow it with `kubectl app-operator status {}/{name} -n {namespace}`\n",
        kind.kind, kind.plural
    ))
}
