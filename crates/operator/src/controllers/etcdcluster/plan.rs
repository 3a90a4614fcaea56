//! The one membership action a reconcile takes, chosen from what the Pods and etcd itself say.
//! Pure: no I/O, so every ordering rule is a unit test.
//!
//! Order (first that applies wins): restart a dead member that keeps its data on a claim (even
//! without quorum: it comes back with its ID and data); remove Pods that are not members; create
//! the Pod of a member that was added but has none; promote a learner that has started; replace a
//! dead member while quorum holds; add a learner (scale out); remove a non-leader member (scale
//! in); upgrade one member. Without quorum nothing destructive happens; paused observes only.

use crate::etcd::quorum;
use crate::etcd::version::Version;

/// A member Pod as the cache shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberPod {
    pub name: String,
    /// Its process ended (phase Failed or Succeeded): with `restartPolicy: Never` it stays dead.
    pub dead: bool,
    pub terminating: bool,
    /// The etcd version its image runs.
    pub version: Option<Version>,
    /// Its data directory is on its claim (which exists): a new Pod of the same name starts on it.
    pub keeps_data: bool,
    /// Its claim is being deleted: once the Pod goes, so does its data.
    pub losing_data: bool,
    /// The kubelet's probes (the member's own `/health`) pass on the container its spec names
    /// (not the one before an image change): it serves, whether or not the operator can reach
    /// it.
    pub ready: bool,
}

impl MemberPod {
    /// Its process may be running: not dead, not going away.
    pub fn live(&self) -> bool {
        !self.dead && !self.terminating
    }
}

/// A member as etcd lists it, joined with what its own status endpoint said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub id: u64,
    /// Empty until the member's process has started and joined.
    pub name: String,
    /// The Pod its peer URL belongs to (`None`: not an address of this cluster).
    pub pod: Option<String>,
    pub is_learner: bool,
    /// It answered a status request and knows a leader.
    pub healthy: bool,
    /// The server version it reported.
    pub version: Option<Version>,
}

impl Member {
    pub fn started(&self) -> bool {
        !self.name.is_empty()
    }

    /// The name users see: the member's own, or its Pod's before it has started.
    pub fn display_name(&self) -> String {
        match (&self.pod, self.started()) {
            (_, true) | (None, false) => self.name.clone(),
            (Some(pod), false) => pod.clone(),
        }
    }
}

/// etcd's view, when at least one member answered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Membership {
    pub members: Vec<Member>,
    /// The leader's member ID, when one is known.
    pub leader: Option<u64>,
}

impl Membership {
    fn voting(&self) -> impl Iterator<Item = &Member> {
        self.members.iter().filter(|m| !m.is_learner)
    }

    /// Healthy voting members, and all voting members.
    pub fn votes(&self) -> (usize, usize) {
        (
            self.voting().filter(|m| m.healthy).count(),
            self.voting().count(),
        )
    }

    /// The Pod of the member that leads, when one is known.
    pub fn leader_pod(&self) -> Option<&str> {
        let leader = self.leader?;
        self.members.iter().find(|m| m.id == leader)?.pod.as_deref()
    }

    /// Healthy voting members are at least a quorum of the voting ones.
    pub fn has_quorum(&self) -> bool {
        let (healthy, voting) = self.votes();
        healthy >= quorum(voting)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    pub pods: Vec<MemberPod>,
    /// `None`: no member answered.
    pub etcd: Option<Membership>,
    /// The cluster has served before (its status left `Creating`): never bootstrap it again.
    pub ever_served: bool,
    /// The members' data claims (named after their Pods), those not being deleted.
    pub claims: Vec<String>,
    /// No member could even be connected to (as opposed to members that answered without a
    /// leader): with `etcd` `None`, the operator cannot tell a lost quorum from its own
    /// broken path to the members.
    pub unreachable: bool,
}

impl Observed {
    /// A dead Pod whose member keeps its data, to delete (not its claim) so it can start again.
    fn restartable(&self) -> Option<&MemberPod> {
        self.pods
            .iter()
            .find(|p| p.dead && p.keeps_data && !p.terminating)
    }

    /// Data claims with no Pod: a member's Pod deleted to restart it is created again on its claim.
    fn claims_without_pod(&self) -> impl Iterator<Item = &String> {
        self.claims
            .iter()
            .filter(|claim| !self.pods.iter().any(|p| &p.name == *claim))
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Desired {
    pub size: usize,
    pub version: Version,
    pub paused: bool,
    /// The first member starts from a snapshot: if it dies before serving, starting over would
    /// repeat the same failure, so the plan stops instead.
    pub restoring: bool,
}

/// Why no action is taken (also what `Progressing`/`Degraded` report).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blocked {
    /// Healthy voting members are fewer than a quorum: only etcd can recover (or a restore).
    QuorumLost,
    /// No member answers the operator, yet member Pods pass their own health checks: the
    /// operator's path to them is broken, and it changes nothing it cannot see.
    Unreachable,
    /// The cluster served before and every member is gone with its data.
    AllMembersLost,
    /// The version skips a minor release (or changes the major one).
    UnsupportedUpgrade,
    /// The first member died restoring the snapshot, before the cluster ever served.
    RestoreFailed,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Create the first member's Pod with `initial-cluster-state=new`.
    Bootstrap { pod: String },
    /// A Pod that is not (or no longer) a member: delete it.
    DeletePod { pod: String },
    /// A member was added but its Pod was never created: create it (`existing`).
    CreateMemberPod { pod: String },
    /// A member's process ended but its data is on its claim: delete its Pod, keeping the claim.
    RestartMember { pod: String },
    /// Create the Pod of a member again on its kept claim: it starts with its ID and data.
    RecreateMemberPod { pod: String },
    /// A learner has started: make it a voting member.
    Promote { id: u64, name: String },
    /// A member's process is gone for good: remove it; its Pod goes next.
    ReplaceDead { id: u64, name: String },
    /// Scale out: add a learner for a new Pod, then create the Pod (`existing`).
    AddMember { pod: String },
    /// Scale in: remove a member; its Pod goes next.
    RemoveMember { id: u64, name: String },
    /// Move one member's Pod to the desired version.
    Upgrade {
        pod: String,
        from: Option<Version>,
        to: Version,
    },
}

/// The decision: at most one step, and what stands in the way of the others.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub step: Option<Step>,
    pub blocked: Option<Blocked>,
    /// A member is joining, a learner awaits promotion, a member is upgrading or the size differs:
    /// look again soon, since etcd's progress sends no Kubernetes event.
    pub progressing: bool,
}

/// Decides the next step. `new_pod` names a fresh member Pod if one is needed.
pub fn plan(desired: &Desired, observed: &Observed, new_pod: &str) -> Plan {
    let blocked_upgrade = unsupported_upgrade(desired, observed);
    let Some(etcd) = &observed.etcd else {
        return without_membership(desired, observed, new_pod);
    };
    let (healthy_voting, voting) = etcd.votes();
    let progressing = etcd.members.len() != desired.size
        || etcd.members.iter().any(|m| m.is_learner || !m.started())
        || !upgraded(desired, observed);
    let plan = |step: Option<Step>, blocked: Option<Blocked>| Plan {
        step: if desired.paused { None } else { step },
        blocked,
        progressing,
    };
    let member_pods: Vec<&str> = etcd
        .members
        .iter()
        .filter_map(|m| m.pod.as_deref())
        .collect();
    // 0. Members that keep their data come back on it, quorum or not: nothing is removed.
    let blocked = (!etcd.has_quorum()).then_some(Blocked::QuorumLost);
    if let Some(dead) = observed
        .restartable()
        .filter(|p| member_pods.contains(&p.name.as_str()))
    {
        let step = Step::RestartMember {
            pod: dead.name.clone(),
        };
        return plan(Some(step), blocked);
    }
    if let Some(claim) = observed.claims_without_pod().find(|claim| {
        etcd.members
            .iter()
            .any(|m| m.started() && m.pod.as_ref() == Some(*claim))
    }) {
        let step = Step::RecreateMemberPod { pod: claim.clone() };
        return plan(Some(step), blocked);
    }
    if blocked.is_some() {
        return plan(None, blocked);
    }

    let pod = |name: &str| observed.pods.iter().find(|p| p.name == name);

    // 1. Pods (and data claims) that are not members.
    let stray_pods = observed
        .pods
        .iter()
        .filter(|p| !p.terminating)
        .map(|p| &p.name);
    if let Some(stray) = stray_pods
        .chain(observed.claims_without_pod())
        .find(|name| !member_pods.contains(&name.as_str()))
    {
        let step = Step::DeletePod { pod: stray.clone() };
        return plan(Some(step), blocked_upgrade);
    }
    // 2. Added members whose Pod was never created.
    if let Some(pod_name) = etcd
        .members
        .iter()
        .filter(|m| !m.started())
        .filter_map(|m| m.pod.as_deref())
        .find(|name| pod(name).is_none())
    {
        let step = Step::CreateMemberPod {
            pod: pod_name.to_owned(),
        };
        return plan(Some(step), blocked_upgrade);
    }
    // A member whose claim is being deleted is replaced as a dead one: its data is going.
    let is_dead = |m: &Member| {
        m.pod
            .as_deref()
            .and_then(pod)
            .is_none_or(|p| p.dead || p.terminating || p.losing_data)
    };
    // 3. Learners that have started.
    if let Some(learner) = etcd
        .members
        .iter()
        .find(|m| m.is_learner && m.started() && !is_dead(m))
    {
        let step = Step::Promote {
            id: learner.id,
            name: learner.name.clone(),
        };
        return plan(Some(step), blocked_upgrade);
    }
    // 4. Dead members, while the rest still hold a quorum without them.
    if let Some(dead) = etcd.members.iter().find(|m| is_dead(m)) {
        let voting_after = voting - usize::from(!dead.is_learner);
        if healthy_voting >= quorum(voting_after) {
            let step = Step::ReplaceDead {
                id: dead.id,
                name: dead.display_name(),
            };
            return plan(Some(step), blocked_upgrade);
        }
        return plan(None, Some(Blocked::QuorumLost));
    }
    // 5. Scale out, one learner at a time.
    let joining = etcd.members.iter().any(|m| m.is_learner || !m.started());
    if etcd.members.len() < desired.size && !joining {
        let step = Step::AddMember {
            pod: new_pod.to_owned(),
        };
        return plan(Some(step), blocked_upgrade);
    }
    // 6. Scale in: a learner or unhealthy member first, the leader last.
    if etcd.members.len() > desired.size {
        let leader = etcd.leader;
        let mut candidates: Vec<&Member> = etcd.members.iter().collect();
        candidates.sort_by_key(|m| (!m.is_learner, m.healthy, Some(m.id) == leader));
        if let Some(victim) = candidates.first() {
            let voting_after = voting - usize::from(!victim.is_learner);
            let healthy_after = healthy_voting - usize::from(!victim.is_learner && victim.healthy);
            if healthy_after >= quorum(voting_after) {
                let step = Step::RemoveMember {
                    id: victim.id,
                    name: victim.display_name(),
                };
                return plan(Some(step), blocked_upgrade);
            }
        }
        return plan(None, blocked_upgrade);
    }
    // 7. Upgrade one member at a time, the leader last, once all are healthy and none upgrading.
    // Healthy includes the kubelet's view: a member restarted on the new image knows its leader
    // within a second, but its Pod is out of the client Service until its readiness probe passes.
    if blocked_upgrade.is_some() {
        return plan(None, blocked_upgrade);
    }
    let all_healthy = etcd.members.iter().all(|m| {
        let pod_ready = m.pod.as_deref().and_then(pod).is_some_and(|p| p.ready);
        m.healthy && !m.is_learner && pod_ready
    });
    let mid_roll = etcd.members.iter().any(|m| {
        let pod_version = m
            .pod
            .as_deref()
            .and_then(pod)
            .and_then(|p| p.version.as_ref());
        pod_version.is_some() && pod_version != m.version.as_ref()
    });
    if all_healthy && !mid_roll {
        let mut stale: Vec<&Member> = etcd
            .members
            .iter()
            .filter(|m| {
                let pod_version = m
                    .pod
                    .as_deref()
                    .and_then(pod)
                    .and_then(|p| p.version.as_ref());
                pod_version != Some(&desired.version)
            })
            .collect();
        stale.sort_by_key(|m| Some(m.id) == etcd.leader);
        if let Some(member) = stale.first()
            && let Some(pod_name) = &member.pod
        {
            let step = Step::Upgrade {
                pod: pod_name.clone(),
                from: pod(pod_name).and_then(|p| p.version.clone()),
                to: desired.version.clone(),
            };
            return plan(Some(step), None);
        }
    }
    plan(None, None)
}

/// No member answered: bootstrap a new cluster, wait for its first member, restart members that
/// keep their data (after a node restart, say), or report the loss.
fn without_membership(desired: &Desired, observed: &Observed, new_pod: &str) -> Plan {
    let live = observed.pods.iter().any(MemberPod::live);
    let data_kept = !observed.claims.is_empty();
    let restore_failed = desired.restoring && observed.pods.iter().any(|p| p.dead);
    let serving = observed.unreachable && observed.pods.iter().any(|p| p.live() && p.ready);
    let blocked = if observed.ever_served {
        Some(if serving {
            Blocked::Unreachable
        } else if live || data_kept {
            Blocked::QuorumLost
        } else {
            Blocked::AllMembersLost
        })
    } else if restore_failed {
        Some(Blocked::RestoreFailed)
    } else {
        None
    };
    let step = if desired.paused {
        None
    } else if observed.ever_served {
        let restart = observed.restartable().map(|p| Step::RestartMember {
            pod: p.name.clone(),
        });
        restart.or_else(|| {
            let claim = observed.claims_without_pod().next()?;
            Some(Step::RecreateMemberPod { pod: claim.clone() })
        })
    } else if restore_failed {
        None
    } else if let Some(dead) = observed.pods.iter().find(|p| p.dead && !p.terminating) {
        // The first member died before it ever served: start over.
        Some(Step::DeletePod {
            pod: dead.name.clone(),
        })
    } else if observed.pods.is_empty() {
        Some(Step::Bootstrap {
            pod: new_pod.to_owned(),
        })
    } else {
        None
    };
    Plan {
        progressing: !observed.ever_served || step.is_some(),
        step,
        blocked,
    }
}

/// Every member runs the desired version.
fn upgraded(desired: &Desired, observed: &Observed) -> bool {
    observed
        .etcd
        .iter()
        .flat_map(|etcd| &etcd.members)
        .all(|m| m.version.as_ref() == Some(&desired.version))
}

/// The desired version skips a minor release (or changes the major one) from the oldest member.
fn unsupported_upgrade(desired: &Desired, observed: &Observed) -> Option<Blocked> {
    let oldest = observed
        .pods
        .iter()
        .filter_map(|p| p.version.as_ref())
        .min()?;
    (!oldest.may_upgrade_to(&desired.version)).then_some(Blocked::UnsupportedUpgrade)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(text: &str) -> Version {
        Version::parse(text).unwrap()
    }

    fn desired(size: usize) -> Desired {
        Desired {
            size,
            version: v("3.6.16"),
            paused: false,
            restoring: false,
        }
    }

    fn pod(name: &str) -> MemberPod {
        MemberPod {
            name: name.into(),
            dead: false,
            terminating: false,
            version: Some(v("3.6.16")),
            keeps_data: false,
            losing_data: false,
            ready: true,
        }
    }

    fn member(id: u64, name: &str) -> Member {
        Member {
            id,
            name: name.into(),
            pod: Some(name.into()),
            is_learner: false,
            healthy: true,
            version: Some(v("3.6.16")),
        }
    }

    fn observed(pods: Vec<MemberPod>, members: Vec<Member>) -> Observed {
        Observed {
            pods,
            etcd: Some(Membership {
                leader: members.first().map(|m| m.id),
                members,
            }),
            ever_served: true,
            claims: vec![],
            unreachable: false,
        }
    }

    fn step(desired: &Desired, observed: &Observed) -> Option<Step> {
        plan(desired, observed, "new").step
    }

    #[test]
    fn the_leader_is_known_by_its_pod() {
        let mut etcd = Membership {
            members: vec![member(1, "a"), member(2, "b")],
            leader: Some(2),
        };
        assert_eq!(etcd.leader_pod(), Some("b"));
        etcd.leader = Some(3);
        assert_eq!(etcd.leader_pod(), None);
        etcd.leader = None;
        assert_eq!(etcd.leader_pod(), None);
    }

    #[test]
    fn a_new_cluster_bootstraps_one_pod_then_waits_for_it() {
        let mut seen = Observed {
            pods: vec![],
            etcd: None,
            ever_served: false,
            claims: vec![],
            unreachable: false,
        };
        assert_eq!(
            step(&desired(3), &seen),
            Some(Step::Bootstrap { pod: "new".into() })
        );
        seen.pods.push(pod("a"));
        let plan = plan(&desired(3), &seen, "new");
        assert_eq!((plan.step, plan.progressing), (None, true));
    }

    #[test]
    fn a_first_member_that_died_before_serving_is_started_over() {
        let seen = Observed {
            pods: vec![MemberPod {
                dead: true,
                ..pod("a")
            }],
            etcd: None,
            ever_served: false,
            claims: vec![],
            unreachable: false,
        };
        assert_eq!(
            step(&desired(1), &seen),
            Some(Step::DeletePod { pod: "a".into() })
        );
    }

    #[test]
    fn members_serving_but_not_answering_the_operator_are_unreachable_and_left_alone() {
        let dead = MemberPod {
            dead: true,
            ready: false,
            ..pod("c")
        };
        let mut seen = Observed {
            pods: vec![pod("a"), pod("b"), dead],
            etcd: None,
            ever_served: true,
            claims: vec![],
            unreachable: true,
        };
        let plan = plan(&desired(5), &seen, "new");
        assert_eq!(
            (plan.step, plan.blocked),
            (None, Some(Blocked::Unreachable))
        );
        // A member answered that it has no leader: the quorum is lost, whatever the Pods say.
        seen.unreachable = false;
        let plan = self::plan(&desired(5), &seen, "new");
        assert_eq!((plan.step, plan.blocked), (None, Some(Blocked::QuorumLost)));
        // Not Ready either: their own health checks fail too, so the quorum is what is lost.
        seen.unreachable = true;
        for pod in &mut seen.pods {
            pod.ready = false;
        }
        let plan = self::plan(&desired(5), &seen, "new");
        assert_eq!((plan.step, plan.blocked), (None, Some(Blocked::QuorumLost)));
    }

    #[test]
    fn a_cluster_that_served_is_never_bootstrapped_again() {
        let seen = Observed {
            pods: vec![],
            etcd: None,
            ever_served: true,
            claims: vec![],
            unreachable: false,
        };
        let plan = plan(&desired(1), &seen, "new");
        assert_eq!(plan.step, None);
        assert_eq!(plan.blocked, Some(Blocked::AllMembersLost));
    }

    #[test]
    fn scale_out_adds_one_learner_and_promotes_it_once_started() {
        let d = desired(3);
        let seen = observed(vec![pod("a")], vec![member(1, "a")]);
        assert_eq!(step(&d, &seen), Some(Step::AddMember { pod: "new".into() }));

        // Added, Pod not created yet (the operator stopped in between): create it, add nothing.
        let unstarted = Member {
            name: String::new(),
            pod: Some("b".into()),
            is_learner: true,
            healthy: false,
            version: None,
            ..member(2, "b")
        };
        let seen = observed(vec![pod("a")], vec![member(1, "a"), unstarted.clone()]);
        assert_eq!(
            step(&d, &seen),
            Some(Step::CreateMemberPod { pod: "b".into() })
        );
        // Pod created, process not joined yet: wait, never a second learner.
        let seen = observed(vec![pod("a"), pod("b")], vec![member(1, "a"), unstarted]);
        let waiting = plan(&d, &seen, "new");
        assert_eq!((waiting.step, waiting.progressing), (None, true));
        // Started: promote.
        let learner = Member {
            is_learner: true,
            ..member(2, "b")
        };
        let seen = observed(vec![pod("a"), pod("b")], vec![member(1, "a"), learner]);
        assert_eq!(
            step(&d, &seen),
            Some(Step::Promote {
                id: 2,
                name: "b".into()
            })
        );
    }

    #[test]
    fn pods_that_are_not_members_go_first() {
        let seen = observed(vec![pod("a"), pod("stray")], vec![member(1, "a")]);
        assert_eq!(
            step(&desired(3), &seen),
            Some(Step::DeletePod {
                pod: "stray".into()
            })
        );
    }

    #[test]
    fn a_dead_member_is_removed_while_the_others_hold_quorum() {
        let pods = vec![
            pod("a"),
            pod("b"),
            MemberPod {
                dead: true,
                ..pod("c")
            },
        ];
        let dead = Member {
            healthy: false,
            ..member(3, "c")
        };
        let seen = observed(pods, vec![member(1, "a"), member(2, "b"), dead]);
        assert_eq!(
            step(&desired(3), &seen),
            Some(Step::ReplaceDead {
                id: 3,
                name: "c".into()
            })
        );
    }

    /// A Pod whose process ended, its data on its claim.
    fn dead_keeping_data(name: &str) -> MemberPod {
        MemberPod {
            dead: true,
            keeps_data: true,
            ..pod(name)
        }
    }

    fn claims(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn dead_members_that_keep_their_data_restart_on_it_without_quorum() {
        let members = vec![
            member(1, "a"),
            Member {
                healthy: false,
                ..member(2, "b")
            },
            Member {
                healthy: false,
                ..member(3, "c")
            },
        ];
        let mut seen = observed(
            vec![pod("a"), dead_keeping_data("b"), dead_keeping_data("c")],
            members,
        );
        seen.claims = claims(&["a", "b", "c"]);
        let restart = plan(&desired(3), &seen, "new");
        assert_eq!(
            (restart.step, restart.blocked),
            (
                Some(Step::RestartMember { pod: "b".into() }),
                Some(Blocked::QuorumLost)
            )
        );
        // b's Pod deleted, its claim kept: c's next, then b's Pod again on it, never a
        // replacement.
        seen.pods.remove(1);
        assert_eq!(
            step(&desired(3), &seen),
            Some(Step::RestartMember { pod: "c".into() })
        );
        seen.pods.remove(1);
        assert_eq!(
            step(&desired(3), &seen),
            Some(Step::RecreateMemberPod { pod: "b".into() })
        );
    }

    #[test]
    fn after_a_node_restart_members_on_claims_come_back_one_at_a_time() {
        let mut seen = Observed {
            pods: vec![
                dead_keeping_data("a"),
                dead_keeping_data("b"),
                dead_keeping_data("c"),
            ],
            etcd: None,
            ever_served: true,
            claims: claims(&["a", "b", "c"]),
            unreachable: false,
        };
        let first = plan(&desired(3), &seen, "new");
        assert_eq!(
            (first.step, first.blocked, first.progressing),
            (
                Some(Step::RestartMember { pod: "a".into() }),
                Some(Blocked::QuorumLost),
                true
            )
        );
        seen.pods[0].terminating = true;
        assert_eq!(
            step(&desired(3), &seen),
            Some(Step::RestartMember { pod: "b".into() })
        );
        seen.pods = vec![dead_keeping_data("c")];
        assert_eq!(
            step(&desired(3), &seen),
            Some(Step::RestartMember { pod: "c".into() })
        );
        seen.pods = vec![];
        assert_eq!(
            step(&desired(3), &seen),
            Some(Step::RecreateMemberPod { pod: "a".into() })
        );
        seen.pods = vec![pod("a")];
        assert_eq!(
            step(&desired(3), &seen),
            Some(Step::RecreateMemberPod { pod: "b".into() })
        );
    }

    #[test]
    fn every_member_dead_on_empty_dir_is_lost_for_good() {
        let dead = |name| MemberPod {
            dead: true,
            ..pod(name)
        };
        let seen = Observed {
            pods: vec![dead("a"), dead("b"), dead("c")],
            etcd: None,
            ever_served: true,
            claims: vec![],
            unreachable: false,
        };
        let plan = plan(&desired(3), &seen, "new");
        assert_eq!(
            (plan.step, plan.blocked),
            (None, Some(Blocked::AllMembersLost))
        );
    }

    #[test]
    fn a_claim_of_no_member_is_deleted_and_never_restarted() {
        let mut seen = observed(vec![pod("a")], vec![member(1, "a")]);
        seen.claims = claims(&["a", "removed"]);
        assert_eq!(
            step(&desired(1), &seen),
            Some(Step::DeletePod {
                pod: "removed".into()
            })
        );
    }

    #[test]
    fn a_member_whose_claim_is_being_deleted_is_replaced_while_quorum_holds() {
        let losing = MemberPod {
            losing_data: true,
            ..pod("c")
        };
        let members = vec![member(1, "a"), member(2, "b"), member(3, "c")];
        let seen = observed(vec![pod("a"), pod("b"), losing], members);
        assert_eq!(
            step(&desired(3), &seen),
            Some(Step::ReplaceDead {
                id: 3,
                name: "c".into()
            })
        );
    }

    #[test]
    fn two_dead_of_three_is_quorum_lost_and_nothing_is_done() {
        let pods = vec![
            pod("a"),
            MemberPod {
                dead: true,
                ..pod("b")
            },
            MemberPod {
                dead: true,
                ..pod("c")
            },
        ];
        let alive_without_leader = Member {
            healthy: false,
            ..member(1, "a")
        };
        let members = vec![
            alive_without_leader,
            Member {
                healthy: false,
                ..member(2, "b")
            },
            Member {
                healthy: false,
                ..member(3, "c")
            },
        ];
        let plan = plan(&desired(3), &observed(pods, members), "new");
        assert_eq!(plan.step, None);
        assert_eq!(plan.blocked, Some(Blocked::QuorumLost));
    }

    #[test]
    fn scale_in_removes_a_non_leader_and_keeps_quorum() {
        let pods = vec![pod("a"), pod("b"), pod("c")];
        let seen = observed(pods, vec![member(1, "a"), member(2, "b"), member(3, "c")]);
        // Leader is member 1 (the first): it goes last.
        match step(&desired(1), &seen) {
            Some(Step::RemoveMember { id, .. }) => assert_ne!(id, 1),
            other => panic!("expected a member removal, got {other:?}"),
        }
    }

    #[test]
    fn a_first_member_that_died_restoring_is_not_started_over() {
        let dead = MemberPod {
            dead: true,
            ..pod("a")
        };
        let fresh = Observed {
            pods: vec![dead],
            etcd: None,
            ever_served: false,
            claims: vec![],
            unreachable: false,
        };
        assert_eq!(
            step(&desired(3), &fresh),
            Some(Step::DeletePod { pod: "a".into() })
        );
        let restoring = Desired {
            restoring: true,
            ..desired(3)
        };
        let plan = plan(&restoring, &fresh, "new");
        assert_eq!(
            (plan.step, plan.blocked),
            (None, Some(Blocked::RestoreFailed))
        );
    }

    #[test]
    fn paused_observes_only() {
        let d = Desired {
            paused: true,
            ..desired(3)
        };
        let plan = plan(&d, &observed(vec![pod("a")], vec![member(1, "a")]), "new");
        assert_eq!((plan.step, plan.progressing), (None, true));
    }

    #[test]
    fn upgrades_one_member_at_a_time_leader_last() {
        let old = |name: &str| MemberPod {
            version: Some(v("3.5.21")),
            ..pod(name)
        };
        let old_member = |id, name: &str| Member {
            version: Some(v("3.5.21")),
            ..member(id, name)
        };
        let seen = observed(
            vec![old("a"), old("b")],
            vec![old_member(1, "a"), old_member(2, "b")],
        );
        match step(&desired(2), &seen) {
            Some(Step::Upgrade { pod, to, .. }) => {
                assert_eq!((pod.as_str(), to), ("b", v("3.6.16")));
            }
            other => panic!("expected an upgrade, got {other:?}"),
        }
        // b's Pod moved to 3.6 but its member still reports 3.5: wait for it.
        let seen = observed(
            vec![old("a"), pod("b")],
            vec![old_member(1, "a"), old_member(2, "b")],
        );
        assert_eq!(step(&desired(2), &seen), None);
        // b's member runs 3.6, but the kubelet has not yet seen its Pod Ready: wait for it.
        let not_ready = MemberPod {
            ready: false,
            ..pod("b")
        };
        let seen = observed(
            vec![old("a"), not_ready],
            vec![old_member(1, "a"), member(2, "b")],
        );
        assert_eq!(step(&desired(2), &seen), None);
        // b upgraded and Ready: a is next.
        let seen = observed(
            vec![old("a"), pod("b")],
            vec![old_member(1, "a"), member(2, "b")],
        );
        assert!(matches!(
            step(&desired(2), &seen),
            Some(Step::Upgrade { pod, .. }) if pod == "a"
        ));
    }

    #[test]
    fn skipping_a_minor_release_is_unsupported() {
        let old = MemberPod {
            version: Some(v("3.4.30")),
            ..pod("a")
        };
        let old_member = Member {
            version: Some(v("3.4.30")),
            ..member(1, "a")
        };
        let plan = plan(&desired(1), &observed(vec![old], vec![old_member]), "new");
        assert_eq!(plan.step, None);
        assert_eq!(plan.blocked, Some(Blocked::UnsupportedUpgrade));
    }

    #[test]
    fn quorum_sizes() {
        let quorums: Vec<usize> = (1..=7).map(quorum).collect();
        assert_eq!(quorums, [1, 2, 2, 3, 3, 4, 4]);
    }
}
