//! Cache sync state: `/readyz` is ready once every enabled controller's watch caches have synced
//! (each has seen the end of its initial list), and each controller's runner waits for all of
//! its own caches before it reconciles anything (as controller-runtime waits for its informers).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

type CacheKey = (&'static str, String);

#[derive(Clone)]
pub struct Readiness {
    caches: Arc<Mutex<BTreeMap<CacheKey, bool>>>,
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
        let mut caches = self.caches.lock().unwrap_or_else(|p| p.into_inner());
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
        let caches = self.caches.lock().unwrap_or_else(|p| p.into_inner());
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

    /// The `controller/cache` pairs not synced yet (`None`: ready). Before any cache is registered
    /// the process is not ready either.
    pub fn not_ready(&self) -> Option<Vec<String>> {
        if self.standby.load(Ordering::SeqCst) {
            return None;
        }
        let caches = self.caches.lock().unwrap_or_else(|p| p.into_inner());
        if caches.is_empty() {
            return Some(vec!["no controller started yet".into()]);
        }
        let waiting: Vec<String> = caches
            .iter()
            .filter(|(_, synced)| !**synced)
            .map(|((c, k), _)| format!("{c}/{k}"))
            .collect();
        (!waiting.is_empty()).then_some(waiting)
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
}
