//! A history checker for stateful scenarios: clients write unique keys through the product's own
//! Service while a scenario runs, every write is recorded with what its client was told, and at
//! the end everything is read back.
//!
//! The invariants: every acknowledged write is present with its value; nothing is present that
//! nobody wrote; the revisions one client is acknowledged never go back. A write that failed or
//! timed out is *unknown*: it may or may not have been applied, and it is counted neither as lost
//! nor as kept (Jepsen's and etcd's robustness tests treat it the same way).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;

/// Where the writes go: a key-value view of the system under test.
pub trait Store: Send + Sync + 'static {
    /// Writes `value` under `key`. `Ok` is an acknowledgement (with the revision the system
    /// gave it, if it gives one); `Err` says why the outcome is unknown.
    fn write<'a>(
        &'a self,
        key: &'a str,
        value: &'a str,
    ) -> BoxFuture<'a, Result<Option<u64>, String>>;

    /// Every key under `prefix` with its value.
    fn read_all<'a>(
        &'a self,
        prefix: &'a str,
    ) -> BoxFuture<'a, Result<BTreeMap<String, String>, String>>;
}

/// One write and what its client was told.
#[derive(Clone, Debug)]
struct Write {
    key: String,
    value: String,
    /// When the answer came (or the client gave up).
    answered: Instant,
    /// `Some(revision)` when acknowledged, `None` when unknown.
    acknowledged: Option<Option<u64>>,
}

/// What one client wrote, in order.
type ClientLog = Vec<Write>;

/// Clients writing until [`Writers::stop`].
pub struct Writers {
    stop: tokio::sync::watch::Sender<bool>,
    clients: Vec<tokio::task::JoinHandle<ClientLog>>,
    started: Instant,
}

/// How long one write may take before its outcome is unknown.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// The pause between two writes of one client: the writes measure availability, they are not a
/// load test, and the machine has two cores.
const PACE: Duration = Duration::from_millis(20);

impl Writers {
    /// Starts `clients` clients writing unique keys under `prefix` into `store`.
    pub fn start(store: Arc<dyn Store>, prefix: &str, clients: usize) -> Writers {
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let clients = (0..clients)
            .map(|client| {
                let (store, stopped) = (store.clone(), stopped.clone());
                let prefix = prefix.to_owned();
                tokio::spawn(async move {
                    let mut log = ClientLog::new();
                    for seq in 0u64.. {
                        if *stopped.borrow() {
                            break;
                        }
                        let key = format!("{prefix}{client}-{seq:07}");
                        let value = format!("client {client} write {seq}");
                        let answer =
                            tokio::time::timeout(WRITE_TIMEOUT, store.write(&key, &value)).await;
                        let acknowledged = match answer {
                            Ok(Ok(revision)) => Some(revision),
                            Ok(Err(_)) | Err(_) => None,
                        };
                        log.push(Write {
                            key,
                            value,
                            answered: Instant::now(),
                            acknowledged,
                        });
                        tokio::time::sleep(PACE).await;
                    }
                    log
                })
            })
            .collect();
        Writers {
            stop,
            clients,
            started: Instant::now(),
        }
    }

    /// Stops the clients (each finishes the write it is in) and returns what they were told.
    pub async fn stop(self) -> History {
        let _ = self.stop.send(true);
        let mut clients = Vec::new();
        for client in self.clients {
            // A client that panicked wrote nothing we can check: an empty log.
            clients.push(client.await.unwrap_or_default());
        }
        History {
            clients,
            started: self.started,
        }
    }
}

/// Every write of every client.
pub struct History {
    clients: Vec<ClientLog>,
    started: Instant,
}

impl History {
    /// How many writes were acknowledged so far.
    pub fn acknowledged(&self) -> usize {
        self.writes().filter(|w| w.acknowledged.is_some()).count()
    }

    fn writes(&self) -> impl Iterator<Item = &Write> {
        self.clients.iter().flatten()
    }

    /// Checks the history against what was read back at the end.
    pub fn check(&self, read: &BTreeMap<String, String>) -> Report {
        let written: BTreeMap<&str, &Write> = self.writes().map(|w| (w.key.as_str(), w)).collect();
        let lost = self
            .writes()
            .filter(|w| w.acknowledged.is_some() && read.get(&w.key) != Some(&w.value))
            .map(|w| w.key.clone())
            .collect();
        let unexpected = read
            .iter()
            .filter(|(key, value)| written.get(key.as_str()).is_none_or(|w| w.value != **value))
            .map(|(key, _)| key.clone())
            .collect();
        let revisions_back = self
            .clients
            .iter()
            .flat_map(|log| {
                let revisions: Vec<(&str, u64)> = log
                    .iter()
                    .filter_map(|w| Some((w.key.as_str(), w.acknowledged??)))
                    .collect();
                revisions
                    .windows(2)
                    .filter(|pair| pair[1].1 <= pair[0].1)
                    .map(|pair| {
                        format!(
                            "{} at {} after {} at {}",
                            pair[1].0, pair[1].1, pair[0].0, pair[0].1
                        )
                    })
                    .collect::<Vec<_>>()
            })
            .collect();
        let mut acks: Vec<Instant> = self
            .writes()
            .filter(|w| w.acknowledged.is_some())
            .map(|w| w.answered)
            .collect();
        acks.sort();
        let longest_gap = std::iter::once(self.started)
            .chain(acks.iter().copied())
            .zip(acks.iter().copied())
            .map(|(before, after)| after.saturating_duration_since(before))
            .max()
            .unwrap_or_default();
        Report {
            acknowledged: acks.len(),
            unknown: self.writes().filter(|w| w.acknowledged.is_none()).count(),
            present: read.len(),
            lost,
            unexpected,
            revisions_back,
            longest_gap,
        }
    }
}

/// The checker's verdict on one scenario.
#[derive(Debug)]
pub struct Report {
    pub acknowledged: usize,
    pub unknown: usize,
    /// Keys read back.
    pub present: usize,
    /// Acknowledged writes missing or with another value.
    pub lost: Vec<String>,
    /// Keys read back that nobody wrote, or with a value nobody wrote.
    pub unexpected: Vec<String>,
    /// A client acknowledged a revision not after its previous one.
    pub revisions_back: Vec<String>,
    /// The longest time without an acknowledged write (from the start).
    pub longest_gap: Duration,
}

impl Report {
    /// Prints the checker line for `scenario` and fails the test on any broken invariant.
    pub fn assert_kept(&self, scenario: &str) {
        println!("history {scenario}: {self}");
        assert!(
            self.acknowledged > 0,
            "{scenario}: no write was acknowledged: nothing was checked"
        );
        assert!(
            self.lost.is_empty() && self.unexpected.is_empty() && self.revisions_back.is_empty(),
            "{scenario}: lost {:?}, unexpected {:?}, revisions back {:?}",
            first(&self.lost),
            first(&self.unexpected),
            first(&self.revisions_back)
        );
    }
}

/// The first few, for a message.
fn first(items: &[String]) -> &[String] {
    &items[..items.len().min(5)]
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} acknowledged, {} unknown, {} lost, {} unexpected, {} read back, revisions {}, longest write gap {:.1} s",
            self.acknowledged,
            self.unknown,
            self.lost.len(),
            self.unexpected.len(),
            self.present,
            if self.revisions_back.is_empty() {
                "never went back".to_owned()
            } else {
                format!("went back {} times", self.revisions_back.len())
            },
            self.longest_gap.as_secs_f64()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(key: &str, value: &str, acknowledged: Option<Option<u64>>) -> Write {
        Write {
            key: key.into(),
            value: value.into(),
            answered: Instant::now(),
            acknowledged,
        }
    }

    fn history(clients: Vec<ClientLog>) -> History {
        History {
            clients,
            started: Instant::now(),
        }
    }

    fn read(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn an_acknowledged_write_missing_or_changed_is_lost_an_unknown_one_is_neither() {
        let h = history(vec![vec![
            write("k/0", "a", Some(Some(2))),
            write("k/1", "b", Some(Some(3))),
            write("k/2", "c", None),
            write("k/3", "d", None),
        ]]);
        let report = h.check(&read(&[("k/0", "a"), ("k/1", "B"), ("k/3", "d")]));
        assert_eq!(report.lost, ["k/1"]);
        assert_eq!(report.unexpected, ["k/1"], "a value nobody wrote");
        assert_eq!((report.acknowledged, report.unknown), (2, 2));
        let report = h.check(&read(&[("k/0", "a"), ("k/1", "b")]));
        assert!(report.lost.is_empty() && report.unexpected.is_empty());
    }

    #[test]
    fn a_key_nobody_wrote_is_unexpected() {
        let h = history(vec![vec![write("k/0", "a", Some(None))]]);
        let report = h.check(&read(&[("k/0", "a"), ("k/9", "z")]));
        assert_eq!(report.unexpected, ["k/9"]);
        assert!(report.lost.is_empty());
    }

    #[test]
    fn revisions_must_rise_per_client_but_not_across_clients() {
        let h = history(vec![
            vec![
                write("a/0", "x", Some(Some(5))),
                write("a/1", "y", Some(Some(4))),
            ],
            vec![
                write("b/0", "x", Some(Some(3))),
                write("b/1", "y", None),
                write("b/2", "z", Some(Some(9))),
            ],
        ]);
        let report = h.check(&read(&[
            ("a/0", "x"),
            ("a/1", "y"),
            ("b/0", "x"),
            ("b/2", "z"),
        ]));
        assert_eq!(report.revisions_back, ["a/1 at 4 after a/0 at 5"]);
    }
}
