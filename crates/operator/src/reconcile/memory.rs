//! What a controller remembers about each of its objects between reconciles.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

/// Memory kept per object, by `namespace/name`: a backoff, a status the cache does not show
/// yet, Pods expected to appear, Jobs already announced. The runner keeps one per controller
/// and drops an object's entry when the object is deleted, so nothing here has a forget path of
/// its own.
pub struct PerObject<T>(Mutex<HashMap<String, T>>);

impl<T> Default for PerObject<T> {
    fn default() -> Self {
        PerObject(Mutex::default())
    }
}

impl<T: Default> PerObject<T> {
    /// Every entry is left consistent between calls, so a panic in another thread while it held
    /// the lock leaves nothing half-done: the poison is ignored.
    fn lock(&self) -> MutexGuard<'_, HashMap<String, T>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `f` on what is remembered about `key` (a default when nothing is yet).
    pub fn with<R>(&self, key: &str, f: impl FnOnce(&mut T) -> R) -> R {
        let mut all = self.lock();
        match all.get_mut(key) {
            Some(entry) => f(entry),
            None => f(all.entry(key.to_owned()).or_default()),
        }
    }

    /// Runs `f` on every entry, by key (to see what other objects hold).
    pub fn each<R>(&self, f: impl FnOnce(&mut HashMap<String, T>) -> R) -> R {
        f(&mut self.lock())
    }

    /// Drops what is remembered about `key`: the object is gone.
    pub fn forget(&self, key: &str) {
        self.lock().remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_key_has_its_own_entry_until_it_is_forgotten() {
        let memory = PerObject::<u32>::default();
        memory.with("ns/a", |n| *n += 2);
        memory.with("ns/a", |n| *n += 1);
        memory.with("ns/b", |n| *n += 10);
        assert_eq!(memory.with("ns/a", |n| *n), 3);
        memory.forget("ns/a");
        assert_eq!(memory.with("ns/a", |n| *n), 0);
        assert_eq!(memory.each(|all| all.values().sum::<u32>()), 10);
    }
}
