//! Creation and deletion expectations, as the ReplicaSet controller keeps them: after creating or
//! deleting Pods, an AppCluster is not acted on again until the watch cache has seen those
//! changes. The cache lags behind the API server, so without this a second reconcile would count
//! too few Pods and create more than `size` (the tutorial's bug).

use std::collections::HashSet;
use std::time::{Duration, Instant};

/// If an expected change is never observed (a lost watch event), act again after this long.
const EXPIRY: Duration = Duration::from_secs(60);

/// One AppCluster's expected Pod creates and deletes, kept in its memory.
#[derive(Default)]
pub struct Expectations {
    creates: HashSet<String>,
    deletes: HashSet<String>,
    since: Option<Instant>,
}

/// What the cache shows of one Pod that an expectation may wait for.
pub enum Seen {
    /// In the cache and not being deleted.
    Present,
    /// Absent from the cache, or being deleted.
    Gone,
}

impl Expectations {
    /// Whether every expected create and delete has been observed. `seen` tells, for a Pod
    /// name, what the cache shows.
    pub fn satisfied(&mut self, seen: impl Fn(&str) -> Seen) -> bool {
        self.creates.retain(|name| matches!(seen(name), Seen::Gone));
        self.deletes
            .retain(|name| matches!(seen(name), Seen::Present));
        let expired = self.since.is_some_and(|since| since.elapsed() > EXPIRY);
        if expired || (self.creates.is_empty() && self.deletes.is_empty()) {
            *self = Expectations::default();
            return true;
        }
        false
    }

    /// Records Pods just created or deleted.
    pub fn add(
        &mut self,
        created: impl IntoIterator<Item = String>,
        deleted: impl IntoIterator<Item = String>,
    ) {
        self.creates.extend(created);
        self.deletes.extend(deleted);
        if self.creates.is_empty() && self.deletes.is_empty() {
            self.since = None;
        } else {
            self.since.get_or_insert_with(Instant::now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_until_created_pods_appear_and_deleted_pods_go() {
        let mut expectations = Expectations::default();
        expectations.add(["p1".to_owned()], ["p2".to_owned()]);
        assert!(
            !expectations.satisfied(|_| Seen::Gone),
            "the created p1 is not seen yet"
        );
        assert!(!expectations.satisfied(|_| Seen::Gone), "still not");
        expectations.add([], ["p3".to_owned()]);
        assert!(
            !expectations.satisfied(|_| Seen::Present),
            "p1 seen, but the deleted p3 is still there"
        );
        assert!(
            expectations.satisfied(|_| Seen::Gone),
            "p3 gone: all observed"
        );
        assert!(
            Expectations::default().satisfied(|_| Seen::Gone),
            "nothing expected"
        );
    }
}
