//! Cache sync state: `/readyz` is ready once every enabled controller's watch caches have synced
//! (each has seen the end of its initial list), and each controller's runner waits for all of
//! its own caches before it reconciles anything (as controller-runtime waits for its informers).
//! A cache whose watch has been failing for [`WATCH_FAILURE_GRACE`] makes `/readyz` fail again
//! until it recovers: the operator is acting on a cache it cannot refresh.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a watch may keep failing (each failure retried with backoff) before `/readyz` fails:
/// longer than a routine reconnect, short enough for a probe to notice.
pub const WATCH_FAILURE_GRACE: Duration = Duration::from_secs(30);
/// A failing watch is retried at least this often (kube-runtime's backoff tops out at 30 s), so
/// no new error for this long means it works again: a watch that recovers on a quiet kind
/// delivers no event to say so.
const WATCH_RETRY_WINDOW: Duration = Duration::from_secs(65);

/// A watch's run of failures: the first and the latest.
#[derive(Clone, Copy)]
struct Failures {
    first: Instant,
    last: Instant,
}

impl Failures {
    /// How long the watch has been failing at `now`, if it still is.
    fn failing_for(self, now: Instant) -> Option<Duration> {
        (now.saturating_duration_since(self.last) < WATCH_RETRY_WINDOW)
            .then(|| now.saturating_duration_since(self.first))
    }
}

use tokio::sync::watch;

type CacheKey = (&'static str, String);

#[derive(Clone)]
pub struct Readiness {
    caches: Arc<Mutex<BTreeMap<CacheKey, bool>>>,
    /// Each cache's current run of watch failures.
    failing: Arc<Mutex<HashMap<CacheKey, Failures>>>,
    /// Bumped on every change, so any number of waiters wake (a `watch` channel keeps a waker
    /// per receiver, unlike kube's `Store::wait_until_ready`).
    changed: watch::Sender<u64>,
    /// A standby (not leading) is ready: healthy and waiting, with no caches to sync.
    standby: Arc<AtomicBool>,
}

impl Default for Readiness {
    fn default() -> Self {
        Readiness {
            caches: Arc::default(),
            failing: Arc::default(),
            changed: watch::Sender::new(0),
            standby: Arc::default(),
        }
    }
}

/// Marks one cache of one controller as synced.
#[derive(Clone)]
pub struct CacheSynced {
    readiness: Readiness,
    key: CacheKey,
}

impl CacheSynced {
    pub fn mark(&self) {
        self.readiness.set(self.key.clone(), true);
    }

    /// The watch delivered something: it works (again).
    pub fn watch_succeeded(&self) {
        let mut failing = lock(&self.readiness.failing);
        if failing.remove(&self.key).is_some() {
            tracing::info!(controller = self.key.0, cache = %self.key.1, "watch recovered");
        }
    }

    /// A list or watch call failed (and will be retried).
    pub fn watch_failed(&self, now: Instant) {
        let mut failing = lock(&self.readiness.failing);
        let run = failing.entry(self.key.clone()).or_insert(Failures {
            first: now,
            last: now,
        });
        if run.failing_for(now).is_none() {
            run.first = now;
        }
        run.last = now;
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Readiness {
    /// Registers the cache `cache` of `controller` as not yet synced.
    pub fn cache(&self, controller: &'static str, cache: String) -> CacheSynced {
        self.set((controller, cache.clone()), false);
        CacheSynced {
            readiness: self.clone(),
            key: (controller, cache),
        }
    }

    fn set(&self, key: CacheKey, synced: bool) {
        let mut caches = lock(&self.caches);
        let announce = synced && caches.get(&key) != Some(&true);
        if announce {
            tracing::info!(controller = key.0, cache = %key.1, "cache synced");
        }
        caches.insert(key, synced);
        drop(caches);
        self.changed
            .send_modify(|version| *version = version.wrapping_add(1));
    }

    /// Whether every cache registered for `controller` has synced (and there is at least one).
    fn controller_synced(&self, controller: &str) -> bool {
        let caches = lock(&self.caches);
        let mut own = caches
            .iter()
            .filter(|((c, _), _)| *c == controller)
            .peekable();
        own.peek().is_some() && own.all(|(_, synced)| *synced)
    }

    /// Resolves once every cache registered for `controller` has synced.
    pub async fn wait_synced(&self, controller: &str) {
        let mut changes = self.changed.subscribe();
        while !self.controller_synced(controller) {
            if changes.changed().await.is_err() {
                return;
            }
        }
    }

    pub fn set_standby(&self, standby: bool) {
        self.standby.store(standby, Ordering::SeqCst);
    }

    /// The `controller/cache` pairs not synced yet, or whose watch has been failing for longer
    /// than [`WATCH_FAILURE_GRACE`] at `now` (`None`: ready). Before any cache is registered the
    /// process is not ready either.
    pub fn not_ready_at(&self, now: Instant) -> Option<Vec<String>> {
        if self.standby.load(Ordering::SeqCst) {
            return None;
        }
        let caches = lock(&self.caches);
        if caches.is_empty() {
            return Some(vec!["no controller started yet".into()]);
        }
        let failing = lock(&self.failing);
        let waiting: Vec<String> = caches
            .iter()
            .filter_map(|(key @ (c, k), synced)| {
                let failing_for = failing
                    .get(key)
                    .and_then(|run| run.failing_for(now))
                    .filter(|failing_for| *failing_for >= WATCH_FAILURE_GRACE);
                match (synced, failing_for) {
                    (false, _) => Some(format!("{c}/{k}")),
                    (true, Some(failing_for)) => Some(format!(
                        "{c}/{k}: watch failing for {}s",
                        failing_for.as_secs()
                    )),
                    (true, None) => None,
                }
            })
            .collect();
        (!waiting.is_empty()).then_some(waiting)
    }

    pub fn not_ready(&self) -> Option<Vec<String>> {
        self.not_ready_at(Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_controller_waits_for_all_of_its_caches_and_only_its_own() {
        let readiness = Readiness::default();
        let primary = readiness.cache("appcluster", "AppCluster".into());
        let pods = readiness.cache("appcluster", "Pod".into());
        let _other = readiness.cache("myapp", "MyApp".into());
        primary.mark();
        let waiting = tokio::time::timeout(
            Duration::from_millis(50),
            readiness.wait_synced("appcluster"),
        );
        assert!(
            waiting.await.is_err(),
            "synced with the Pod cache still listing"
        );
        let waiter = tokio::spawn({
            let readiness = readiness.clone();
            async move { readiness.wait_synced("appcluster").await }
        });
        pods.mark();
        let woken = tokio::time::timeout(Duration::from_secs(1), waiter).await;
        assert!(
            matches!(woken, Ok(Ok(()))),
            "not woken once every cache synced"
        );
        assert_eq!(readiness.not_ready(), Some(vec!["myapp/MyApp".to_owned()]));
    }

    #[test]
    fn a_watch_failing_past_the_grace_makes_the_process_unready_until_it_recovers() {
        let readiness = Readiness::default();
        let cache = readiness.cache("myapp", "Deployment".into());
        cache.mark();
        let start = Instant::now();
        assert_eq!(readiness.not_ready_at(start), None);
        cache.watch_failed(start);
        cache.watch_failed(start + Duration::from_secs(10));
        assert_eq!(
            readiness.not_ready_at(start + WATCH_FAILURE_GRACE - Duration::from_secs(1)),
            None,
            "a short outage is a routine reconnect"
        );
        assert_eq!(
            readiness.not_ready_at(start + WATCH_FAILURE_GRACE + Duration::from_secs(2)),
            Some(vec!["myapp/Deployment: watch failing for 32s".to_owned()]),
            "failing since the first failure"
        );
        cache.watch_succeeded();
        assert_eq!(
            readiness.not_ready_at(start + WATCH_FAILURE_GRACE * 2),
            None
        );

        // Errors that stop without an event to say the watch works again: ready once no retry
        // has failed for longer than any backoff.
        let later = start + Duration::from_secs(600);
        for second in 0..40 {
            cache.watch_failed(later + Duration::from_secs(second));
        }
        let failed_last = later + Duration::from_secs(39);
        assert!(readiness.not_ready_at(failed_last).is_some());
        assert_eq!(
            readiness.not_ready_at(failed_last + WATCH_RETRY_WINDOW),
            None
        );
        cache.watch_failed(failed_last + WATCH_RETRY_WINDOW * 2);
        assert_eq!(
            readiness.not_ready_at(failed_last + WATCH_RETRY_WINDOW * 2 + Duration::from_secs(1)),
            None,
            "a new run of failures starts its own grace"
        );
    }
}
