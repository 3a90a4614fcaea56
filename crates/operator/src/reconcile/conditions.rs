//! Setting conditions the way the API conventions (and apimachinery's `meta.SetStatusCondition`)
//! do: `lastTransitionTime` moves only when the status flips.

use app_operator_api::conditions::Condition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// The desired state of one condition.
pub struct Desired<'a> {
    pub type_: &'a str,
    pub status: bool,
    pub reason: &'a str,
    pub message: String,
}

/// Returns the conditions with `desired` set: unchanged transition time when the status is the
/// same as before, `now` when it flipped or the condition is new.
pub fn set(
    previous: &[Condition],
    desired: Desired<'_>,
    generation: Option<i64>,
    now: &Time,
) -> Condition {
    let status = if desired.status { "True" } else { "False" };
    let last_transition_time = previous
        .iter()
        .find(|c| c.type_ == desired.type_ && c.status == status)
        .map_or_else(|| now.clone(), |c| c.last_transition_time.clone());
    Condition {
        type_: desired.type_.to_owned(),
        status: status.to_owned(),
        reason: desired.reason.to_owned(),
        message: desired.message,
        observed_generation: generation,
        last_transition_time,
    }
}

/// `Degraded`: true with the error's reason and message, else false with `healthy` as message.
pub fn degraded<'a>(error: Option<&'a crate::reconcile::Error>, healthy: &str) -> Desired<'a> {
    match error {
        Some(error) => Desired {
            type_: app_operator_api::conditions::DEGRADED,
            status: true,
            reason: error.reason(),
            message: error.to_string(),
        },
        None => Desired {
            type_: app_operator_api::conditions::DEGRADED,
            status: false,
            reason: "ReconcileSuccess",
            message: healthy.to_owned(),
        },
    }
}

/// `Stalled` after a permanent failure (true, with the error's reason and message), else none:
/// kstatus, and so Flux and Argo CD, then read the object as failed, not as still in progress.
pub fn stalled(
    previous: &[Condition],
    error: Option<&crate::reconcile::Error>,
    generation: Option<i64>,
    now: &Time,
) -> Option<Condition> {
    let error = error.filter(|error| error.is_permanent())?;
    let desired = Desired {
        type_: app_operator_api::conditions::STALLED,
        status: true,
        reason: error.reason(),
        message: error.to_string(),
    };
    Some(set(previous, desired, generation, now))
}

/// Whether the condition `type_` is `True`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn time(seconds: i64) -> Time {
        Time(Timestamp::constant(seconds, 0))
    }

    fn ready(status: bool, reason: &str) -> Desired<'_> {
        Desired {
            type_: "Ready",
            status,
            reason,
            message: String::new(),
        }
    }

    #[test]
    fn a_new_condition_transitions_now() {
        let c = set(&[], ready(true, "Done"), Some(1), &time(10));
        assert_eq!(
            (c.status.as_str(), c.last_transition_time),
            ("True", time(10))
        );
        assert_eq!(c.observed_generation, Some(1));
    }

    #[test]
    fn the_same_status_keeps_its_transition_time_even_with_a_new_reason() {
        let before = set(&[], ready(false, "Waiting"), Some(1), &time(10));
        let after = set(&[before], ready(false, "StillWaiting"), Some(2), &time(20));
        assert_eq!(after.last_transition_time, time(10));
        assert_eq!(after.reason, "StillWaiting");
    }

    #[test]
    fn only_a_permanent_failure_stalls() {
        use crate::reconcile::Error;
        let permanent = Error::InvalidSpec {
            field: "spec.size",
            message: "must be odd".to_owned(),
        };
        let stalled = stalled(&[], Some(&permanent), Some(2), &time(10)).unwrap();
        assert_eq!(
            (
                stalled.type_.as_str(),
                stalled.status.as_str(),
                stalled.reason.as_str()
            ),
            ("Stalled", "True", "InvalidSpec")
        );
        assert_eq!(stalled.message, "spec.size: must be odd");
        let later = super::stalled(&[stalled], Some(&permanent), Some(2), &time(20)).unwrap();
        assert_eq!(later.last_transition_time, time(10), "still stalled");
        let transient = Error::Waiting {
            reason: "QuorumLost",
            message: "waiting".to_owned(),
        };
        assert!(super::stalled(&[], Some(&transient), Some(2), &time(10)).is_none());
        assert!(super::stalled(&[], None, Some(2), &time(10)).is_none());
    }

    #[test]
    fn a_flip_moves_the_transition_time() {
        let before = set(&[], ready(false, "Waiting"), Some(1), &time(10));
        let after = set(&[before], ready(true, "Done"), Some(1), &time(20));
        assert_eq!(after.last_transition_time, time(20));
    }
}
