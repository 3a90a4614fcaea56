//! Exponential backoff (controller-runtime's ItemExponentialFailureRateLimiter): each failure
//! doubles the delay, a success resets it. A record that has not failed for twice the cap starts
//! over (client-go's `flowcontrol.Backoff`), for callers that have no success to report, such as
//! Pods that crash a while after becoming Ready. The records live in the object's memory
//! ([`crate::reconcile::memory::PerObject`]), which the runner drops with the object.

use std::time::{Duration, Instant};

/// The policy: the first delay and the cap.
#[derive(Clone, Copy)]
pub struct Backoff {
    base: Duration,
    max: Duration,
}

/// One object's failures since its last success.
#[derive(Default)]
pub struct Failures(Option<Failed>);

struct Failed {
    count: u32,
    last: Instant,
    /// No new attempt before this.
    not_before: Instant,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new(Duration::from_millis(500), Duration::from_secs(300))
    }
}

impl Backoff {
    pub const fn new(base: Duration, max: Duration) -> Self {
        Backoff { base, max }
    }

    /// Records a failure and returns how long to wait before retrying.
    pub fn failed(&self, failures: &mut Failures) -> Duration {
        let now = Instant::now();
        let count = match &failures.0 {
            Some(f) if now.saturating_duration_since(f.last) <= self.max.saturating_mul(2) => {
                f.count
            }
            _ => 0,
        };
        let delay = self
            .base
            .saturating_mul(2u32.saturating_pow(count))
            .min(self.max);
        failures.0 = Some(Failed {
            count: count.saturating_add(1),
            last: now,
            not_before: now + delay,
        });
        delay
    }
}

impl Failures {
    /// How long must still pass after the last failure (`None`: a retry may go now).
    pub fn remaining(&self) -> Option<Duration> {
        let left = self
            .0
            .as_ref()?
            .not_before
            .saturating_duration_since(Instant::now());
        (!left.is_zero()).then_some(left)
    }

    /// Forgets the failures, after a success.
    pub fn reset(&mut self) {
        self.0 = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_per_failure_up_to_the_cap_and_resets_on_success() {
        let backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(5));
        let mut failures = Failures::default();
        let delays: Vec<u64> = (0..5)
            .map(|_| backoff.failed(&mut failures).as_secs())
            .collect();
        assert_eq!(delays, [1, 2, 4, 5, 5]);
        failures.reset();
        assert_eq!(backoff.failed(&mut failures).as_secs(), 1);
    }

    #[test]
    fn a_failed_record_waits_until_its_delay_has_passed() {
        let backoff = Backoff::new(Duration::from_millis(30), Duration::from_secs(5));
        let mut failures = Failures::default();
        assert_eq!(failures.remaining(), None);
        backoff.failed(&mut failures);
        assert!(failures.remaining().is_some());
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(failures.remaining(), None);
        backoff.failed(&mut failures);
        failures.reset();
        assert_eq!(failures.remaining(), None, "a reset record may go at once");
    }

    #[test]
    fn a_record_quiet_for_twice_the_cap_starts_over() {
        let backoff = Backoff::new(Duration::from_millis(10), Duration::from_millis(20));
        let mut failures = Failures::default();
        let delays: Vec<u128> = (0..3)
            .map(|_| backoff.failed(&mut failures).as_millis())
            .collect();
        assert_eq!(delays, [10, 20, 20]);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(backoff.failed(&mut failures).as_millis(), 10);
    }
}
