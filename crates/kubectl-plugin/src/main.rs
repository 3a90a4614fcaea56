//! `kubectl app-operator`: day-two verbs for app-operator's objects, as a kubectl plugin (kubectl
//! runs `kubectl-app_operator` from PATH; krew installs it the same way).

use std::path::PathBuf;
use std::process::ExitCode;

use app_operator_api::BACKUP_REQUESTED_AT;
use clap::{Parser, Subcommand};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim, Pod, Service};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config, Resource, ResourceExt};
use kubectl_app_operator::backups::{self, CloneFrom, EtcdBackupState};
use kubectl_app_operator::{KINDS, Kind, parse_reference, pod_ready, redacted, render_status};
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
    /// psql in sampledb/NAME's server, as its generated user on its database (the password stays
    /// in the Pod); arguments after `--` go to psql, e.g. `-- -c 'select 1'`.
    Psql {
        reference: String,
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// etcdctl in a ready member of etcd/NAME, against that member; arguments after `--` go to
    /// etcdctl, e.g. `-- member list -w table`.
    Etcdctl {
        reference: String,
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// Write a support bundle into a new directory: the operator's objects in the namespace (or
    /// every namespace with --all-namespaces) and the children they control, their events, the
    /// operator's logs and version. Redacted: no Secret is read, managedFields, last-applied
    /// copies and literal env values are left out.
    Report {
        /// Every namespace instead of one.
        #[arg(short = 'A', long)]
        all_namespaces: bool,
        /// Where the operator runs (its Pods are labelled app.kubernetes.io/name=app-operator).
        #[arg(long, default_value = "app-operator-system")]
        operator_namespace: String,
        /// The directory to write (default: app-operator-report-<time>).
        #[arg(long)]
        output: Option<PathBuf>,
    },
    /// Back up etcd/NAME (a one-off EtcdBackup into a claim the operator creates) or sampledb/NAME
    /// (an on-demand backup Job, asked for with the app-operator.example.com/backup-requested-at
    /// annotation) now.
    Backup {
        reference: String,
        /// Wait until the backup succeeded (or failed: exit 1) and say where it is.
        #[arg(long)]
        wait: bool,
        /// How long --wait waits, e.g. 90s or 10m.
        #[arg(long, default_value = "10m", value_parser = parse_timeout)]
        timeout: std::time::Duration,
    },
    /// Create NEW as a copy of etcd/NAME or sampledb/NAME (the same spec) started from a backup:
    /// an etcd cluster from the newest EtcdBackup of NAME holding a snapshot, a database from its
    /// latest successful backup (the source may be deleted; its backups volume is kept).
    Clone {
        reference: String,
        new_name: String,
        /// The backup to start from: an EtcdBackup's name, or a file of the database's backups
        /// volume (`<job>.dump`).
        #[arg(long)]
        backup: Option<String>,
        /// One of the EtcdBackup's kept snapshots (`status.snapshots`) instead of its newest.
        #[arg(long)]
        snapshot: Option<String>,
    },
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
    #[error("writing the report: {0}")]
    Write(#[from] std::io::Error),
    #[error("{0}")]
    Unsupported(String),
    #[error("{kind} {name} has no Running and Ready Pod to run in")]
    NoReadyPod { kind: &'static str, name: String },
    #[error("running kubectl ({kubectl}): {source}")]
    Kubectl {
        kubectl: String,
        source: std::io::Error,
    },
    #[error("timed out waiting for {0}")]
    Timeout(String),
    #[error("{0}")]
    Failed(String),
    #[error("kubectl exec exited with {0}")]
    Exec(std::process::ExitStatus),
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
        Verb::Psql { reference, args } => {
            let (kind, name) = parse_reference(reference)?;
            let target = exec_target(&client, &namespace, kind, name, "SampleDB").await?;
            let mut command = vec![
                "sh".to_owned(),
                "-c".to_owned(),
                // The server's own environment: its user, password and database.
                r#"PGPASSWORD="$POSTGRES_PASSWORD" exec psql -h 127.0.0.1 -U "$POSTGRES_USER" -d "$POSTGRES_DB" "$@""#.to_owned(),
                "psql".to_owned(),
            ];
            command.extend(args.iter().cloned());
            kubectl_exec(&cli, &namespace, &target, "postgres", &command)
        }
        Verb::Etcdctl { reference, args } => {
            let (kind, name) = parse_reference(reference)?;
            let target = exec_target(&client, &namespace, kind, name, "EtcdCluster").await?;
            if target.object.pointer("/spec/TLS").is_some() {
                return Err(PluginError::Unsupported(format!(
                    "{name} serves clients over TLS: run etcdctl with the operator's client certificate (spec.TLS.static.operatorSecret) instead"
                )));
            }
            let mut command = vec![
                "etcdctl".to_owned(),
                "--endpoints=http://127.0.0.1:2379".to_owned(),
            ];
            command.extend(args.iter().cloned());
            kubectl_exec(&cli, &namespace, &target, "etcd", &command)
        }
        Verb::Report {
            all_namespaces,
            operator_namespace,
            output,
        } => {
            let scope = (!all_namespaces).then_some(namespace.as_str());
            report(&client, scope, operator_namespace, output.clone()).await
        }
        Verb::Retry { reference } => {
            let (kind, name) = parse_reference(reference)?;
            retry(&client, &namespace, kind, name).await
        }
        Verb::Backup {
            reference,
            wait,
            timeout,
        } => {
            let (kind, name) = parse_reference(reference)?;
            let deadline = wait.then(|| tokio::time::Instant::now() + *timeout);
            match kind.kind {
                "EtcdCluster" => backup_etcd(&client, &namespace, name, deadline).await,
                "SampleDB" => backup_database(&client, &namespace, name, deadline).await,
                other => Err(PluginError::Unsupported(format!(
                    "backup takes an EtcdCluster or a SampleDB, not a {other}"
                ))),
            }
        }
        Verb::Clone {
            reference,
            new_name,
            backup,
            snapshot,
        } => {
            let (kind, name) = parse_reference(reference)?;
            clone(
                &client,
                &namespace,
                (kind, name),
                new_name,
                backup.clone(),
                snapshot.clone(),
            )
            .await
        }
    }
}

fn parse_timeout(value: &str) -> Result<std::time::Duration, String> {
    let duration: k8s_openapi::jiff::SignedDuration = value
        .parse()
        .map_err(|error| format!("{value:?} is not a duration like 90s or 10m: {error}"))?;
    std::time::Duration::try_from(duration).map_err(|error| format!("{value:?}: {error}"))
}

/// How often a waiting verb looks again.
const POLL: std::time::Duration = std::time::Duration::from_secs(2);

/// Waits for `done` to say something (`Ok` ends the wait, `Err` fails it) until `deadline`;
/// `waiting_for` says what in the timeout's error.
async fn wait_until<F, Fut>(
    deadline: tokio::time::Instant,
    waiting_for: &str,
    mut done: F,
) -> Result<String, PluginError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<String>, PluginError>>,
{
    loop {
        if let Some(said) = done().await? {
            return Ok(said);
        }
        if tokio::time::Instant::now() + POLL > deadline {
            return Err(PluginError::Timeout(waiting_for.to_owned()));
        }
        tokio::time::sleep(POLL).await;
    }
}

async fn backup_etcd(
    client: &Client,
    namespace: &str,
    cluster: &str,
    deadline: Option<tokio::time::Instant>,
) -> Result<String, PluginError> {
    // The cluster must exist: a backup of a missing one would only wait for it.
    object_api(client, namespace, kind_named("EtcdCluster")?)
        .get(cluster)
        .await?;
    let etcd_backups = object_api(client, namespace, kind_named("EtcdBackup")?);
    let desired: DynamicObject = serde_json::from_value(backups::etcd_backup(cluster))?;
    let made = etcd_backups
        .create(&PostParams::default(), &desired)
        .await?;
    let name = made.metadata.name.unwrap_or_default();
    let Some(deadline) = deadline else {
        return Ok(format!(
            "EtcdBackup {name} created in {namespace}; follow it with `kubectl app-operator status etcdbackup/{name} -n {namespace}`\n"
        ));
    };
    wait_until(deadline, &format!("EtcdBackup {name} to succeed"), || async {
        let backup = serde_json::to_value(etcd_backups.get(&name).await?)?;
        match backups::etcd_backup_state(&backup) {
            EtcdBackupState::Running => Ok(None),
            EtcdBackupState::Succeeded { snapshot, claim } => Ok(Some(format!(
                "EtcdBackup {name} succeeded: snapshot {snapshot} in PersistentVolumeClaim {claim}; clone from it with `kubectl app-operator clone etcd/{cluster} NEW --backup {name} -n {namespace}`\n"
            ))),
            EtcdBackupState::Failed(reason) => Err(PluginError::Failed(format!(
                "EtcdBackup {name} failed: {reason}"
            ))),
        }
    })
    .await
}

async fn backup_database(
    client: &Client,
    namespace: &str,
    name: &str,
    deadline: Option<tokio::time::Instant>,
) -> Result<String, PluginError> {
    let databases = object_api(client, namespace, kind_named("SampleDB")?);
    let (request, db) = request_now(&databases, name, BACKUP_REQUESTED_AT).await?;
    let Some(deadline) = deadline else {
        return Ok(format!(
            "SampleDB {name} in {namespace}: backup requested at {request}; `kubectl get jobs -n {namespace}` shows its Job once it starts (annotated {BACKUP_REQUESTED_AT}={request})\n"
        ));
    };
    let uid = db.metadata.uid.unwrap_or_default();
    let jobs = Api::<Job>::namespaced(client.clone(), namespace);
    wait_until(deadline, &format!("the backup of SampleDB {name} requested at {request}"), || async {
        let list = jobs.list(&ListParams::default()).await?;
        let Some(job) = list.items.into_iter().find(|job| {
            job.annotations().get(BACKUP_REQUESTED_AT) == Some(&request)
                && job.owner_references().iter().any(|owner| owner.uid == uid)
        }) else {
            return Ok(None);
        };
        let job_name = job.name_any();
        let status = job.status.unwrap_or_default();
        if status.succeeded.unwrap_or_default() > 0 {
            return Ok(Some(format!(
                "backup Job {job_name} succeeded: {job_name}.dump in PersistentVolumeClaim {name}-backups; clone from it with `kubectl app-operator clone sampledb/{name} NEW --backup {job_name}.dump -n {namespace}`\n"
            )));
        }
        if status.failed.unwrap_or_default() > 0 {
            let why = status
                .conditions
                .iter()
                .flatten()
                .find(|condition| condition.type_ == "Failed")
                .and_then(|condition| condition.message.clone())
                .unwrap_or_default();
            return Err(PluginError::Failed(format!(
                "backup Job {job_name} failed: {why} (`kubectl logs job/{job_name} -n {namespace}`)"
            )));
        }
        Ok(None)
    })
    .await
}

async fn clone(
    client: &Client,
    namespace: &str,
    (kind, name): (&Kind, &str),
    new_name: &str,
    backup: Option<String>,
    snapshot: Option<String>,
) -> Result<String, PluginError> {
    let api = object_api(client, namespace, kind);
    let source = serde_json::to_value(api.get(name).await?)?;
    let from = match kind.kind {
        "EtcdCluster" => {
            let name = match backup {
                Some(backup) => backup,
                None => {
                    let all = object_api(client, namespace, kind_named("EtcdBackup")?)
                        .list(&ListParams::default())
                        .await?
                        .items
                        .into_iter()
                        .map(serde_json::to_value)
                        .collect::<Result<Vec<_>, _>>()?;
                    backups::newest_etcd_backup(&all, name)
                        .map(str::to_owned)
                        .ok_or_else(|| PluginError::Unsupported(format!(
                            "no EtcdBackup of {name} in {namespace} holds a snapshot: take one with `kubectl app-operator backup etcd/{name} --wait -n {namespace}`"
                        )))?
                }
            };
            CloneFrom::EtcdBackup { name, snapshot }
        }
        "SampleDB" => {
            let file = backup.or_else(|| backups::latest_sampledb_backup(&source)).ok_or_else(|| {
                PluginError::Unsupported(format!(
                    "SampleDB {name} has no successful backup yet: take one with `kubectl app-operator backup sampledb/{name} --wait -n {namespace}`"
                ))
            })?;
            CloneFrom::SampleDBBackup { file }
        }
        other => {
            return Err(PluginError::Unsupported(format!(
                "clone takes an EtcdCluster or a SampleDB, not a {other}"
            )));
        }
    };
    let desired = backups::clone_of(&source, new_name, &from).map_err(PluginError::Unsupported)?;
    api.create(&PostParams::default(), &serde_json::from_value(desired)?)
        .await?;
    Ok(format!(
        "{} {new_name} created in {namespace} from {from}; follow it with `kubectl app-operator status {}/{new_name} -n {namespace}`\n",
        kind.kind, kind.plural
    ))
}

/// One of the plugin's kinds by its name.
fn kind_named(kind: &str) -> Result<&'static Kind, PluginError> {
    KINDS
        .iter()
        .find(|known| known.kind == kind)
        .ok_or_else(|| PluginError::Unsupported(format!("no kind {kind}")))
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
    let children = children(client, namespace, &[uid.as_str()]).await?;
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

/// Every object in `namespace` that one of `owners` (uids) controls: the kinds the operator's
/// controllers create, each listed once.
async fn children(
    client: &Client,
    namespace: &str,
    owners: &[&str],
) -> Result<Vec<Value>, PluginError> {
    let mut children = owned::<Pod>(client, namespace, owners).await?;
    children.extend(owned::<Deployment>(client, namespace, owners).await?);
    children.extend(owned::<StatefulSet>(client, namespace, owners).await?);
    children.extend(owned::<Service>(client, namespace, owners).await?);
    children.extend(owned::<HorizontalPodAutoscaler>(client, namespace, owners).await?);
    children.extend(owned::<PersistentVolumeClaim>(client, namespace, owners).await?);
    children.extend(owned::<CronJob>(client, namespace, owners).await?);
    children.extend(owned::<Job>(client, namespace, owners).await?);
    Ok(children)
}

/// The objects of kind `K` in `namespace` controlled by one of `owners` (uids), as JSON with
/// their kind set (a list's items carry none); one list call.
async fn owned<K>(
    client: &Client,
    namespace: &str,
    owners: &[&str],
) -> Result<Vec<Value>, PluginError>
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
        let controlled =
            item.meta().owner_references.iter().flatten().any(|owner| {
                owners.contains(&owner.uid.as_str()) && owner.controller == Some(true)
            });
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
    let api = object_api(client, namespace, kind);
    let (now, _) = request_now(&api, name, app_operator_api::RECONCILE_REQUESTED_AT).await?;
    Ok(format!(
        "{}/{name} in {namespace}: reconcile requested at {now}; follow it with `kubectl app-operator status {}/{name} -n {namespace}`\n",
        kind.kind, kind.plural
    ))
}

/// Sets `annotation` of `name` to the time now, as the controllers read a request (a reconcile,
/// a backup): the value it wrote, and the object as patched.
async fn request_now(
    api: &Api<DynamicObject>,
    name: &str,
    annotation: &str,
) -> Result<(String, DynamicObject), PluginError> {
    let now = Timestamp::now().to_string();
    let patch = serde_json::json!({ "metadata": { "annotations": { annotation: now } } });
    let patched = api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok((now, patched))
}

/// `kubectl app-operator report`: see [`Verb::Report`]. Returns what it wrote.
async fn report(
    client: &Client,
    namespace: Option<&str>,
    operator_namespace: &str,
    output: Option<PathBuf>,
) -> Result<String, PluginError> {
    let now = Timestamp::now();
    let dir = output.unwrap_or_else(|| {
        PathBuf::from(format!(
            "app-operator-report-{}",
            now.strftime("%Y%m%dT%H%M%SZ")
        ))
    });
    std::fs::create_dir_all(&dir)?;
    let list_params = ListParams::default();
    let mut objects = Vec::new();
    for kind in &KINDS {
        let api: Api<DynamicObject> = match namespace {
            Some(namespace) => object_api(client, namespace, kind),
            None => Api::all_with(client.clone(), &kind.api_resource()),
        };
        match api.list(&list_params).await {
            Ok(list) => {
                for mut item in list.items {
                    item.types = Some(kube::core::TypeMeta {
                        api_version: kind.api_resource().api_version,
                        kind: kind.kind.to_owned(),
                    });
                    objects.push(redacted(serde_json::to_value(&item)?));
                }
            }
            // A kind whose CRD is not installed has nothing to report.
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => return Err(error.into()),
        }
    }
    let mut children = Vec::new();
    let namespaces: std::collections::BTreeSet<&str> = objects
        .iter()
        .filter_map(|object| {
            object
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
        })
        .collect();
    let mut events = Vec::new();
    for namespace in &namespaces {
        let owners: Vec<&str> = objects
            .iter()
            .filter(|object| {
                object
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    == Some(namespace)
            })
            .filter_map(|object| object.pointer("/metadata/uid").and_then(Value::as_str))
            .collect();
        children.extend(self::children(client, namespace, &owners).await?);
        for event in Api::<Event>::namespaced(client.clone(), namespace)
            .list(&list_params)
            .await?
            .items
        {
            events.push(format!(
                "{}\t{}\t{}\t{}/{}\t{}\t{}",
                event
                    .last_timestamp
                    .as_ref()
                    .map(|time| time.0.to_string())
                    .unwrap_or_default(),
                event.metadata.namespace.unwrap_or_default(),
                event.type_.unwrap_or_default(),
                event.involved_object.kind.unwrap_or_default(),
                event.involved_object.name.unwrap_or_default(),
                event.reason.unwrap_or_default(),
                event.message.unwrap_or_default()
            ));
        }
    }
    events.sort();
    let children: Vec<Value> = children.into_iter().map(redacted).collect();
    let json_list = |items: &[Value]| {
        serde_json::to_string_pretty(&serde_json::json!({
            "apiVersion": "v1", "kind": "List", "items": items
        }))
    };
    std::fs::write(dir.join("objects.json"), json_list(&objects)?)?;
    std::fs::write(dir.join("children.json"), json_list(&children)?)?;
    std::fs::write(dir.join("events.tsv"), events.join("\n") + "\n")?;

    let version = client.apiserver_version().await?;
    let pods = Api::<Pod>::namespaced(client.clone(), operator_namespace)
        .list(&ListParams::default().labels("app.kubernetes.io/name=app-operator"))
        .await?;
    let mut operator = vec![
        format!("report written at {now}"),
        format!("Kubernetes {}", version.git_version),
        format!(
            "operator Pods in {operator_namespace} (app.kubernetes.io/name=app-operator): {}",
            pods.items.len()
        ),
    ];
    let logs = Api::<Pod>::namespaced(client.clone(), operator_namespace);
    for pod in &pods.items {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let images: Vec<String> = pod
            .spec
            .iter()
            .flat_map(|spec| &spec.containers)
            .filter_map(|container| container.image.clone())
            .collect();
        operator.push(format!("  {name}: {}", images.join(", ")));
        let params = kube::api::LogParams {
            tail_lines: Some(5000),
            ..kube::api::LogParams::default()
        };
        let log = logs
            .logs(&name, &params)
            .await
            .unwrap_or_else(|error| format!("no log: {error}\n"));
        std::fs::write(dir.join(format!("operator-{name}.log")), log)?;
    }
    std::fs::write(dir.join("operator.txt"), operator.join("\n") + "\n")?;
    Ok(format!(
        "wrote {}: {} objects, {} children, {} events, {} operator logs (no Secrets; env values, managedFields and last-applied copies left out)\n",
        dir.display(),
        objects.len(),
        children.len(),
        events.len(),
        pods.items.len()
    ))
}

/// The object a Pod-side verb works on, and the ready Pod it runs in.
struct ExecTarget {
    object: Value,
    pod: String,
}

/// `kind`/`name` (which must be `expected`) and a Running, Ready Pod it controls, directly (an
/// etcd member) or through a StatefulSet (a database server).
async fn exec_target(
    client: &Client,
    namespace: &str,
    kind: &Kind,
    name: &str,
    expected: &'static str,
) -> Result<ExecTarget, PluginError> {
    if kind.kind != expected {
        return Err(PluginError::Unsupported(format!(
            "this verb takes a {expected}, not a {}",
            kind.kind
        )));
    }
    let object = serde_json::to_value(object_api(client, namespace, kind).get(name).await?)?;
    let uid = object
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default();
    // An etcd member is the object's own; a database server is its StatefulSet's.
    let sets = owned::<StatefulSet>(client, namespace, &[uid]).await?;
    let mut owners = vec![uid];
    owners.extend(
        sets.iter()
            .filter_map(|set| set.pointer("/metadata/uid").and_then(Value::as_str)),
    );
    let pods = owned::<Pod>(client, namespace, &owners).await?;
    let ready = pods
        .iter()
        .find(|pod| pod_ready(pod) && pod.pointer("/metadata/deletionTimestamp").is_none())
        .and_then(|pod| pod.pointer("/metadata/name").and_then(Value::as_str))
        .map(str::to_owned);
    if let Some(pod) = ready {
        return Ok(ExecTarget { object, pod });
    }
    Err(PluginError::NoReadyPod {
        kind: expected,
        name: name.to_owned(),
    })
}

/// `kubectl exec` of `command` in `container` of the target's Pod, with the user's terminal
/// (a TTY only when stdin is one) and kubeconfig; kubectl is `$KUBECTL`, else `kubectl` on PATH.
fn kubectl_exec(
    cli: &Cli,
    namespace: &str,
    target: &ExecTarget,
    container: &str,
    command: &[String],
) -> Result<String, PluginError> {
    use std::io::IsTerminal;
    let kubectl = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".to_owned());
    let mut exec = std::process::Command::new(&kubectl);
    if let Some(kubeconfig) = &cli.kubeconfig {
        exec.arg("--kubeconfig").arg(kubeconfig);
    }
    if let Some(context) = &cli.context {
        exec.args(["--context", context]);
    }
    exec.args(["exec", "-i", "-n", namespace, &target.pod, "-c", container]);
    if std::io::stdin().is_terminal() {
        exec.arg("-t");
    }
    exec.arg("--").args(command);
    let status = exec
        .status()
        .map_err(|source| PluginError::Kubectl { kubectl, source })?;
    if status.success() {
        Ok(String::new())
    } else {
        Err(PluginError::Exec(status))
    }
}
