//! Leader election on a `coordination.k8s.io/v1` Lease, with client-go's algorithm and defaults:
//! candidates try every retry period (2 s); a lease counts as expired when its record has not
//! changed for its duration (15 s) *as measured on our clock* (no trust in other nodes' clocks);
//! the leader renews every retry period and gives up if it cannot renew within the renew
//! deadline (10 s) — each try is abandoned when the deadline passes, so a hung request cannot
//! keep a leader that lost the lease reconciling; on shutdown it releases the lease (empty
//! holder) so a standby takes over on its next try instead of waiting for expiry.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::mutation::{self, Mutation};

#[derive(Debug, Clone)]
pub struct LeaderElection {
    pub lease_name: String,
    pub namespace: String,
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

/// client-go's default lease duration.
pub const LEASE_DURATION: Duration = Duration::from_secs(15);
/// client-go's default renew deadline.
pub const RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// client-go's default retry period.
pub const RETRY_PERIOD: Duration = Duration::from_secs(2);

impl LeaderElection {
    /// With client-go's defaults: 15 s lease, 10 s renew deadline, 2 s retry period.
    pub fn new(lease_name: String, namespace: String, identity: String) -> Self {
        LeaderElection {
            lease_name,
            namespace,
            identity,
            lease_duration: LEASE_DURATION,
            renew_deadline: RENEW_DEADLINE,
            retry_period: RETRY_PERIOD,
        }
    }

    /// client-go's rules: a standby must not take the lease while the leader may still renew it
    /// (lease duration > renew deadline), and the leader must get more than one try per deadline.
    pub fn check_timings(&self) -> Result<(), String> {
        if self.lease_duration <= self.renew_deadline {
            return Err(format!(
                "the leader election lease duration ({:?}) must be longer than the renew deadline ({:?})",
                self.lease_duration, self.renew_deadline
            ));
        }
        if self.renew_deadline <= self.retry_period.mul_f64(1.2) {
            return Err(format!(
                "the leader election renew deadline ({:?}) must be longer than 1.2 × the retry period ({:?})",
                self.renew_deadline, self.retry_period
            ));
        }
        Ok(())
    }
}

/// Why a try at the lease failed.
#[derive(Debug, thiserror::Error)]
enum AttemptError {
    #[error(transparent)]
    Api(#[from] kube::Error),
    /// The call hung (a half-open connection, an overloaded API server): it is abandoned, so a
    /// leader steps down within its renew deadline instead of reconciling on unseen.
    #[error("no answer within {0:?}")]
    TimedOut(Duration),
}

/// What a try at the lease found.
#[derive(Debug, PartialEq, Eq)]
enum Attempt {
    Leading,
    Following,
}

/// Runs the election until `shutdown`: `leading` turns true when this process acquires the
/// lease and false when it loses it (after which it never campaigns again: the process should
/// exit, as controller-runtime's does). On shutdown the lease is released if held.
pub async fn run(
    client: Client,
    election: LeaderElection,
    leading: watch::Sender<bool>,
    shutdown: CancellationToken,
) {
    let leases: Api<Lease> = Api::namespaced(client, &election.namespace);
    let mut observed: Option<(String, Instant)> = None;
    let mut last_renewal = Instant::now();
    loop {
        let is_leader = *leading.borrow();
        // A leader's try may take only what is left of its renew deadline.
        let budget = if is_leader {
            election
                .renew_deadline
                .saturating_sub(last_renewal.elapsed())
        } else {
            election.renew_deadline
        };
        let attempt = tokio::time::timeout(
            budget,
            try_acquire_or_renew(&leases, &election, &mut observed),
        )
        .await
        .unwrap_or(Err(AttemptError::TimedOut(budget)));
        match attempt {
            Ok(Attempt::Leading) => {
                last_renewal = Instant::now();
                if !is_leader {
                    tracing::info!(lease = %election.lease_name, identity = %election.identity, "successfully acquired lease");
                    leading.send_replace(true);
                }
            }
            Ok(Attempt::Following) if is_leader => {
                tracing::error!(lease = %election.lease_name, "leader election lost: another identity holds the lease");
                leading.send_replace(false);
                return;
            }
            Ok(Attempt::Following) => {}
            Err(error) => {
                tracing::warn!(%error, lease = %election.lease_name, "error trying to acquire or renew the lease");
                if is_leader && last_renewal.elapsed() >= election.renew_deadline {
                    tracing::error!(lease = %election.lease_name, "leader election lost: could not renew within the renew deadline");
                    leading.send_replace(false);
                    return;
                }
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep(election.retry_period) => {}
        }
    }
    if *leading.borrow() {
        if tokio::time::timeout(election.renew_deadline, release(&leases, &election))
            .await
            .is_err()
        {
            tracing::warn!(lease = %election.lease_name, "could not release the lease: no answer within the renew deadline");
        }
        leading.send_replace(false);
    }
}

fn now() -> MicroTime {
    MicroTime(Timestamp::now())
}

fn seconds(duration: Duration) -> i32 {
    i32::try_from(duration.as_secs()).unwrap_or(i32::MAX)
}

async fn try_acquire_or_renew(
    leases: &Api<Lease>,
    election: &LeaderElection,
    observed: &mut Option<(String, Instant)>,
) -> Result<Attempt, AttemptError> {
    let Some(mut lease) = leases.get_opt(&election.lease_name).await? else {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(election.lease_name.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(election.identity.clone()),
                lease_duration_seconds: Some(seconds(election.lease_duration)),
                acquire_time: Some(now()),
                renew_time: Some(now()),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        };
        leases.create(&PostParams::default(), &lease).await?;
        return Ok(Attempt::Leading);
    };
    // Expiry is judged by when *we* saw the record change, never by the holder's timestamps.
    let version = lease.resource_version().unwrap_or_default();
    let changed_at = match observed {
        _ if mutation::active(Mutation::LeaseExpiryFromRenewTime) => lease
            .spec
            .as_ref()
            .and_then(|spec| spec.renew_time.as_ref())
            .map_or_else(Instant::now, |renewed| {
                let ago = Timestamp::now().duration_since(renewed.0);
                Instant::now()
                    .checked_sub(Duration::try_from(ago).unwrap_or_default())
                    .unwrap_or_else(Instant::now)
            }),
        Some((seen, at)) if *seen == version => *at,
        _ => {
            let at = Instant::now();
            *observed = Some((version, at));
            at
        }
    };
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    let holder = spec.holder_identity.clone().unwrap_or_default();
    let duration = spec
        .lease_duration_seconds
        .and_then(|s| u64::try_from(s).ok())
        .map_or(election.lease_duration, Duration::from_secs);
    let held_by_us = holder == election.identity;
    if !held_by_us && !holder.is_empty() && changed_at.elapsed() < duration {
        return Ok(Attempt::Following);
    }
    if !held_by_us {
        spec.acquire_time = Some(now());
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
    }
    spec.holder_identity = Some(election.identity.clone());
    spec.lease_duration_seconds = Some(seconds(election.lease_duration));
    spec.renew_time = Some(now());
    // A replace carries the resourceVersion we read: if another candidate wrote first, ours
    // fails with a conflict instead of overwriting it.
    let updated = leases
        .replace(&election.lease_name, &PostParams::default(), &lease)
        .await?;
    *observed = Some((
        updated.resource_version().unwrap_or_default(),
        Instant::now(),
    ));
    Ok(Attempt::Leading)
}

/// Gives the lease up: an empty holder that any candidate takes on its next try.
async fn release(leases: &Api<Lease>, election: &LeaderElection) {
    let result = async {
        let Some(mut lease) = leases.get_opt(&election.lease_name).await? else {
            return Ok(());
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(election.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(now());
        leases
            .replace(&election.lease_name, &PostParams::default(), &lease)
            .await
            .map(|_| ())
    }
    .await;
    match result {
        Ok(()) => tracing::info!(lease = %election.lease_name, "released the lease"),
        Err(error) => {
            tracing::warn!(%error, lease = %election.lease_name, "could not release the lease")
        }
    }
}
