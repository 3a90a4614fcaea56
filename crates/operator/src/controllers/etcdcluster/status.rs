//! The status an EtcdCluster should have, from what etcd said and the plan decided. Member health
//! is etcd's (answered its status endpoint and knows a leader), not Pod readiness.

use app_operator_api::conditions::{DEGRADED, PROGRESSING, READY};
use app_operator_api::etcdcluster::{EtcdClusterPhase, MembersStatus};
use app_operator_api::{EtcdCluster, EtcdClusterStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;

use super::children::selector;
use super::plan::{Blocked, Desired, Membership, Observed, Plan, Step};
use crate::etcd::quorum;
use crate::reconcile::Error;
use crate::reconcile::conditions::{self, set};

pub const AVAILABLE: &str = "Available";

/// What the cluster is moving towards, as the `Progressing` reason.
fn progress(desired: &Desired, observed: &Observed, plan: &Plan) -> Option<&'static str> {
    if let Some(step) = &plan.step {
        return Some(match step {
            Step::Bootstrap { .. } | Step::AddMember { .. } | Step::CreateMemberPod { .. } => {
                "ScalingUp"
            }
            Step::DeletePod { .. } | Step::RemoveMember { .. } => "ScalingDown",
            Step::Promote { .. } => "PromotingLearner",
            Step::ReplaceDead { .. } => "ReplacingDeadMember",
            Step::RestartMember { .. } | Step::RecreateMemberPod { .. } => "RestartingMember",
            Step::Upgrade { .. } => "Upgrading",
        });
    }
    if !plan.progressing {
        return None;
    }
    let Some(etcd) = &observed.etcd else {
        return Some("ScalingUp");
    };
    Some(if etcd.members.iter().any(|m| m.is_learner) {
        "PromotingLearner"
    } else if etcd.members.len() < desired.size || etcd.members.iter().any(|m| !m.started()) {
        "ScalingUp"
    } else if etcd.members.len() > desired.size {
        "ScalingDown"
    } else {
        "Upgrading"
    })
}

pub fn status(
    cluster: &EtcdCluster,
    desired: &Desired,
    observed: &Observed,
    plan: &Plan,
    error: Option<&Error>,
    now: &Time,
) -> EtcdClusterStatus {
    let previous = cluster.status.clone().unwrap_or_default();
    let members = observed.etcd.as_ref().map(|e| e.members.as_slice());
    let voting = observed.etcd.as_ref().map_or(0, |e| e.votes().1);
    let healthy: Vec<String> = members
        .into_iter()
        .flatten()
        .filter(|m| m.healthy && !m.is_learner)
        .map(|m| m.display_name())
        .collect();
    let unready: Vec<String> = members
        .into_iter()
        .flatten()
        .filter(|m| !m.healthy || m.is_learner)
        .map(|m| m.display_name())
        .collect();
    // Started voting members that do not answer (a joining learner is not a fault).
    let unreachable: Vec<String> = members
        .into_iter()
        .flatten()
        .filter(|m| !m.healthy && !m.is_learner && m.started())
        .map(|m| m.display_name())
        .collect();
    let available = observed.etcd.as_ref().is_some_and(Membership::has_quorum);
    let phase = if plan.blocked == Some(Blocked::AllMembersLost) {
        EtcdClusterPhase::Failed
    } else if observed.ever_served || available {
        EtcdClusterPhase::Running
    } else {
        EtcdClusterPhase::Creating
    };
    let current_version = members
        .into_iter()
        .flatten()
        .filter_map(|m| m.version.as_ref())
        .min()
        .or_else(|| {
            observed
                .pods
                .iter()
                .filter_map(|p| p.version.as_ref())
                .min()
        });
    let target_version =
        (current_version != Some(&desired.version)).then(|| desired.version.to_string());
    let summary = format!(
        "{} of {} members healthy ({} voting, quorum {})",
        healthy.len(),
        desired.size,
        voting,
        quorum(voting)
    );

    let available_condition = if available {
        conditions::Desired {
            type_: AVAILABLE,
            status: true,
            reason: "QuorumHealthy",
            message: summary.clone(),
        }
    } else {
        conditions::Desired {
            type_: AVAILABLE,
            status: false,
            reason: if phase == EtcdClusterPhase::Creating {
                "Creating"
            } else if plan.blocked == Some(Blocked::Unreachable) {
                "EtcdUnreachable"
            } else {
                "QuorumLost"
            },
            message: summary.clone(),
        }
    };
    let progressing_condition = match progress(desired, observed, plan) {
        Some(reason) => conditions::Desired {
            type_: PROGRESSING,
            status: true,
            reason,
            message: format!(
                "{} members for size {}; {summary}",
                members.map_or(0, <[_]>::len),
                desired.size
            ),
        },
        None => conditions::Desired {
            type_: PROGRESSING,
            status: false,
            reason: "Settled",
            message: summary.clone(),
        },
    };
    let degraded_condition = match (error, plan.blocked) {
        (Some(error), _) => conditions::degraded(Some(error), ""),
        (None, Some(Blocked::QuorumLost)) => conditions::Desired {
            type_: DEGRADED,
            status: true,
            reason: "QuorumLost",
            message: format!(
                "{summary}: no membership change is safe until a quorum answers again"
            ),
        },
        (None, Some(Blocked::Unreachable)) => conditions::Desired {
            type_: DEGRADED,
            status: true,
            reason: "EtcdUnreachable",
            message: format!(
                "no member answers the operator, but {} of the member Pods pass their own health checks: the operator cannot reach them (a NetworkPolicy, DNS, or TLS between it and port 2379?). It changes nothing it cannot see until one answers",
                observed.pods.iter().filter(|p| p.live() && p.ready).count()
            ),
        },
        // The data went with the members (emptyDir lives and dies with its Pod): only a backup
        // brings it back, and the user has to say which.
        (None, Some(Blocked::AllMembersLost)) => conditions::Desired {
            type_: DEGRADED,
            status: true,
            reason: "QuorumLost",
            message: format!(
                "every member is gone, and its data with it (members without spec.pod.persistentVolumeClaimSpec keep their data on emptyDir, which ends with the Pod): this cluster cannot come back by itself. Restore it from a backup: create a new EtcdCluster with spec.restore.backupName set to an EtcdBackup of {} (`kubectl get etcdbackup -n {}`), then delete this one",
                cluster.name_any(),
                cluster.namespace().unwrap_or_default()
            ),
        },
        (None, Some(Blocked::RestoreFailed)) => conditions::Desired {
            type_: DEGRADED,
            status: true,
            reason: "RestoreFailed",
            message: format!(
                "the first member failed before the cluster served, restoring {}: see its Pod's message. A restore is not retried with the same snapshot; delete the EtcdCluster and create it again (with another snapshot, or after fixing the claim or the bucket)",
                cluster.spec.restore.as_ref().map_or_else(String::new, |r| {
                    match (&r.backup_name, &r.s3) {
                        (Some(backup), _) => format!("from EtcdBackup {backup}"),
                        (None, Some(s3)) => format!("from object {}", s3.path),
                        (None, None) => String::new(),
                    }
                })
            ),
        },
        (None, Some(Blocked::UnsupportedUpgrade)) => conditions::Desired {
            type_: DEGRADED,
            status: true,
            reason: "UnsupportedUpgrade",
            message: format!(
                "etcd upgrades one minor release at a time: {} cannot go to {} directly; set an intermediate version first",
                current_version.map_or_else(|| "?".to_owned(), ToString::to_string),
                desired.version
            ),
        },
        (None, None) if !unreachable.is_empty() => conditions::Desired {
            type_: DEGRADED,
            status: true,
            reason: "MembersUnreachable",
            message: format!("not answering: {}", unreachable.join(", ")),
        },
        (None, None) => conditions::degraded(None, &summary),
    };
    EtcdClusterStatus {
        phase,
        size: i32::try_from(members.map_or(0, <[_]>::len)).unwrap_or(i32::MAX),
        ready_members: i32::try_from(healthy.len()).unwrap_or(i32::MAX),
        members: MembersStatus {
            ready: healthy,
            unready,
        },
        current_version: current_version.map(ToString::to_string),
        target_version,
        conditions: [
            ready(
                &available_condition,
                &progressing_condition,
                &degraded_condition,
            ),
            available_condition,
            progressing_condition,
            degraded_condition,
        ]
        .into_iter()
        .map(|d| set(&previous.conditions, d, cluster.metadata.generation, now))
        .collect(),
        observed_generation: cluster.metadata.generation,
        selector: Some(selector(&cluster.metadata.name.clone().unwrap_or_default())),
        restore: previous.restore.clone(),
    }
}

/// `Ready` (what `kubectl wait` and the printer columns read): available, settled and not
/// degraded; otherwise the reason and message of the first of those that does not hold.
fn ready<'a>(
    available: &conditions::Desired<'a>,
    progressing: &conditions::Desired<'a>,
    degraded: &conditions::Desired<'a>,
) -> conditions::Desired<'a> {
    let holding_back = [(available, false), (progressing, true), (degraded, true)]
        .into_iter()
        .find(|(condition, blocking)| condition.status == *blocking);
    match holding_back {
        None => conditions::Desired {
            type_: READY,
            status: true,
            reason: "ClusterReady",
            message: available.message.clone(),
        },
        Some((condition, _)) => conditions::Desired {
            type_: READY,
            status: false,
            reason: condition.reason,
            message: condition.message.clone(),
        },
    }
}

#[cfg(test)]
mod tests {
    use app_operator_api::EtcdClusterSpec;
    use k8s_openapi::jiff::Timestamp;

    use super::super::plan::{Member, MemberPod};
    use super::*;
    use crate::etcd::version::Version;

    fn cluster() -> EtcdCluster {
        let spec: EtcdClusterSpec =
            serde_json::from_value(serde_json::json!({ "size": 3 })).unwrap();
        let mut cluster = EtcdCluster::new("db", spec);
        cluster.metadata.generation = Some(2);
        cluster
    }

    fn member(id: u64, healthy: bool) -> Member {
        Member {
            id,
            name: format!("db-{id}"),
            pod: Some(format!("db-{id}")),
            is_learner: false,
            healthy,
            version: Version::parse("3.6.16"),
        }
    }

    fn observed(members: Vec<Member>) -> Observed {
        Observed {
            pods: members
                .iter()
                .map(|m| MemberPod {
                    name: m.name.clone(),
                    dead: false,
                    terminating: false,
                    version: Version::parse("3.6.16"),
                    keeps_data: false,
                    losing_data: false,
                    ready: m.healthy,
                })
                .collect(),
            etcd: Some(Membership {
                members,
                leader: Some(1),
            }),
            ever_served: true,
            claims: vec![],
            unreachable: false,
        }
    }

    fn desired() -> Desired {
        Desired {
            size: 3,
            version: Version::parse("3.6.16").unwrap(),
            paused: false,
            restoring: false,
        }
    }

    fn reason(status: &EtcdClusterStatus, type_: &str) -> (String, String) {
        let c = status.conditions.iter().find(|c| c.type_ == type_).unwrap();
        (c.status.clone(), c.reason.clone())
    }

    fn at_rest() -> Plan {
        Plan {
            step: None,
            blocked: None,
            progressing: false,
        }
    }

    #[test]
    fn a_healthy_cluster_is_available_settled_and_not_degraded() {
        let now = Time(Timestamp::constant(10, 0));
        let seen = observed(vec![member(1, true), member(2, true), member(3, true)]);
        let status = status(&cluster(), &desired(), &seen, &at_rest(), None, &now);
        assert_eq!(status.phase, EtcdClusterPhase::Running);
        assert_eq!((status.size, status.ready_members), (3, 3));
        assert_eq!(
            reason(&status, AVAILABLE),
            ("True".into(), "QuorumHealthy".into())
        );
        assert_eq!(
            reason(&status, PROGRESSING),
            ("False".into(), "Settled".into())
        );
        assert_eq!(reason(&status, DEGRADED).0, "False");
        assert_eq!(
            reason(&status, READY),
            ("True".into(), "ClusterReady".into())
        );
        assert_eq!(status.current_version.as_deref(), Some("3.6.16"));
        assert_eq!(status.target_version, None);
        assert_eq!(status.selector.as_deref(), Some("app=etcd,etcd_cluster=db"));
    }

    #[test]
    fn one_unanswering_member_of_three_is_degraded_but_available() {
        let now = Time(Timestamp::constant(10, 0));
        let seen = observed(vec![member(1, true), member(2, true), member(3, false)]);
        let status = status(&cluster(), &desired(), &seen, &at_rest(), None, &now);
        assert_eq!(reason(&status, AVAILABLE).0, "True");
        assert_eq!(
            reason(&status, DEGRADED),
            ("True".into(), "MembersUnreachable".into())
        );
        assert_eq!(status.members.unready, ["db-3"]);
        assert_eq!(
            reason(&status, READY),
            ("False".into(), "MembersUnreachable".into())
        );
    }

    #[test]
    fn every_member_lost_with_its_data_says_how_to_restore_from_a_backup() {
        let now = Time(Timestamp::constant(10, 0));
        let seen = Observed {
            etcd: None,
            ..observed(vec![])
        };
        let plan = Plan {
            step: None,
            blocked: Some(Blocked::AllMembersLost),
            progressing: false,
        };
        let status = status(&cluster(), &desired(), &seen, &plan, None, &now);
        assert_eq!(status.phase, EtcdClusterPhase::Failed);
        let degraded = status
            .conditions
            .iter()
            .find(|c| c.type_ == DEGRADED)
            .unwrap();
        assert_eq!(degraded.reason, "QuorumLost");
        assert!(
            degraded.message.contains("spec.restore.backupName")
                && degraded.message.contains("kubectl get etcdbackup"),
            "{}",
            degraded.message
        );
    }

    #[test]
    fn a_step_names_what_is_progressing_and_a_lost_quorum_is_degraded() {
        let now = Time(Timestamp::constant(10, 0));
        let seen = observed(vec![member(1, true), member(2, false), member(3, false)]);
        let plan = Plan {
            step: Some(Step::ReplaceDead {
                id: 3,
                name: "db-3".into(),
            }),
            blocked: Some(Blocked::QuorumLost),
            progressing: true,
        };
        let status = status(&cluster(), &desired(), &seen, &plan, None, &now);
        assert_eq!(
            reason(&status, PROGRESSING),
            ("True".into(), "ReplacingDeadMember".into())
        );
        assert_eq!(
            reason(&status, AVAILABLE),
            ("False".into(), "QuorumLost".into())
        );
        assert_eq!(
            reason(&status, DEGRADED),
            ("True".into(), "QuorumLost".into())
        );
        assert_eq!(
            reason(&status, READY),
            ("False".into(), "QuorumLost".into())
        );
    }

    #[test]
    fn members_the_operator_cannot_reach_are_not_called_a_lost_quorum() {
        let now = Time(Timestamp::constant(10, 0));
        let mut seen = observed(vec![member(1, true), member(2, true), member(3, true)]);
        seen.etcd = None;
        let plan = Plan {
            step: None,
            blocked: Some(Blocked::Unreachable),
            progressing: false,
        };
        let status = status(&cluster(), &desired(), &seen, &plan, None, &now);
        assert_eq!(
            reason(&status, AVAILABLE),
            ("False".into(), "EtcdUnreachable".into())
        );
        let degraded = status
            .conditions
            .iter()
            .find(|c| c.type_ == DEGRADED)
            .unwrap();
        assert_eq!(degraded.reason, "EtcdUnreachable");
        assert!(
            degraded.message.contains("3 of the member Pods"),
            "{}",
            degraded.message
        );
        assert_eq!(status.phase, EtcdClusterPhase::Running);
    }

    #[test]
    fn a_new_cluster_is_creating_until_it_serves() {
        let now = Time(Timestamp::constant(10, 0));
        let seen = Observed {
            pods: vec![],
            etcd: None,
            ever_served: false,
            claims: vec![],
            unreachable: false,
        };
        let plan = Plan {
            step: Some(Step::Bootstrap { pod: "db-1".into() }),
            blocked: None,
            progressing: true,
        };
        let status = status(&cluster(), &desired(), &seen, &plan, None, &now);
        assert_eq!(status.phase, EtcdClusterPhase::Creating);
        assert_eq!(
            reason(&status, AVAILABLE),
            ("False".into(), "Creating".into())
        );
        assert_eq!(
            reason(&status, PROGRESSING),
            ("True".into(), "ScalingUp".into())
        );
    }
}
