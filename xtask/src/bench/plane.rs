//! The control plane the MyApp rounds run on, and how each pass finds it empty.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use app_operator::api::MyApp;
use app_operator::controllers::myapp;
use app_operator::reconcile::apply::controller_reference;
use k8s_openapi::api::apps::v1::Deployment;
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use local_cluster::{Cluster, ClusterOptions, Layout, Tools};

use super::cluster::{Identity, install_crds, wait_for};
use super::myapp::{delete_round_namespaces, new_myapp};

/// Where the control plane comes from.
#[derive(Clone)]
pub enum ControlPlane {
    /// Already running, started by someone else (the smoke runs on `make test`'s): a pass's
    /// namespaces are deleted after it.
    Shared(PathBuf),
    /// The harness's own, in this state directory: started before the first pass and anew
    /// (etcd's data gone) after each pass. Deleting a pass's namespace took 3-4 min at 3,000
    /// MyApps with no operator running and about 45 min at 10,000 (50,000 objects: the
    /// namespace controller, the garbage collector and kwok one object at a time), and every
    /// pass now starts from the same empty store whatever the passes before it left.
    Own(Layout),
}

/// A running control plane with the CRDs and the operator's identity, and a client for each.
pub struct Plane {
    control_plane: ControlPlane,
    tools: Tools,
    /// The ClusterRoles the compared operators need besides ours.
    extra_roles: Vec<PathBuf>,
    /// The operator's identity as a kubeconfig: rewritten, at the same path, by each new start.
    pub identity: PathBuf,
    /// `system:masters`: the user who creates MyApps, and the watches that time them.
    pub admin: Client,
    /// The operator's identity, for the floors' plain clients.
    pub floor: Client,
}

impl Plane {
    /// Starts the harness's own control plane (if it has one) and prepares it ([`prepare`]).
    pub async fn open(
        control_plane: ControlPlane,
        tools: &Tools,
        extra_roles: &[PathBuf],
        output: &Path,
    ) -> Result<Plane> {
        let identity = output.join("operator.kubeconfig");
        let (admin, floor) = prepare(&control_plane, tools, extra_roles, &identity).await?;
        Ok(Plane {
            control_plane,
            tools: tools.clone(),
            extra_roles: extra_roles.to_vec(),
            identity,
            admin,
            floor,
        })
    }

    /// Whether a new start replaces the plane between passes (the operator then has to be
    /// started again: its API server is gone), rather than its namespaces being deleted.
    pub fn starts_anew(&self) -> bool {
        matches!(self.control_plane, ControlPlane::Own(_))
    }

    /// Leaves the plane with none of the MyApp rounds' objects: a new start of its own, or the
    /// rounds' namespaces deleted from a shared one.
    pub async fn clear(&mut self) -> Result<()> {
        let ControlPlane::Own(layout) = &self.control_plane else {
            return delete_round_namespaces(&self.admin).await;
        };
        let started = Instant::now();
        Cluster::down(layout)?;
        (self.admin, self.floor) = prepare(
            &self.control_plane,
            &self.tools,
            &self.extra_roles,
            &self.identity,
        )
        .await?;
        // Not measured, but each pass pays it once: the log says how much.
        eprintln!(
            "bench: control plane started anew in {:.0} s",
            started.elapsed().as_secs_f64()
        );
        Ok(())
    }
}

/// The harness's own plane started; the CRDs, the operator's identity (its kubeconfig written to
/// `identity`), the admin's and the identity's clients; on a new plane, until the identity may
/// create children owned by a MyApp.
async fn prepare(
    control_plane: &ControlPlane,
    tools: &Tools,
    extra_roles: &[PathBuf],
    identity: &Path,
) -> Result<(Client, Client)> {
    let admin_kubeconfig = match control_plane {
        ControlPlane::Shared(kubeconfig) => kubeconfig.clone(),
        ControlPlane::Own(layout) => {
            Cluster::up(
                layout,
                tools,
                &ClusterOptions {
                    profiling: true,
                    ..ClusterOptions::default()
                },
            )
            .await?
            .kubeconfig
        }
    };
    let admin = local_cluster::admin_client(&admin_kubeconfig).await?;
    install_crds(&admin).await?;
    Identity {
        kubectl: tools.bin("kubectl"),
        admin_kubeconfig: &admin_kubeconfig,
        extra_roles,
    }
    .create(&admin, identity)
    .await?;
    let floor = local_cluster::admin_client(identity).await?;
    if let ControlPlane::Own(_) = control_plane {
        owner_references_accepted(&admin, &floor).await?;
    }
    Ok((admin, floor))
}

/// Waits until the operator's identity may create a Deployment owned by a MyApp. Just after the
/// CRDs are installed, the API server refuses such owner references for a while ("cannot find
/// RESTMapping", seen for EtcdClusters on fresh clusters, up to ~30 s), and an admin is not
/// asked, so the identity itself tries, dry run. Without this wait a new plane's first pass would
/// pay it: a retry for the operator, a failed create for the fair floor.
async fn owner_references_accepted(admin: &Client, floor: &Client) -> Result<()> {
    let namespace = "app-operator-bench";
    let apps: Api<MyApp> = Api::namespaced(admin.clone(), namespace);
    let mut app = apps
        .create(&PostParams::default(), &new_myapp("owner-probe")?)
        .await?;
    app.metadata.namespace = Some(namespace.to_owned());
    let owner = controller_reference(&app).context("a created MyApp has a uid")?;
    let deployment = myapp::deployment(&app, owner);
    let deployments: Api<Deployment> = Api::namespaced(floor.clone(), namespace);
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let started = Instant::now();
    let accepted = wait_for(Duration::from_secs(120), || async {
        deployments.create(&dry_run, &deployment).await.ok()
    })
    .await;
    apps.delete("owner-probe", &DeleteParams::default()).await?;
    accepted.context("the operator's identity may not create children owned by a MyApp")?;
    eprintln!(
        "bench: children owned by a MyApp accepted after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
