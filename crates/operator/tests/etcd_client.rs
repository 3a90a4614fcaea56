//! The etcd client against real etcd processes (no Kubernetes): membership changes as a
//! controller makes them, and etcd's refusals as the variants it acts on.

// Test code: a failed expectation is a failed test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::slice::from_ref;
use std::time::{Duration, Instant};

use app_operator::etcd::{EtcdApi, EtcdError, EtcdGateway, GatewaySettings, Member};
use testkit::etcd::{EtcdMember, client_url, free_address, http_get, peer_url, start_cluster};
use testkit::eventually;

/// For what the cluster needs time to do (a learner catching up, a leader stepping down).
const TIMEOUT: Duration = Duration::from_secs(60);

fn gateway(request_timeout: Duration) -> EtcdGateway {
    EtcdGateway::new(GatewaySettings {
        request_timeout,
        connect_timeout: Duration::from_secs(2),
    })
}

fn member(members: &[Member], id: u64) -> Option<&Member> {
    members.iter().find(|m| m.id == id)
}

async fn id_of(etcd: &EtcdGateway, endpoints: &[String], name: &str) -> u64 {
    let members = etcd.members(endpoints).await.unwrap();
    members
        .iter()
        .find(|m| m.name == name)
        .unwrap_or_else(|| panic!("no member {name} in {members:?}"))
        .id
}

/// The ID of a member, from its own answer.
async fn id_of_member(etcd: &EtcdGateway, member: &EtcdMember) -> u64 {
    id_of(etcd, &[member.client_url()], &member.name).await
}

/// The index of the leader and those of the followers, from the members' own statuses.
async fn roles(etcd: &EtcdGateway, cluster: &[EtcdMember]) -> (usize, Vec<usize>) {
    eventually(TIMEOUT, "one leader that every member knows", || async {
        let mut statuses = Vec::new();
        for member in cluster {
            statuses.push(etcd.status(&member.client_url()).await.ok()?);
        }
        let leader = statuses.iter().position(|s| s.is_leader())?;
        let leader_id = statuses[leader].member_id;
        if !statuses.iter().all(|s| s.leader == leader_id) {
            return None;
        }
        let followers = (0..cluster.len()).filter(|i| *i != leader).collect();
        Some((leader, followers))
    })
    .await
}

/// Whether `member` reports its connection to peer `remote` as active (its `/metrics`).
async fn sees_peer_active(member: &EtcdMember, local: u64, remote: u64) -> Option<bool> {
    let (_, metrics) = http_get(member.client_address(), "/metrics").await?;
    let labels = format!("{{Local=\"{local:x}\",Remote=\"{remote:x}\"}}");
    let line = metrics
        .lines()
        .find(|line| line.starts_with("etcd_network_active_peers") && line.contains(&labels))?;
    Some(line.rsplit(' ').next()? != "0")
}

/// Retries `change` while etcd refuses it as `Unhealthy`: a member counts a peer as connected
/// only 5 s after it connected, so changes right after a member (re)joins are refused.
async fn once_healthy<T, F, Fut>(what: &str, mut change: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, EtcdError>>,
{
    eventually(TIMEOUT, what, || {
        let attempt = change();
        async move {
            match attempt.await {
                Ok(value) => Some(value),
                Err(EtcdError::Unhealthy { .. }) => None,
                Err(error) => panic!("{what}: {error}"),
            }
        }
    })
    .await
}

#[tokio::test]
async fn a_single_member_lists_itself_and_leads() {
    let cluster = start_cluster(1).await;
    let m0 = &cluster[0];
    let etcd = EtcdGateway::default();

    let members = etcd.members(&[m0.client_url()]).await.unwrap();
    assert_eq!(members.len(), 1, "{members:?}");
    let listed = &members[0];
    assert_eq!(listed.name, "m0");
    assert_eq!(listed.peer_urls, [m0.peer_url()]);
    assert_eq!(listed.client_urls, [m0.client_url()]);
    assert!(!listed.is_learner);
    assert!(listed.is_started());

    let status = etcd.status(&m0.client_url()).await.unwrap();
    assert_eq!(status.member_id, listed.id);
    assert!(status.is_leader(), "{status:?}");
    assert!(status.version.starts_with("3.6."), "{status:?}");
    assert!(status.errors.is_empty(), "{status:?}");
    assert!(!status.is_learner);
    assert!(
        status.raft_term >= 1 && status.raft_index >= 1,
        "{status:?}"
    );
    assert!(status.db_size > 0 && status.db_size_quota > 0, "{status:?}");
    assert_ne!(status.cluster_id, 0);
}

#[tokio::test]
async fn a_learner_joins_unnamed_is_named_once_started_and_promoted_once_in_sync() {
    let cluster = start_cluster(1).await;
    let m0 = &cluster[0];
    let endpoints = vec![m0.client_url()];
    let etcd = EtcdGateway::default();
    let address = free_address();

    let added = etcd
        .add_member(&endpoints, &peer_url(address), true)
        .await
        .unwrap();
    let id = added.member.id;
    assert!(added.member.is_learner);
    assert_eq!(added.member.name, "", "not started yet");
    assert!(added.member.client_urls.is_empty());
    assert_eq!(added.member.peer_urls, [peer_url(address)]);
    assert_eq!(added.members.len(), 2);
    assert_eq!(member(&added.members, id), Some(&added.member));

    let members = etcd.members(&endpoints).await.unwrap();
    let learner = member(&members, id).unwrap();
    assert!(learner.is_learner && !learner.is_started(), "{learner:?}");

    // Its process is not running: it cannot be in sync.
    let early = etcd.promote(&endpoints, id).await;
    assert!(
        matches!(early, Err(EtcdError::LearnerNotReady { .. })),
        "{early:?}"
    );

    let m1 = EtcdMember::join("m1", address, &[m0]).await;
    let joined = eventually(TIMEOUT, "the learner to publish its name", || async {
        let members = etcd.members(&endpoints).await.ok()?;
        member(&members, id).filter(|m| m.is_started()).cloned()
    })
    .await;
    assert_eq!(joined.name, "m1");
    assert_eq!(joined.client_urls, [m1.client_url()]);
    assert!(joined.is_learner);

    // A learner answers its status, but not the member list: the list moves on to the next
    // endpoint.
    let status = etcd.status(&m1.client_url()).await.unwrap();
    assert_eq!(status.member_id, id);
    assert!(status.is_learner);
    assert_eq!(status.leader, id_of_member(&etcd, m0).await);
    let refused = etcd.members(&[m1.client_url()]).await;
    assert!(
        matches!(refused, Err(EtcdError::LearnerEndpoint { .. })),
        "{refused:?}"
    );
    let members = etcd
        .members(&[m1.client_url(), m0.client_url()])
        .await
        .unwrap();
    assert_eq!(members.len(), 2);

    let promoted = eventually(
        TIMEOUT,
        "the learner to catch up and be promoted",
        || async {
            match etcd.promote(&endpoints, id).await {
                Ok(members) => Some(members),
                Err(EtcdError::LearnerNotReady { .. }) => None,
                Err(error) => panic!("promoting: {error}"),
            }
        },
    )
    .await;
    assert!(!member(&promoted, id).unwrap().is_learner, "{promoted:?}");
    assert!(promoted.iter().all(|m| !m.is_learner), "{promoted:?}");

    // Once it has applied its promotion too, it says it is no learner and serves the list.
    eventually(TIMEOUT, "m1 to apply its promotion", || async {
        let status = etcd.status(&m1.client_url()).await.ok()?;
        (!status.is_learner).then_some(())
    })
    .await;
    let members = etcd.members(&[m1.client_url()]).await.unwrap();
    assert_eq!(members.len(), 2);
    assert!(members.iter().all(Member::is_started), "{members:?}");
}

#[tokio::test]
async fn a_voting_member_is_added_started_and_removed() {
    let cluster = start_cluster(1).await;
    let m0 = &cluster[0];
    let endpoints = vec![m0.client_url()];
    let etcd = EtcdGateway::default();
    let address = free_address();

    let added = etcd
        .add_member(&endpoints, &peer_url(address), false)
        .await
        .unwrap();
    let id = added.member.id;
    assert!(!added.member.is_learner);
    assert!(!added.member.is_started());

    let mut m1 = EtcdMember::join("m1", address, &[m0]).await;
    eventually(TIMEOUT, "m1 to publish its name", || async {
        let members = etcd.members(&endpoints).await.ok()?;
        member(&members, id).filter(|m| m.name == "m1")?;
        Some(())
    })
    .await;
    let status = etcd.status(&m1.client_url()).await.unwrap();
    assert_eq!(status.member_id, id);
    assert!(status.has_leader(), "{status:?}");

    let left = once_healthy("removing m1", || etcd.remove(&endpoints, id)).await;
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0].name, "m0");
    let members = etcd.members(&endpoints).await.unwrap();
    assert_eq!(members, left);

    // etcd stops a member that learns it was removed.
    let deadline = Instant::now() + TIMEOUT;
    while m1.process().exited().is_none() {
        assert!(
            Instant::now() < deadline,
            "the removed member is still running"
        );
        // Between looks at the process, under the deadline above.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn refusals_map_to_variants_a_controller_can_act_on() {
    let cluster = start_cluster(1).await;
    let m0 = &cluster[0];
    let endpoints = vec![m0.client_url()];
    let etcd = EtcdGateway::default();
    let m0_id = id_of_member(&etcd, m0).await;
    let unknown = 0x1234_5678;

    let error = etcd.remove(&endpoints, unknown).await.unwrap_err();
    assert_eq!(
        error,
        EtcdError::MemberNotFound {
            endpoint: m0.client_url(),
            message: "etcdserver: member not found".into()
        }
    );
    let error = etcd.promote(&endpoints, unknown).await.unwrap_err();
    assert!(
        matches!(error, EtcdError::MemberNotFound { .. }),
        "{error:?}"
    );

    let error = etcd.promote(&endpoints, m0_id).await.unwrap_err();
    assert_eq!(
        error,
        EtcdError::NotALearner {
            endpoint: m0.client_url(),
            message: "etcdserver: can only promote a learner member".into()
        }
    );

    let learner = peer_url(free_address());
    etcd.add_member(&endpoints, &learner, true).await.unwrap();
    let error = etcd
        .add_member(&endpoints, &peer_url(free_address()), true)
        .await
        .unwrap_err();
    assert_eq!(
        error,
        EtcdError::TooManyLearners {
            endpoint: m0.client_url(),
            message: "etcdserver: too many learner members in cluster".into()
        }
    );

    // Within the second of the first add, etcd finds the ID (derived from the URLs and the
    // second) taken; later, the URL.
    let error = etcd
        .add_member(&endpoints, &learner, false)
        .await
        .unwrap_err();
    let EtcdError::PeerUrlExists { endpoint, message } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(endpoint, &m0.client_url());
    assert!(
        [
            "etcdserver: member ID already exist",
            "etcdserver: Peer URLs already exists"
        ]
        .contains(&message.as_str()),
        "{message}"
    );
    // Into the next second, for an ID of its own: nothing is watched.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let error = etcd
        .add_member(&endpoints, &learner, false)
        .await
        .unwrap_err();
    assert_eq!(
        error,
        EtcdError::PeerUrlExists {
            endpoint: m0.client_url(),
            message: "etcdserver: Peer URLs already exists".into()
        }
    );

    let error = etcd
        .add_member(&endpoints, "not-a-url", true)
        .await
        .unwrap_err();
    assert_eq!(
        error,
        EtcdError::Other {
            endpoint: m0.client_url(),
            code: 3,
            message: "etcdserver: given member URLs are invalid".into()
        }
    );

    // None of the refused changes happened.
    let members = etcd.members(&endpoints).await.unwrap();
    assert_eq!(members.len(), 2, "{members:?}");
}

#[tokio::test]
async fn changes_that_would_endanger_the_quorum_are_refused() {
    let mut cluster = start_cluster(3).await;
    let etcd = EtcdGateway::default();
    // Changes go to the leader, and a follower dies: no election, whose proposals a dying
    // leader would swallow until the deadline.
    let (leader, followers) = roles(&etcd, &cluster).await;
    let (dead, alive) = (followers[0], followers[1]);
    let endpoint = cluster[leader].client_url();
    let endpoints = vec![endpoint.clone()];
    let leader_id = id_of(&etcd, &endpoints, &cluster[leader].name).await;
    let dead_id = id_of(&etcd, &endpoints, &cluster[dead].name).await;
    let alive_id = id_of(&etcd, &endpoints, &cluster[alive].name).await;

    cluster[dead].kill();
    eventually(
        TIMEOUT,
        "the leader to see the dead member gone",
        || async {
            sees_peer_active(&cluster[leader], leader_id, dead_id)
                .await
                .filter(|active| !active)
        },
    )
    .await;

    // Two of three connected: a fourth member (even a learner) would need three.
    for learner in [false, true] {
        let error = etcd
            .add_member(&endpoints, &peer_url(free_address()), learner)
            .await
            .unwrap_err();
        assert_eq!(
            error,
            EtcdError::Unhealthy {
                endpoint: endpoint.clone(),
                message: "etcdserver: unhealthy cluster".into()
            },
            "learner: {learner}"
        );
    }

    // Replacing a dead member starts with removing it: allowed, it is not part of the quorum.
    let left = etcd.remove(&endpoints, dead_id).await.unwrap();
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(member(&left, dead_id).is_none());

    // Members added but never started count against the quorum.
    let unstarted = once_healthy("adding a voting member", || async {
        let peer = peer_url(free_address());
        etcd.add_member(&endpoints, &peer, false).await
    })
    .await;
    assert!(!unstarted.member.is_started());
    let error = etcd
        .add_member(&endpoints, &peer_url(free_address()), false)
        .await
        .unwrap_err();
    assert_eq!(
        error,
        EtcdError::NotEnoughStartedMembers {
            endpoint: endpoint.clone(),
            message: "etcdserver: re-configuration failed due to not enough started members".into()
        }
    );
    let error = etcd.remove(&endpoints, alive_id).await.unwrap_err();
    assert!(
        matches!(error, EtcdError::NotEnoughStartedMembers { .. }),
        "{error:?}"
    );

    let members = etcd.members(&endpoints).await.unwrap();
    assert_eq!(members.len(), 3, "{members:?}");
}

#[tokio::test]
async fn without_a_quorum_calls_fail_with_no_leader_instead_of_hanging() {
    let mut cluster = start_cluster(3).await;
    let request_timeout = Duration::from_secs(3);
    let etcd = gateway(request_timeout);
    let m0 = cluster[0].client_url();
    let m1 = cluster[1].client_url();
    let m0_only = vec![m0.clone()];
    let m2_id = id_of(&etcd, &m0_only, "m2").await;

    cluster[1].kill();
    cluster[2].kill();
    let status = eventually(TIMEOUT, "m0 to lose its leader", || async {
        etcd.status(&m0).await.ok().filter(|s| !s.has_leader())
    })
    .await;
    assert_eq!(status.errors, ["etcdserver: no leader"]);

    let quick = request_timeout + Duration::from_secs(2);
    let no_leader = |result: Result<(), EtcdError>, started: Instant, what: &str| {
        let elapsed = started.elapsed();
        assert!(elapsed < quick, "{what} took {elapsed:?}");
        assert_eq!(
            result,
            Err(EtcdError::NoLeader {
                endpoint: m0.clone(),
                message: "etcdserver: no leader".into()
            }),
            "{what}"
        );
    };

    let started = Instant::now();
    let result = etcd.members(&m0_only).await.map(drop);
    no_leader(result, started, "listing");
    // The dead member is skipped; the live one's answer is the error.
    let started = Instant::now();
    let result = etcd.members(&[m1.clone(), m0.clone()]).await.map(drop);
    no_leader(result, started, "listing through a dead member");
    let started = Instant::now();
    let result = etcd
        .add_member(&m0_only, &peer_url(free_address()), true)
        .await
        .map(drop);
    no_leader(result, started, "adding a learner");
    let started = Instant::now();
    let result = etcd.remove(&m0_only, m2_id).await.map(drop);
    no_leader(result, started, "removing a dead member");
    let started = Instant::now();
    let result = etcd.promote(&m0_only, m2_id).await.map(drop);
    no_leader(result, started, "promoting");
}

#[tokio::test]
async fn an_unreachable_endpoint_is_named() {
    let etcd = EtcdGateway::default();
    let nobody = client_url(free_address());
    let nobody_only = vec![nobody.clone()];

    let started = Instant::now();
    let error = etcd.members(&nobody_only).await.unwrap_err();
    let EtcdError::Unreachable { endpoints, reason } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(endpoints, &nobody_only);
    assert!(reason.contains("Connection refused"), "{reason}");
    assert!(error.to_string().contains(&nobody), "{error}");
    assert!(started.elapsed() < Duration::from_secs(2));

    let error = etcd.status(&nobody).await.unwrap_err();
    assert!(
        matches!(&error, EtcdError::Unreachable { endpoints, .. } if endpoints == &nobody_only),
        "{error:?}"
    );
    let error = etcd
        .add_member(&nobody_only, &peer_url(free_address()), true)
        .await
        .unwrap_err();
    assert!(matches!(error, EtcdError::Unreachable { .. }), "{error:?}");

    let other = client_url(free_address());
    let error = etcd
        .members(&[nobody.clone(), other.clone()])
        .await
        .unwrap_err();
    assert!(
        matches!(&error, EtcdError::Unreachable { endpoints, .. } if endpoints == &[nobody.clone(), other.clone()]),
        "{error:?}"
    );

    assert_eq!(etcd.members(&[]).await, Err(EtcdError::NoEndpoints));
    let error = etcd
        .members(&["https://127.0.0.1:2379".to_owned()])
        .await
        .unwrap_err();
    assert!(
        matches!(error, EtcdError::InvalidEndpoint { .. }),
        "{error:?}"
    );
}

#[tokio::test]
async fn the_list_falls_through_to_the_next_endpoint_when_one_is_dead() {
    let mut cluster = start_cluster(3).await;
    let etcd = EtcdGateway::default();
    // A follower dies, so the list does not wait for an election.
    let (leader, followers) = roles(&etcd, &cluster).await;
    let m0 = cluster[leader].client_url();
    let m2 = cluster[followers[0]].client_url();
    let never = client_url(free_address());

    let members = etcd.members(&[never.clone(), m0.clone()]).await.unwrap();
    assert_eq!(members.len(), 3);

    // A member that answered before (its connection is pooled) and then died.
    assert_eq!(etcd.members(from_ref(&m2)).await.unwrap().len(), 3);
    cluster[followers[0]].kill();
    let members = eventually(
        TIMEOUT,
        "the list from the leader after a follower died",
        || async {
            etcd.members(&[m2.clone(), never.clone(), m0.clone()])
                .await
                .ok()
        },
    )
    .await;
    assert_eq!(members.len(), 3, "the dead member is still a member");
    let error = etcd.members(from_ref(&m2)).await.unwrap_err();
    assert!(
        matches!(&error, EtcdError::Unreachable { endpoints, .. } if endpoints == from_ref(&m2)),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_change_falls_through_a_dead_endpoint_but_not_a_hung_one() {
    let mut cluster = start_cluster(3).await;
    let request_timeout = Duration::from_secs(2);
    let etcd = gateway(request_timeout);
    // The member that hangs is a follower: a hung leader would stall the others' answers too.
    let (leader, followers) = roles(&etcd, &cluster).await;
    let m0 = cluster[leader].client_url();
    let m2 = cluster[followers[0]].client_url();
    let dead = client_url(free_address());

    // Nothing listens on `dead`: the request surely reached no member, so it goes on to the leader.
    let added = once_healthy("adding a learner through a dead endpoint", || async {
        let peer = peer_url(free_address());
        etcd.add_member(&[dead.clone(), m0.clone()], &peer, true)
            .await
    })
    .await;
    let left = etcd
        .remove(&[dead.clone(), m0.clone()], added.member.id)
        .await
        .unwrap();
    assert_eq!(left.len(), 3);

    // m2 hangs: connections are accepted, nothing answers.
    cluster[followers[0]].process().pause();
    let bound = request_timeout + Duration::from_secs(3);

    let started = Instant::now();
    let error = etcd.members(from_ref(&m2)).await.unwrap_err();
    assert!(
        matches!(&error, EtcdError::Timeout { endpoint, .. } if endpoint == &m2),
        "{error:?}"
    );
    assert!(started.elapsed() < bound, "{:?}", started.elapsed());

    // A read moves on after the timeout…
    let started = Instant::now();
    let members = etcd.members(&[m2.clone(), m0.clone()]).await.unwrap();
    assert_eq!(members.len(), 3);
    assert!(started.elapsed() < bound * 2, "{:?}", started.elapsed());

    // …a change does not: m2 may still act on it, and m0 would then make it twice.
    let error = etcd
        .add_member(&[m2.clone(), m0.clone()], &peer_url(free_address()), true)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, EtcdError::Timeout { endpoint, .. } if endpoint == &m2),
        "{error:?}"
    );
    assert_eq!(etcd.members(from_ref(&m0)).await.unwrap().len(), 3);
}
