//! Statuses a controller wrote that its cache may not show yet.

use std::hash::{DefaultHasher, Hash, Hasher};

use serde::Serialize;

/// A reconcile woken before the watch has delivered the controller's own last status write sees
/// the status from before it. Compared against that, the same status would be written again (with
/// a new `lastUpdateTime`, which wakes the controller once more). This remembers an object's last
/// write until the cache has moved past the version it was based on.
#[derive(Default)]
pub struct WrittenStatus(Option<Written>);

struct Written {
    /// The object's resourceVersion when the status was written: while the cache still holds
    /// that version, it does not show the write.
    based_on: String,
    status: Fingerprint,
}

/// A digest of a status as it would be written (before it is stamped with a time).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Fingerprint(u64);

impl Fingerprint {
    /// `None` when the status cannot be serialized (it is then never taken as already written).
    pub fn of(status: &impl Serialize) -> Option<Fingerprint> {
        let bytes = serde_json::to_vec(status).ok()?;
        let mut hasher = DefaultHasher::new();
        bytes.hash(&mut hasher);
        Some(Fingerprint(hasher.finish()))
    }
}

impl WrittenStatus {
    /// Whether `status` was written and the cache, still at the `version` the write was based
    /// on, just does not show it yet. Once the cache has another version the write is
    /// forgotten: from then on the cached status is the truth (our write, or a newer change).
    pub fn awaiting_cache(&mut self, version: Option<&str>, status: Fingerprint) -> bool {
        match &self.0 {
            Some(written) if Some(written.based_on.as_str()) == version => written.status == status,
            Some(_) => {
                self.0 = None;
                false
            }
            None => false,
        }
    }

    /// Records that `status` was written while the cached version was `version`.
    pub fn wrote(&mut self, version: Option<&str>, status: Fingerprint) {
        self.0 = version.map(|version| Written {
            based_on: version.to_owned(),
            status,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fingerprint(ready: bool) -> Fingerprint {
        Fingerprint::of(&serde_json::json!({ "ready": ready })).expect("serializable")
    }

    #[test]
    fn a_write_is_awaited_only_while_the_cache_has_the_version_it_was_based_on() {
        let mut written = WrittenStatus::default();
        assert!(!written.awaiting_cache(Some("7"), fingerprint(false)));
        written.wrote(Some("7"), fingerprint(false));
        assert!(written.awaiting_cache(Some("7"), fingerprint(false)));
        assert!(
            !written.awaiting_cache(Some("7"), fingerprint(true)),
            "another status is still written"
        );
        assert!(
            !written.awaiting_cache(Some("8"), fingerprint(false)),
            "the cache moved on"
        );
        assert!(
            !written.awaiting_cache(Some("7"), fingerprint(false)),
            "and the write is forgotten"
        );
    }
}
