//! Per-object exponential backoff (controller-runtime's ItemExponentialFailureRateLimiter): each
//! failure doubles the delay, a success or the object's deletion resets it. A key that has not
//! failed for twice the cap starts over (client-go's `flowcontrol.Backoff`), for callers that have
//! no success to report, such as Pods that crash a while after becoming Ready.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct Backoff {
    base: Duration,
    max: Duration,
    failures: Mutex<HashMap<String, Failures>>,
}

struct Failures {
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
    pub fn new(base: Duration, max: Duration) -> Self {
        Backoff {
            base,
            max,
            failures: Mutex::default(),
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Failures>> {
        self.failures
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records a failure of `key` and returns how long to wait before retrying it.
    pub fn failed(&self, key: &str) -> Duration {
        let now = Instant::now();
        let mut failures = self.entries();
        let entry = failures.entry(key.to_owned()).or_insert(Failures {
            count: 0,
            last: now,
            not_before: now,
        });
        if now.saturating_duration_since(entry.last) > self.max.saturating_mul(2) {
            entry.count = 0;
        }
        let delay = self
            .base
            .saturating_mul(2u32.saturating_pow(entry.count))
            .min(self.max);
        entry.count = entry.count.saturating_add(1);
        entry.last = now;
        entry.not_before = now + delay;
        delay
    }

    /// How long `key` must still wait after its last failure (`None`: it may go now).
    pub fn remaining(&self, key: &str) -> Option<Duration> {
        let failures = self.entries();
        let left = failures
            .get(key)?
            .not_before
            .saturating_duration_since(Instant::now());
        (!left.is_zero()).then_some(left)
    }

    /// Forgets the failures of `key`: after a success, or when the object is gone.
    pub fn reset(&self, key: &str) {
        self.entries().remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_per_failure_up_to_the_cap_and_resets_on_success() {
        let backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(5));
        let delays: Vec<u64> = (0..5).map(|_| backoff.failed("ns/a").as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 5, 5]);
        assert_eq!(backoff.failed("ns/b").as_secs(), 1, "keys are independent");
        backoff.reset("ns/a");
        assert_eq!(backoff.failed("ns/a").as_secs(), 1);
    }

    #[test]
    fn a_failed_key_waits_until_its_delay_has_passed() {
        let backoff = Backoff::new(Duration::from_millis(30), Duration::from_secs(5));
        assert_eq!(backoff.remaining("ns/a"), None);
        backoff.failed("ns/a");
        assert!(backoff.remaining("ns/a").is_some());
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(backoff.remaining("ns/a"), None);
        backoff.failed("ns/a");
        backoff.reset("ns/a");
        assert_eq!(
            backoff.remaining("ns/a"),
            None,
            "a reset key may go at once"
        );
    }

    #[test]
    fn a_key_quiet_for_twice_the_cap_starts_over() {
        let backoff = Backoff::new(Duration::from_millis(10), Duration::from_millis(20));
        let delays: Vec<u128> = (0..3).map(|_| backoff.failed("ns/a").as_millis()).collect();
        assert_eq!(delays, [10, 20, 20]);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(backoff.failed("ns/a").as_millis(), 10);
    }
}
