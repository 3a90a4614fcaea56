//! Creation and deletion expectations, as the ReplicaSet controller keeps them: after creating or
//! deleting Pods, an AppCluster is not acted on again until the watch cache has seen those
//! changes. The cache lags behind the API server, so without this a second reconcile would count
//! too few Pods and create more than `size` (the tutorial's bug).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// If an expected change is never observed (a lost watch event), act again after this long.
const EXPIRY: Duration = Duration::from_secs(60);

#[derive(Default)]
struct Pending {
    creates: HashSet<String>,
    deletes: HashSet<String>,
    since: Option<Instant>,
}

#[derive(Default)]
pub struct Expectations {
    pending: Mutex<HashMap<String, Pending>>,
}

/// What the cache shows of one Pod that an expectation may wait for.
pub enum Seen {
    /// In the cache and not being deleted.
    Present,
    /// Absent from the cache, or being deleted.
    Gone,
}

impl Expectations {
    /// Whether every expected create and delete of `key` has been observed. `seen` tells, for a
    /// Pod name, what the cache shows.
    pub fn satisfied(&self, key: &str, seen: impl Fn(&str) -> Seen) -> bool {
        let mut all = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let Some(pending) = all.get_mut(key) else {
            return true;
        };
        pending
            .creates
            .retain(|name| matches!(seen(name), Seen::Gone));
        pending
            .deletes
            .retain(|name| matches!(seen(name), Seen::Present));
        let expired = pending.since.is_some_and(|since| since.elapsed() > EXPIRY);
        if expired || (pending.creates.is_empty() && pending.deletes.is_empty()) {
            all.remove(key);
            return true;
        }
        false
    }

    /// Records Pods just created or deleted under `key`.
    pub fn add(
        &self,
        key: &str,
        created: impl IntoIterator<Item = String>,
        deleted: impl IntoIterator<Item = String>,
    ) {
        let mut all = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let pending = all.entry(key.to_owned()).or_default();
        pending.creates.extend(created);
        pending.deletes.extend(deleted);
        pending.since.get_or_insert_with(Instant::now);
        if pending.creates.is_empty() && pending.deletes.is_empty() {
            all.remove(key);
        }
    }

    /// Forgets `key` (its AppCluster is gone).
    pub fn forget(&self, key: &str) {
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_until_created_pods_appear_and_deleted_pods_go() {
        let expectations = Expectations::default();
        expectations.add("ns/a", ["p1".to_owned()], ["p2".to_owned()]);
        assert!(
            !expectations.satisfied("ns/a", |_| Seen::Gone),
            "the created p1 is not seen yet"
        );
        assert!(!expectations.satisfied("ns/a", |_| Seen::Gone), "still not");
        expectations.add("ns/a", [], ["p3".to_owned()]);
        assert!(
            !expectations.satisfied("ns/a", |_| Seen::Present),
            "p1 seen, but the deleted p3 is still there"
        );
        assert!(
            expectations.satisfied("ns/a", |_| Seen::Gone),
            "p3 gone: all observed"
        );
        assert!(
            expectations.satisfied("ns/b", |_| Seen::Gone),
            "nothing expected of other keys"
        );
    }
}
