//! The EtcdCluster controller: an etcd cluster of `size` members, one Pod each. Every reconcile
//! reads the Pods from the cache and the membership from etcd itself, and takes at most one
//! membership step ([`plan`]): a member is added (as a learner) before its Pod starts, promoted
//! once it runs, removed before its Pod is deleted, replaced when its process is gone, upgraded
//! one at a time — and nothing destructive happens without a quorum.

mod children;
pub mod plan;
mod status;

pub use children::{
    DATA_DIR, RESTORED_FROM_ANNOTATION, VERSION_ANNOTATION, secret_volume, selector,
};

use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::Duration;

use app_operator_api::etcdbackup::{BackupStorageType, S3Source};
use app_operator_api::etcdcluster::{
    EtcdClusterPhase, EtcdClusterStatus, RestoreSource, RestoreStatus,
};
use app_operator_api::{EtcdBackup, EtcdCluster};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::Store;
use serde_json::json;

pub use self::children::CLUSTER_LABEL;
use self::children::{
    CONTAINER, ClusterState, MemberPod as MemberPodSpec, REPLACED_CONTAINER_ANNOTATION,
    container_id, pod_version, replaced_container_gone,
};
use self::plan::{Desired, Member, MemberPod, Membership, Observed, Step, plan};
use super::appcluster::pods::is_ready;
use super::{Wiring, bucket};
use crate::etcd::address::Addressing;
use crate::etcd::version::Version;
use crate::etcd::{self as etcd_api, ClientTls, EtcdApi, EtcdError, MemberPods, tls};
use crate::reconcile::apply::controlled;
use crate::reconcile::children::{OnImmutable, Owned, create_child, delete_child};
use crate::reconcile::runner::{Reconciled, Reconciler, Runner, Target, cached};
use crate::reconcile::{Error, FIELD_MANAGER};
use crate::telemetry::metrics::Metrics;

pub const NAME: &str = "etcdcluster";

/// How soon to look again while etcd is changing (a member joining, a learner catching up):
/// etcd's progress sends no Kubernetes event.
const PROGRESS_POLL: Duration = Duration::from_secs(2);

/// How soon to look again while a member does not answer or the cluster has no quorum.
const HEALTH_POLL: Duration = Duration::from_secs(15);

/// How the controller reaches members.
#[derive(Clone)]
pub struct EtcdSettings {
    pub addressing: Addressing,
    pub client: Arc<dyn EtcdApi>,
    /// Given the member Pods' cache, for the client to find members without asking DNS.
    pub member_pods: MemberPods,
}

pub async fn run(wiring: Wiring, shutdown: impl Future<Output = ()> + Send + Sync + 'static) {
    let (settings, etcd) = (wiring.settings, wiring.etcd);
    let mut runner = Runner::<EtcdCluster>::new(NAME, &settings).children(CLUSTER_LABEL);
    let pods = runner.owns();
    etcd.member_pods.watch(pods.clone());
    let reconciler = EtcdClusterReconciler {
        pods,
        services: Owned::new(runner.owns(), OnImmutable::Recreate),
        budgets: Owned::new(runner.owns(), OnImmutable::Recreate),
        claims: runner.owns(),
        etcd,
        helper_image: wiring.helper_image,
        metrics: settings.metrics.clone(),
    };
    runner.run(reconciler, shutdown).await;
}

struct EtcdClusterReconciler {
    pods: Store<Pod>,
    services: Owned<Service>,
    budgets: Owned<PodDisruptionBudget>,
    claims: Store<PersistentVolumeClaim>,
    etcd: EtcdSettings,
    /// The operator's image, which downloads a snapshot from a bucket.
    helper_image: Option<String>,
    metrics: Arc<Metrics>,
}

impl Reconciler for EtcdClusterReconciler {
    type Object = EtcdCluster;
    type Memory = ();

    async fn reconcile(&self, context: &Target<'_, EtcdCluster>) -> Reconciled<EtcdClusterStatus> {
        let (cluster, namespace, uid) = (context.object, &context.namespace, &context.uid);
        if context.deleting() {
            // Going away: the garbage collector removes the Pods, Services and claims.
            return Reconciled::unchanged(Ok(Action::await_change()));
        }
        let Some(version) = Version::parse(&cluster.spec.version) else {
            let error = Error::InvalidSpec {
                field: "spec.version",
                message: format!("{:?} is not an etcd version", cluster.spec.version),
            };
            return Reconciled::unchanged(Err(error));
        };

        let mut outcome = self.apply_children(context, uid).await;

        let (deleting, claims): (Vec<_>, Vec<_>) = controlled(&self.claims, namespace, uid)
            .iter()
            .map(|claim| {
                (
                    claim.name_any(),
                    claim.metadata.deletion_timestamp.is_some(),
                )
            })
            .partition(|(_, deleting)| *deleting);
        let names = |claims: Vec<(String, bool)>| claims.into_iter().map(|(name, _)| name);
        let (deleting, claims): (Vec<String>, Vec<String>) =
            (names(deleting).collect(), names(claims).collect());
        let pods: Vec<MemberPod> = controlled(&self.pods, namespace, uid)
            .iter()
            .map(|pod| member_pod(pod, &claims, &deleting))
            .collect();
        let endpoints = self.endpoints(context, &pods);
        let client = &context.shared.client;
        let etcd = async {
            check_member_secrets(client, cluster).await?;
            client_for(client, &self.etcd.client, cluster).await
        };
        let etcd = match etcd.await {
            Ok(etcd) => Some(etcd),
            Err(error) => {
                outcome = outcome.and(Err(error));
                None
            }
        };
        let membership = match &etcd {
            Some(etcd) => self.membership(context, &**etcd, &endpoints).await,
            None => Err(NoMembership::NotAsked),
        };
        let unreachable = membership.as_ref().err() == Some(&NoMembership::Unreachable);
        let leader = membership.as_ref().ok().and_then(Membership::leader_pod);
        let endpoints = leader_first(endpoints, leader.map(|pod| self.client_url(context, pod)));
        let observed = Observed {
            etcd: membership.ok(),
            unreachable,
            pods,
            claims,
            ever_served: cluster
                .status
                .as_ref()
                .is_some_and(|s| s.phase != EtcdClusterPhase::Creating),
        };
        let desired = Desired {
            size: usize::try_from(cluster.spec.size).unwrap_or(0),
            version,
            paused: cluster.spec.paused,
            restoring: cluster.spec.restore.is_some(),
        };
        let entropy = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        let new_pod = self.etcd.addressing.new_pod_name(&context.name, entropy);
        let plan = plan(&desired, &observed, &new_pod);
        self.record_members(context, &observed);
        if let (Ok(()), Some(step), Some(etcd)) = (&outcome, &plan.step, &etcd) {
            outcome = self
                .take(context, &**etcd, &desired, &endpoints, step)
                .await;
        }

        let now = Time(Timestamp::now());
        let mut status = status::status(
            cluster,
            &desired,
            &observed,
            &plan,
            outcome.as_ref().err(),
            &now,
        );
        if status.restore.is_none() {
            status.restore = controlled(&self.pods, namespace, uid)
                .iter()
                .find_map(|pod| restored_from(pod));
        }
        let unhealthy = observed
            .etcd
            .as_ref()
            .is_none_or(|etcd| etcd.members.iter().any(|m| !m.healthy));
        let then = if plan.step.is_some() || plan.progressing {
            Action::requeue(PROGRESS_POLL)
        } else if plan.blocked.is_some() || unhealthy {
            // A member that stops answering, or comes back, makes no Kubernetes event either.
            Action::requeue(HEALTH_POLL)
        } else {
            Action::await_change()
        };
        Reconciled::status(status, outcome, then)
    }

    fn forget_metrics(&self, namespace: &str, name: &str) {
        self.metrics.forget_etcd_cluster(namespace, name);
    }
}

/// Why a pass has no member list.
#[derive(Debug, PartialEq, Eq)]
enum NoMembership {
    /// No member Pod may be running, or the cluster's TLS Secrets are not usable.
    NotAsked,
    /// Members were reached, and none could list the members (no leader, a learner, a timeout).
    Unanswered,
    /// No member could even be connected to.
    Unreachable,
}

/// `endpoints` with the leader's first. etcd checks a membership change against the connections
/// of the member that receives it: it refuses a removal ("unhealthy cluster") unless, without
/// the member removed, a quorum has been connected to the receiver for 5 s, which is never true
/// of a member that joined a moment ago (the one a scale-out just added). The leader has been
/// connected to every member the longest.
fn leader_first(mut endpoints: Vec<String>, leader: Option<String>) -> Vec<String> {
    if let Some(leader) = leader {
        // Stable: the others keep their order.
        endpoints.sort_by_key(|endpoint| *endpoint != leader);
    }
    endpoints
}

/// The snapshot a restored cluster's first member Pod started from.
fn restored_from(pod: &Pod) -> Option<RestoreStatus> {
    serde_json::from_str(pod.annotations().get(RESTORED_FROM_ANNOTATION)?).ok()
}

/// A member Pod as the plan sees it; `claims` and `deleting` are the data claims that stay and
/// those being deleted.
fn member_pod(pod: &Pod, claims: &[String], deleting: &[String]) -> MemberPod {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    let claim = children::data_claim(pod);
    MemberPod {
        name: pod.name_any(),
        dead: matches!(phase, Some("Failed" | "Succeeded")),
        terminating: pod.metadata.deletion_timestamp.is_some(),
        version: pod_version(pod),
        keeps_data: claim.as_ref().is_some_and(|claim| claims.contains(claim)),
        losing_data: claim.is_some_and(|claim| deleting.contains(&claim)),
        ready: is_ready(pod) && replaced_container_gone(pod),
    }
}

impl EtcdClusterReconciler {
    fn record_members(&self, context: &Target<'_, EtcdCluster>, observed: &Observed) {
        let members = observed.etcd.iter().flat_map(|e| &e.members);
        let mut counts = [0usize; 4];
        for member in members {
            let state = match (member.started(), member.is_learner, member.healthy) {
                (false, _, _) => 3,
                (true, true, _) => 2,
                (true, false, true) => 0,
                (true, false, false) => 1,
            };
            if let Some(count) = counts.get_mut(state) {
                *count += 1;
            }
        }
        let quorum = observed.etcd.as_ref().is_some_and(Membership::has_quorum);
        self.metrics
            .set_etcd_cluster(&context.namespace, &context.name, counts, quorum);
    }

    /// Counts a membership call by its outcome, and passes it on.
    fn counted<T>(
        &self,
        operation: &'static str,
        result: Result<T, EtcdError>,
    ) -> Result<T, EtcdError> {
        let label = result.as_ref().err().map_or("success", EtcdError::label);
        self.metrics.etcd_membership_operation(operation, label);
        result
    }

    /// The Services and the disruption budget: the same for every member, applied every pass.
    async fn apply_children(
        &self,
        context: &Target<'_, EtcdCluster>,
        uid: &str,
    ) -> Result<(), Error> {
        let client = &context.shared.client;
        for service in [
            children::peer_service(context.object, &context.owner),
            children::client_service(context.object, &context.owner),
        ] {
            self.services.apply(client, uid, &service).await?;
        }
        let budget = children::disruption_budget(context.object, &context.owner);
        self.budgets.apply(client, uid, &budget).await.map(drop)
    }

    /// The client URLs of the member Pods whose process may be running.
    fn endpoints(&self, context: &Target<'_, EtcdCluster>, pods: &[MemberPod]) -> Vec<String> {
        pods.iter()
            .filter(|pod| pod.live())
            .map(|pod| self.client_url(context, &pod.name))
            .collect()
    }

    fn client_url(&self, context: &Target<'_, EtcdCluster>, pod: &str) -> String {
        let tls = context.object.spec.server_tls_secret().is_some();
        self.etcd
            .addressing
            .client_url(&context.name, &context.namespace, pod, tls)
    }

    /// etcd's member list joined with each started member's own status; when no member Pod
    /// answers, whether none could even be connected to.
    async fn membership(
        &self,
        context: &Target<'_, EtcdCluster>,
        etcd: &dyn EtcdApi,
        endpoints: &[String],
    ) -> Result<Membership, NoMembership> {
        if endpoints.is_empty() {
            return Err(NoMembership::NotAsked);
        }
        let listed = match etcd_api::members_with_status(etcd, endpoints).await {
            Ok(listed) => listed,
            Err(error) => {
                tracing::debug!(%error, cluster = %context.name, "no member answered the member list");
                return Err(match error {
                    EtcdError::Unreachable { .. } => NoMembership::Unreachable,
                    _ => NoMembership::Unanswered,
                });
            }
        };
        let leader = listed
            .iter()
            .filter_map(|(_, status)| status.as_ref())
            .map(|s| s.leader)
            .find(|leader| *leader != 0);
        let members = listed
            .iter()
            .map(|(member, status)| Member {
                id: member.id,
                name: member.name.clone(),
                pod: member.peer_urls.iter().find_map(|url| {
                    self.etcd
                        .addressing
                        .pod_of_peer_url(&context.name, &context.namespace, url)
                }),
                is_learner: member.is_learner,
                healthy: status.as_ref().is_some_and(|s| s.leader != 0),
                version: status.as_ref().and_then(|s| Version::parse(&s.version)),
            })
            .collect();
        Ok(Membership { members, leader })
    }

    /// Takes one step; records it in an event.
    async fn take(
        &self,
        context: &Target<'_, EtcdCluster>,
        etcd: &dyn EtcdApi,
        desired: &Desired,
        endpoints: &[String],
        step: &Step,
    ) -> Result<(), Error> {
        let (reason, note) = match step {
            Step::Bootstrap { pod } => {
                let peer = self.peer_url(context, pod);
                let restore = match &context.object.spec.restore {
                    Some(source) => {
                        Some(restore_source(context, source, self.helper_image.as_deref()).await?)
                    }
                    None => None,
                };
                self.create_member_pod(
                    context,
                    pod,
                    &desired.version,
                    &format!("{pod}={peer}"),
                    ClusterState::New,
                    restore.as_ref(),
                )
                .await?;
                match restore {
                    Some(restore) => (
                        "RestoringFromBackup",
                        format!(
                            "created the first member {pod}, starting from {}",
                            restored(&restore)
                        ),
                    ),
                    None => ("MemberCreated", format!("created the first member {pod}")),
                }
            }
            Step::DeletePod { pod } => {
                self.delete_member_pod(context, pod).await?;
                (
                    "PodDeleted",
                    format!("deleted Pod {pod}, which is not a member"),
                )
            }
            Step::RestartMember { pod } => {
                let pods: Api<Pod> =
                    Api::namespaced(context.shared.client.clone(), &context.namespace);
                delete_child(&pods, pod, None).await?;
                let note = format!(
                    "member {pod}'s process ended; its Pod is created again on its data claim, keeping the member's ID and data"
                );
                heal(context, "RestartingMember", note).await;
                return Ok(());
            }
            Step::RecreateMemberPod { pod } => {
                let initial = self.cluster_of_claims(context);
                self.create_member_pod(
                    context,
                    pod,
                    &desired.version,
                    &initial,
                    ClusterState::Existing,
                    None,
                )
                .await?;
                (
                    "MemberPodCreated",
                    format!("created member {pod}'s Pod again on its data claim"),
                )
            }
            Step::CreateMemberPod { pod } => {
                let members = etcd
                    .members(endpoints)
                    .await
                    .map_err(etcd_error("list members"))?;
                self.create_joining_pod(context, pod, &desired.version, &members)
                    .await?;
                (
                    "MemberPodCreated",
                    format!("created the Pod of added member {pod}"),
                )
            }
            Step::Promote { id, name } => {
                match self.counted("promote", etcd.promote(endpoints, *id).await) {
                    Ok(_) => {}
                    // Still catching up with the leader: the next look will promote it.
                    Err(EtcdError::LearnerNotReady { .. }) => return Ok(()),
                    Err(error) => return Err(etcd_error("promote a learner")(error)),
                }
                (
                    "MemberPromoted",
                    format!("promoted learner {name} to a voting member"),
                )
            }
            Step::ReplaceDead { id, name } => {
                etcd.remove(&self.removal_endpoints(context, endpoints, name), *id)
                    .await
                    .map_err(etcd_error("remove a dead member"))?;
                let note = format!(
                    "member {name} is dead (its process is gone); removed it, a new member replaces it"
                );
                heal(context, "ReplacingDeadMember", note).await;
                return Ok(());
            }
            Step::AddMember { pod } => {
                let peer = self.peer_url(context, pod);
                let members =
                    match self.counted("add", etcd.add_member(endpoints, &peer, true).await) {
                        Ok(added) => added.members,
                        // etcd refuses a membership change until it has been connected to every
                        // voting member for 5 s (one just promoted, say): not a failure to back off
                        // from, so the next look, at the progress pace, asks again. A member that
                        // stays away shows in the status as unready.
                        Err(EtcdError::Unhealthy { .. }) => return Ok(()),
                        Err(error) => return Err(etcd_error("add a member")(error)),
                    };
                self.create_joining_pod(context, pod, &desired.version, &members)
                    .await?;
                (
                    "MemberAdded",
                    format!("added member {pod} as a learner, then its Pod"),
                )
            }
            Step::RemoveMember { id, name } => {
                match etcd
                    .remove(&self.removal_endpoints(context, endpoints, name), *id)
                    .await
                {
                    Ok(_) => {}
                    // As for an add: asked again at the progress pace.
                    Err(EtcdError::Unhealthy { .. }) => return Ok(()),
                    Err(error) => return Err(etcd_error("remove a member")(error)),
                }
                (
                    "MemberRemoved",
                    format!("removed member {name}; its Pod goes next"),
                )
            }
            Step::Upgrade { pod, from, to } => {
                self.upgrade(context, pod, to).await?;
                let from = from
                    .as_ref()
                    .map_or_else(|| "?".to_owned(), ToString::to_string);
                (
                    "MemberUpgrading",
                    format!("moving member {pod} from {from} to {to}"),
                )
            }
        };
        context
            .shared
            .publish(context.object, EventType::Normal, reason, "Reconcile", note)
            .await;
        Ok(())
    }

    /// `endpoints` with member `name`'s own last: a member that applies its own removal shuts
    /// down, often before it answers, which would turn a done removal into a failed call.
    fn removal_endpoints(
        &self,
        context: &Target<'_, EtcdCluster>,
        endpoints: &[String],
        name: &str,
    ) -> Vec<String> {
        let own = self.client_url(context, name);
        let (own, others): (Vec<String>, Vec<String>) = endpoints
            .iter()
            .cloned()
            .partition(|endpoint| *endpoint == own);
        others.into_iter().chain(own).collect()
    }

    fn peer_url(&self, context: &Target<'_, EtcdCluster>, pod: &str) -> String {
        let tls = context.object.spec.peer_tls_secret().is_some();
        self.etcd
            .addressing
            .peer_url(&context.name, &context.namespace, pod, tls)
    }

    /// `name=peerURL,…` for every member; a member that has not started yet goes by its Pod name.
    fn initial_cluster(
        &self,
        context: &Target<'_, EtcdCluster>,
        members: &[etcd_api::Member],
        joining: &str,
    ) -> String {
        members
            .iter()
            .flat_map(|member| {
                let name = if member.name.is_empty() {
                    member
                        .peer_urls
                        .iter()
                        .find_map(|url| {
                            self.etcd.addressing.pod_of_peer_url(
                                &context.name,
                                &context.namespace,
                                url,
                            )
                        })
                        .unwrap_or_else(|| joining.to_owned())
                } else {
                    member.name.clone()
                };
                member
                    .peer_urls
                    .iter()
                    .map(move |url| format!("{name}={url}"))
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    async fn create_member_pod(
        &self,
        context: &Target<'_, EtcdCluster>,
        pod: &str,
        version: &Version,
        initial_cluster: &str,
        state: ClusterState,
        restore: Option<&RestoreStatus>,
    ) -> Result<(), Error> {
        let client = &context.shared.client;
        if let Some(claim) = children::member_claim(context.object, &context.owner, pod) {
            let claims: Api<PersistentVolumeClaim> =
                Api::namespaced(client.clone(), &context.namespace);
            if cached(&self.claims, pod, &context.namespace).is_none() {
                create_child(&claims, &claim).await?;
            }
        }
        let spec = MemberPodSpec {
            name: pod,
            version,
            initial_cluster,
            state,
            addressing: self.etcd.addressing,
            restore,
            helper_image: self.helper_image.as_deref(),
        };
        let member = children::member_pod(context.object, &context.owner, &spec);
        let pods: Api<Pod> = Api::namespaced(client.clone(), &context.namespace);
        create_child(&pods, &member).await
    }

    /// `name=peerURL,…` for every member with a data claim. A member restarting on its data
    /// ignores the flag (its data holds the membership); it is set for a member whose data
    /// directory is still empty, which joins as any other.
    fn cluster_of_claims(&self, context: &Target<'_, EtcdCluster>) -> String {
        controlled(&self.claims, &context.namespace, &context.uid)
            .iter()
            .map(|claim| {
                let pod = claim.name_any();
                format!("{pod}={}", self.peer_url(context, &pod))
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Creates the Pod of a member already added to `members`, to join the running cluster.
    async fn create_joining_pod(
        &self,
        context: &Target<'_, EtcdCluster>,
        pod: &str,
        version: &Version,
        members: &[etcd_api::Member],
    ) -> Result<(), Error> {
        let initial = self.initial_cluster(context, members, pod);
        self.create_member_pod(
            context,
            pod,
            version,
            &initial,
            ClusterState::Existing,
            None,
        )
        .await
    }

    /// Deletes a member's Pod and its data claim.
    async fn delete_member_pod(
        &self,
        context: &Target<'_, EtcdCluster>,
        pod: &str,
    ) -> Result<(), Error> {
        let client = &context.shared.client;
        let pods: Api<Pod> = Api::namespaced(client.clone(), &context.namespace);
        delete_child(&pods, pod, None).await?;
        if cached(&self.claims, pod, &context.namespace).is_none() {
            return Ok(());
        }
        let claims: Api<PersistentVolumeClaim> =
            Api::namespaced(client.clone(), &context.namespace);
        delete_child(&claims, pod, None).await
    }

    /// Moves a member's Pod to `version` in place: the kubelet restarts its container with the
    /// new image on the same data, so the member keeps its ID (as the coreos operator did). The
    /// Pod names the container replaced, so that the member counts as ready only once the
    /// kubelet reports another.
    async fn upgrade(
        &self,
        context: &Target<'_, EtcdCluster>,
        pod: &str,
        version: &Version,
    ) -> Result<(), Error> {
        let pods: Api<Pod> = Api::namespaced(context.shared.client.clone(), &context.namespace);
        let replaced = cached(&self.pods, pod, &context.namespace)
            .and_then(|pod| container_id(&pod).map(str::to_owned))
            .unwrap_or_default();
        let patch = json!({
            "metadata": { "annotations": {
                VERSION_ANNOTATION: version.to_string(),
                REPLACED_CONTAINER_ANNOTATION: replaced,
            } },
            "spec": { "containers": [{
                "name": CONTAINER,
                "image": crate::etcd::image(&context.object.spec.repository, version),
            }]},
        });
        pods.patch(
            pod,
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Strategic(&patch),
        )
        .await
        .map(drop)
        .map_err(|source| Error::Apply {
            kind: "Pod".into(),
            name: pod.to_owned(),
            source,
        })
    }
}

/// How a restore's source reads in events: `snapshot F of EtcdBackup B (revision R)`, or
/// `object P`.
fn restored(restore: &RestoreStatus) -> String {
    let mut said = match (&restore.backup_name, &restore.s3) {
        (Some(backup), Some(_)) => format!("object {} of EtcdBackup {backup}", restore.snapshot),
        (Some(backup), None) => format!("snapshot {} of EtcdBackup {backup}", restore.snapshot),
        (None, _) => format!("object {}", restore.snapshot),
    };
    if let Some(revision) = restore.etcd_revision {
        said.push_str(&format!(" (revision {revision})"));
    }
    said
}

/// The snapshot `source` names: an object in a bucket (whose Secret must exist), or one from
/// its EtcdBackup's status (waits while the backup is missing or has no such snapshot yet). A
/// snapshot in a bucket is downloaded by the operator's own image, so `helper_image` must be
/// known.
async fn restore_source(
    context: &Target<'_, EtcdCluster>,
    source: &RestoreSource,
    helper_image: Option<&str>,
) -> Result<RestoreStatus, Error> {
    let (client, namespace) = (&context.shared.client, &context.namespace);
    let bucket_needs = |s3: &S3Source| {
        let s3 = s3.clone();
        async move {
            let field = "spec.restore.s3";
            bucket::ready(
                client,
                namespace,
                helper_image,
                &s3,
                field,
                "a restore from a bucket",
            )
            .await
            .map(|_| ())
        }
    };
    let name = match (&source.backup_name, &source.s3) {
        (_, Some(s3)) => {
            bucket_needs(s3).await?;
            return Ok(RestoreStatus {
                backup_name: None,
                claim_name: None,
                s3: Some(s3.clone()),
                snapshot: s3.path.clone(),
                etcd_revision: None,
            });
        }
        (Some(name), None) => name,
        (None, None) => {
            return Err(Error::InvalidSpec {
                field: "spec.restore",
                message: "set backupName or s3".into(),
            });
        }
    };
    let backups: Api<EtcdBackup> = Api::namespaced(client.clone(), namespace);
    let backup = backups.get_opt(name).await.map_err(|source| Error::Get {
        kind: "EtcdBackup".into(),
        name: name.clone(),
        source,
    })?;
    let Some(backup) = backup else {
        return Err(Error::Waiting {
            reason: "RestoreSourceNotFound",
            message: format!(
                "spec.restore.backupName: EtcdBackup {name} does not exist in namespace {namespace}; the cluster starts once it has a snapshot"
            ),
        });
    };
    let status = backup.status.unwrap_or_default();
    let kept: Vec<&str> = status.snapshots.iter().map(|s| s.file.as_str()).collect();
    // In a bucket a snapshot is `<bucket>/<key>`; `snapshot` may name its last part.
    let snapshot = match &source.snapshot {
        Some(file) => status
            .snapshots
            .iter()
            .find(|s| &s.file == file || s.file.rsplit('/').next() == Some(file.as_str())),
        None => status.snapshots.first(),
    };
    let location = match (&backup.spec.s3, status.claim_name) {
        (Some(s3), _) if backup.spec.storage_type == BackupStorageType::S3 => {
            Some((None, Some(s3)))
        }
        (_, Some(claim)) => Some((Some(claim), None)),
        _ => None,
    };
    match (snapshot, location) {
        (Some(snapshot), Some((claim_name, s3))) => {
            let s3 = s3.map(|s3| S3Source {
                path: snapshot.file.clone(),
                ..s3.clone()
            });
            if let Some(s3) = &s3 {
                bucket_needs(s3).await?;
            }
            Ok(RestoreStatus {
                backup_name: Some(name.clone()),
                claim_name,
                s3,
                snapshot: snapshot.file.clone(),
                etcd_revision: Some(snapshot.etcd_revision),
            })
        }
        _ => Err(Error::Waiting {
            reason: "RestoreSourceNotReady",
            message: match &source.snapshot {
                Some(file) => format!(
                    "spec.restore.snapshot: EtcdBackup {name} keeps no snapshot {file} (it keeps: {})",
                    if kept.is_empty() {
                        "none yet".to_owned()
                    } else {
                        kept.join(", ")
                    }
                ),
                None => format!(
                    "EtcdBackup {name} has no snapshot yet; the cluster starts once it has one"
                ),
            },
        }),
    }
}

/// The members' own TLS Secrets exist with their keys: without them the members' Pods would
/// wait for their volumes, saying so only in events. Waited for (we do not watch Secrets:
/// retried with backoff).
async fn check_member_secrets(client: &kube::Client, cluster: &EtcdCluster) -> Result<(), Error> {
    let spec = &cluster.spec;
    let namespace = cluster.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let members = [
        (
            spec.peer_tls_secret(),
            "member.peerSecret",
            ["peer.crt", "peer.key", "peer-ca.crt"],
        ),
        (
            spec.server_tls_secret(),
            "member.serverSecret",
            ["server.crt", "server.key", "server-ca.crt"],
        ),
    ];
    for (name, field, keys) in members {
        let Some(name) = name else { continue };
        let data = secret_data(&secrets, name, field, &namespace).await?;
        if let Some(missing) = keys.iter().find(|key| !data.contains_key(**key)) {
            let why = format!("it has no key {missing}");
            return Err(unusable_secret(field, name, &keys, why));
        }
    }
    Ok(())
}

/// The etcd client for `cluster`: `shared` itself, or, for a cluster whose members serve TLS, one
/// presenting the certificate of `spec.TLS.static.operatorSecret`. A missing or unusable Secret
/// is waited for (retried with backoff).
pub async fn client_for(
    client: &kube::Client,
    shared: &Arc<dyn EtcdApi>,
    cluster: &EtcdCluster,
) -> Result<Arc<dyn EtcdApi>, Error> {
    let Some(name) = cluster.spec.operator_tls_secret() else {
        return Ok(shared.clone());
    };
    let namespace = cluster.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let field = "operatorSecret";
    let data = secret_data(&secrets, name, field, &namespace).await?;
    let keys = [tls::CLIENT_CERT, tls::CLIENT_KEY, tls::CLIENT_CA];
    let tls = ClientTls::from_secret_data(&data)
        .map_err(|error| unusable_secret(field, name, &keys, error.to_string()))?;
    Ok(shared.with_client_tls(&tls))
}

/// The data of Secret `name`, named by `spec.TLS.static.<field>`.
async fn secret_data(
    secrets: &Api<Secret>,
    name: &str,
    field: &str,
    namespace: &str,
) -> Result<std::collections::BTreeMap<String, k8s_openapi::ByteString>, Error> {
    let secret = secrets.get_opt(name).await.map_err(|source| Error::Get {
        kind: "Secret".into(),
        name: name.to_owned(),
        source,
    })?;
    let Some(secret) = secret else {
        return Err(Error::Waiting {
            reason: "TLSSecretNotFound",
            message: format!(
                "spec.TLS.static.{field}: Secret {name} does not exist in namespace {namespace}; the cluster waits for it"
            ),
        });
    };
    Ok(secret.data.unwrap_or_default())
}

fn unusable_secret(field: &str, name: &str, keys: &[&str], why: String) -> Error {
    Error::Waiting {
        reason: "TLSSecretInvalid",
        message: format!(
            "spec.TLS.static.{field}: Secret {name} cannot be used: {why} (it needs keys {})",
            keys.join(", ")
        ),
    }
}

/// A Warning event for a step that heals a member whose process ended.
async fn heal(context: &Target<'_, EtcdCluster>, reason: &str, note: String) {
    context
        .shared
        .publish(context.object, EventType::Warning, reason, "Heal", note)
        .await;
}

fn etcd_error(action: &'static str) -> impl Fn(EtcdError) -> Error {
    move |source| Error::Etcd { action, source }
}

#[cfg(test)]
mod tests {
    use super::leader_first;

    fn urls(names: &[&str]) -> Vec<String> {
        names
            .iter()
            .map(|name| format!("http://{name}:2379"))
            .collect()
    }

    #[test]
    fn membership_changes_go_to_the_leader_first() {
        let endpoints = urls(&["joined-a-moment-ago", "b", "leader", "d"]);
        let leader = Some("http://leader:2379".to_owned());
        assert_eq!(
            leader_first(endpoints.clone(), leader),
            urls(&["leader", "joined-a-moment-ago", "b", "d"])
        );
        assert_eq!(leader_first(endpoints.clone(), None), endpoints);
    }
}
