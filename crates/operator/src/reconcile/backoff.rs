//! Per-object exponential backoff for failed reconciles (controller-runtime's
//! ItemExponentialFailureRateLimiter): each failure doubles the delay, a success resets it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

pub struct Backoff {
    base: Duration,
    max: Duration,
    failures: Mutex<HashMap<String, u32>>,
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

    /// Records a failure of `key` and returns how long to wait before retrying it.
    pub fn failed(&self, key: &str) -> Duration {
        let mut failures = self
            .failures
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let count = failures.entry(key.to_owned()).or_insert(0);
        let delay = self
            .base
            .saturating_mul(2u32.saturating_pow(*count))
            .min(self.max);
        *count = count.saturating_add(1);
        delay
    }

    /// Forgets the failures of `key` after a success.
    pub fn succeeded(&self, key: &str) {
        let mut failures = self
            .failures
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        failures.remove(key);
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
        backoff.succeeded("ns/a");
        assert_eq!(backoff.failed("ns/a").as_secs(), 1);
    }
}
