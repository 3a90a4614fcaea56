//! `/readyz`: ready once every enabled controller's watch caches have synced (each has seen the
//! end of its initial list).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

#[derive(Clone, Default)]
pub struct Readiness {
    caches: Arc<Mutex<BTreeMap<(&'static str, String), bool>>>,
    /// A standby (not leading) is ready: healthy and waiting, with no caches to sync.
    standby: Arc<std::sync::atomic::AtomicBool>,
}

/// Marks one cache of one controller as synced.
#[derive(Clone)]
pub struct CacheSynced {
    readiness: Readiness,
    key: (&'static str, String),
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

    fn set(&self, key: (&'static str, String), synced: bool) {
        let mut caches = self.caches.lock().unwrap_or_else(|p| p.into_inner());
        let announce = synced && caches.get(&key) != Some(&true);
        if announce {
            tracing::info!(controller = key.0, cache = %key.1, "cache synced");
        }
        caches.insert(key, synced);
    }

    pub fn set_standby(&self, standby: bool) {
        self.standby
            .store(standby, std::sync::atomic::Ordering::SeqCst);
    }

    /// The `controller/cache` pairs not synced yet (`None`: ready). Before any cache is registered
    /// the process is not ready either.
    pub fn not_ready(&self) -> Option<Vec<String>> {
        if self.standby.load(std::sync::atomic::Ordering::SeqCst) {
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
