//! Prometheus metrics under controller-runtime's names, so existing dashboards and alerts work.

use std::collections::BTreeMap;
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    pub controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    pub controller: &'static str,
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ObjectLabels {
    pub controller: &'static str,
    pub namespace: String,
    pub name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DegradedLabels {
    pub controller: &'static str,
    pub namespace: String,
    pub name: String,
    /// The Degraded condition's reason (CamelCase, a bounded set per kind).
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WatchLabels {
    pub controller: &'static str,
    /// The kind watched, e.g. `Deployment`.
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LeaseLabels {
    pub name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub method: &'static str,
    /// The HTTP status code, or `<error>` when the request got no response.
    pub code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub controller: &'static str,
    /// The error variant (a bounded set), never the message.
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MembershipLabels {
    /// `add`, `promote`, `remove`, `remove_dead`, `upgrade`.
    pub operation: &'static str,
    /// `success`, or the error's bounded label.
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ObjectNameLabels {
    pub namespace: String,
    pub name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BackupLabels {
    pub namespace: String,
    pub name: String,
    /// `succeeded` or `failed`.
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SkippedCleanupLabels {
    pub controller: &'static str,
    /// Why the deletion's cleanup was skipped, e.g. `NamespaceTerminating`.
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EtcdMemberLabels {
    pub namespace: String,
    pub name: String,
    /// One of [`ETCD_MEMBER_STATES`].
    pub state: &'static str,
}

/// How an etcd member is counted: answering voting members, voting members that do not answer,
/// learners (started, not promoted yet), and members added whose process has not joined.
pub const ETCD_MEMBER_STATES: [&str; 4] = ["healthy", "unhealthy", "learner", "unstarted"];

pub struct Metrics {
    pub registry: Registry,
    reconcile_total: Family<ResultLabels, Counter>,
    reconcile_errors_total: Family<ControllerLabels, Counter>,
    reconcile_errors_by_reason: Family<ErrorLabels, Counter>,
    reconcile_time_seconds: Family<ControllerLabels, Histogram>,
    max_concurrent_reconciles: Family<ControllerLabels, Gauge>,
    active_workers: Family<ControllerLabels, Gauge>,
    rest_client_requests_total: Family<RequestLabels, Counter>,
    leader_election_master_status: Family<LeaseLabels, Gauge>,
    invalid_objects: Family<ObjectLabels, Gauge>,
    degraded_objects: Family<DegradedLabels, Gauge>,
    /// The reason each Degraded object's series carries, to drop it when the reason changes.
    degraded_reasons: std::sync::Mutex<std::collections::HashMap<ObjectLabels, String>>,
    pub workqueue: super::workqueue::WorkQueueMetrics,
    etcd_membership_operations: Family<MembershipLabels, Counter>,
    etcd_members: Family<EtcdMemberLabels, Gauge>,
    etcd_quorum: Family<ObjectNameLabels, Gauge>,
    pub sampledb_backups: BackupMetrics,
    pub etcd_backups: BackupMetrics,
    etcd_snapshot_size: Family<ObjectNameLabels, Gauge>,
    cleanups_skipped: Family<SkippedCleanupLabels, Counter>,
    watch_errors: Family<WatchLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let reconcile_total = Family::<ResultLabels, Counter>::default();
        let reconcile_errors_total = Family::<ControllerLabels, Counter>::default();
        let reconcile_errors_by_reason = Family::<ErrorLabels, Counter>::default();
        let reconcile_time_seconds =
            Family::<ControllerLabels, Histogram>::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.005, 2.0, 14))
            });
        let max_concurrent_reconciles = Family::<ControllerLabels, Gauge>::default();
        let active_workers = Family::<ControllerLabels, Gauge>::default();
        let rest_client_requests_total = Family::<RequestLabels, Counter>::default();
        let leader_election_master_status = Family::<LeaseLabels, Gauge>::default();
        let invalid_objects = Family::<ObjectLabels, Gauge>::default();
        let degraded_objects = Family::<DegradedLabels, Gauge>::default();
        let etcd_membership_operations = Family::<MembershipLabels, Counter>::default();
        let etcd_members = Family::<EtcdMemberLabels, Gauge>::default();
        let etcd_quorum = Family::<ObjectNameLabels, Gauge>::default();
        let etcd_snapshot_size = Family::<ObjectNameLabels, Gauge>::default();
        let cleanups_skipped = Family::<SkippedCleanupLabels, Counter>::default();
        let watch_errors = Family::<WatchLabels, Counter>::default();
        registry.register(
            "app_operator_watch_errors",
            "Failed list or watch calls of the controllers' caches (each is retried with backoff), by controller and kind",
            watch_errors.clone(),
        );
        registry.register(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master",
            leader_election_master_status.clone(),
        );
        registry.register_collector(Box::new(super::process::ProcessCollector::new()));
        registry.register(
            "rest_client_requests",
            "Number of HTTP requests to the API server, partitioned by method and status code",
            rest_client_requests_total.clone(),
        );
        let runtime = registry.sub_registry_with_prefix("controller_runtime");
        runtime.register(
            "reconcile",
            "Total number of reconciliations per controller",
            reconcile_total.clone(),
        );
        runtime.register(
            "reconcile_errors",
            "Total number of reconciliation errors per controller",
            reconcile_errors_total.clone(),
        );
        runtime.register(
            "reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            reconcile_time_seconds.clone(),
        );
        runtime.register(
            "max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            max_concurrent_reconciles.clone(),
        );
        runtime.register(
            "active_workers",
            "Number of currently used workers per controller",
            active_workers.clone(),
        );
        registry.register(
            "app_operator_reconcile_errors_by_reason",
            "Reconciliation errors per controller and error kind",
            reconcile_errors_by_reason.clone(),
        );
        registry.register(
            "app_operator_invalid_objects",
            "Stored objects that do not decode into the operator's types (1 per object), left alone until they are fixed",
            invalid_objects.clone(),
        );
        registry.register(
            "app_operator_degraded_objects",
            "Objects whose Degraded condition is True (1 per object, with the condition's reason), as last written by the operator",
            degraded_objects.clone(),
        );
        let workqueue = super::workqueue::WorkQueueMetrics::register(&mut registry);
        registry.register(
            "app_operator_etcd_membership_operations",
            "etcd membership changes the operator made, by operation and result",
            etcd_membership_operations.clone(),
        );
        registry.register(
            "app_operator_etcd_members",
            "Members of each EtcdCluster by state (healthy, unhealthy, learner, unstarted), as etcd reports them",
            etcd_members.clone(),
        );
        registry.register(
            "app_operator_etcd_quorum",
            "1 while an EtcdCluster's healthy voting members hold a quorum, else 0",
            etcd_quorum.clone(),
        );
        let sampledb_backups = BackupMetrics::register(&mut registry, "sampledb", "SampleDB");
        let etcd_backups = BackupMetrics::register(&mut registry, "etcdbackup", "EtcdBackup");
        registry.register(
            "app_operator_etcdbackup_snapshot_size_bytes",
            "Size of each EtcdBackup's latest snapshot (the database of the member it copied)",
            etcd_snapshot_size.clone(),
        );
        registry.register(
            "app_operator_cleanups_skipped",
            "Deletion cleanups skipped (e.g. a SampleDB's final snapshot in a namespace being deleted), by controller and reason",
            cleanups_skipped.clone(),
        );
        Metrics {
            registry,
            reconcile_total,
            reconcile_errors_total,
            reconcile_errors_by_reason,
            reconcile_time_seconds,
            max_concurrent_reconciles,
            active_workers,
            rest_client_requests_total,
            leader_election_master_status,
            invalid_objects,
            degraded_objects,
            degraded_reasons: std::sync::Mutex::default(),
            workqueue,
            etcd_membership_operations,
            etcd_members,
            etcd_quorum,
            sampledb_backups,
            etcd_backups,
            etcd_snapshot_size,
            cleanups_skipped,
            watch_errors,
        }
    }
}

/// The backups of one kind: finished backups by result, and when the latest success finished.
pub struct BackupMetrics {
    finished: Family<BackupLabels, Counter>,
    last_success: Family<ObjectNameLabels, Gauge>,
}

impl BackupMetrics {
    /// `app_operator_<prefix>_backups_total` and
    /// `app_operator_<prefix>_last_successful_backup_timestamp_seconds`.
    fn register(registry: &mut Registry, prefix: &str, kind: &str) -> BackupMetrics {
        let metrics = BackupMetrics {
            finished: Family::default(),
            last_success: Family::default(),
        };
        registry.register(
            format!("app_operator_{prefix}_backups"),
            format!("{kind} backups that finished, by result (succeeded, failed)"),
            metrics.finished.clone(),
        );
        registry.register(
            format!("app_operator_{prefix}_last_successful_backup_timestamp_seconds"),
            format!("When each {kind}'s latest successful backup finished (Unix seconds)"),
            metrics.last_success.clone(),
        );
        metrics
    }

    /// Counts one finished backup.
    pub fn finished(&self, namespace: &str, name: &str, result: &'static str) {
        self.finished
            .get_or_create(&BackupLabels {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                result,
            })
            .inc();
    }

    /// Records when the latest successful backup finished.
    pub fn set_last_success(&self, namespace: &str, name: &str, unix_seconds: i64) {
        self.last_success
            .get_or_create(&ObjectNameLabels {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            })
            .set(unix_seconds);
    }

    /// Drops the series of an object that is gone.
    pub fn forget(&self, namespace: &str, name: &str) {
        for result in ["succeeded", "failed"] {
            self.finished.remove(&BackupLabels {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                result,
            });
        }
        self.last_success.remove(&ObjectNameLabels {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        });
    }
}

/// Measures one reconcile: counts it as an active worker and as work taken from the queue, and
/// observes its duration when dropped.
pub struct ReconcileTimer<'a> {
    metrics: &'a Metrics,
    controller: &'static str,
    started: Instant,
    _work: super::workqueue::Processing<'a>,
}

impl Drop for ReconcileTimer<'_> {
    fn drop(&mut self) {
        let labels = ControllerLabels {
            controller: self.controller,
        };
        self.metrics.active_workers.get_or_create(&labels).dec();
        self.metrics
            .reconcile_time_seconds
            .get_or_create(&labels)
            .observe(self.started.elapsed().as_secs_f64());
    }
}

impl Metrics {
    pub fn controller_started(&self, controller: &'static str, concurrency: u16) {
        let labels = ControllerLabels { controller };
        self.max_concurrent_reconciles
            .get_or_create(&labels)
            .set(i64::from(concurrency));
        self.active_workers.get_or_create(&labels).set(0);
        // Every reconcile series exists from the start, at 0 (as controller-runtime's
        // `initMetrics`): `rate()` and `absent()` work from the first scrape.
        for result in ["success", "error"] {
            self.reconcile_total
                .get_or_create(&ResultLabels { controller, result })
                .inc_by(0);
        }
        self.reconcile_errors_total.get_or_create(&labels).inc_by(0);
        drop(self.reconcile_time_seconds.get_or_create(&labels));
        self.workqueue.started(controller);
    }

    /// A reconcile of the object `key` (`namespace/name`) starts.
    pub fn reconcile_started(&self, controller: &'static str, key: &str) -> ReconcileTimer<'_> {
        self.active_workers
            .get_or_create(&ControllerLabels { controller })
            .inc();
        ReconcileTimer {
            metrics: self,
            controller,
            started: Instant::now(),
            _work: self.workqueue.processing(controller, key),
        }
    }

    /// Counts a finished reconcile; `error` is the failure's bounded label (its kind, never its
    /// message).
    pub fn reconcile_finished(&self, controller: &'static str, error: Option<&'static str>) {
        let result = if error.is_some() { "error" } else { "success" };
        self.reconcile_total
            .get_or_create(&ResultLabels { controller, result })
            .inc();
        if let Some(error) = error {
            self.reconcile_errors_total
                .get_or_create(&ControllerLabels { controller })
                .inc();
            self.reconcile_errors_by_reason
                .get_or_create(&ErrorLabels {
                    controller,
                    reason: error,
                })
                .inc();
        }
    }

    /// Marks the object `namespace/name` of `controller` as undecodable (`true`) or fixed.
    pub fn set_invalid(
        &self,
        controller: &'static str,
        namespace: &str,
        name: &str,
        invalid: bool,
    ) {
        let labels = ObjectLabels {
            controller,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        };
        if invalid {
            self.invalid_objects.get_or_create(&labels).set(1);
        } else {
            self.invalid_objects.remove(&labels);
        }
    }

    /// Marks the object `namespace/name` of `controller` as Degraded for `reason`, or (`None`)
    /// not Degraded.
    pub fn set_degraded(
        &self,
        controller: &'static str,
        namespace: &str,
        name: &str,
        reason: Option<&str>,
    ) {
        let object = ObjectLabels {
            controller,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        };
        let series = |reason: String| DegradedLabels {
            controller,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            reason,
        };
        let mut reasons = self
            .degraded_reasons
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let previous = match reason {
            Some(reason) => {
                self.degraded_objects
                    .get_or_create(&series(reason.to_owned()))
                    .set(1);
                reasons
                    .insert(object, reason.to_owned())
                    .filter(|previous| previous != reason)
            }
            None => reasons.remove(&object),
        };
        if let Some(previous) = previous {
            self.degraded_objects.remove(&series(previous));
        }
    }

    pub fn set_leader(&self, lease: &str, leading: bool) {
        let labels = LeaseLabels {
            name: lease.to_owned(),
        };
        self.leader_election_master_status
            .get_or_create(&labels)
            .set(i64::from(leading));
    }

    /// Counts one request to the API server by its method and response status.
    pub fn api_request(&self, method: &http::Method, status: Option<http::StatusCode>) {
        let method = match *method {
            http::Method::GET => "GET",
            http::Method::POST => "POST",
            http::Method::PUT => "PUT",
            http::Method::PATCH => "PATCH",
            http::Method::DELETE => "DELETE",
            _ => "OTHER",
        };
        let code = status.map_or_else(|| "<error>".to_owned(), |s| s.as_u16().to_string());
        self.rest_client_requests_total
            .get_or_create(&RequestLabels { method, code })
            .inc();
    }

    /// Requests to the API server so far, by method (`GET`, `PATCH`, …), whatever their outcome.
    pub fn api_requests(&self, method: &str) -> u64 {
        let text = self.encode().unwrap_or_default();
        requests_by_method(&text).get(method).copied().unwrap_or(0)
    }

    /// Reconciles of `controller` so far, successful or not.
    pub fn reconciles(&self, controller: &'static str) -> u64 {
        ["success", "error"]
            .into_iter()
            .map(|result| {
                self.reconcile_total
                    .get_or_create(&ResultLabels { controller, result })
                    .get()
            })
            .sum()
    }

    /// Counts one etcd membership change by its outcome.
    pub fn etcd_membership_operation(&self, operation: &'static str, result: &'static str) {
        self.etcd_membership_operations
            .get_or_create(&MembershipLabels { operation, result })
            .inc();
    }

    /// etcd membership changes so far, of every operation and outcome.
    pub fn etcd_membership_operations(&self) -> u64 {
        let text = self.encode().unwrap_or_default();
        text.lines()
            .filter(|line| line.starts_with("app_operator_etcd_membership_operations_total{"))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }

    /// Records an EtcdCluster's members by state (`counts` in [`ETCD_MEMBER_STATES`] order) and
    /// whether it has a quorum.
    pub fn set_etcd_cluster(&self, namespace: &str, name: &str, counts: [usize; 4], quorum: bool) {
        for (state, count) in ETCD_MEMBER_STATES.into_iter().zip(counts) {
            let labels = EtcdMemberLabels {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                state,
            };
            self.etcd_members
                .get_or_create(&labels)
                .set(i64::try_from(count).unwrap_or(i64::MAX));
        }
        let labels = ObjectNameLabels {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        };
        self.etcd_quorum
            .get_or_create(&labels)
            .set(i64::from(quorum));
    }

    /// Drops the series of an EtcdCluster that is gone.
    pub fn forget_etcd_cluster(&self, namespace: &str, name: &str) {
        for state in ETCD_MEMBER_STATES {
            self.etcd_members.remove(&EtcdMemberLabels {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                state,
            });
        }
        self.etcd_quorum.remove(&ObjectNameLabels {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        });
    }

    /// Records the size of an EtcdBackup's latest snapshot.
    pub fn set_etcd_snapshot_size(&self, namespace: &str, name: &str, bytes: i64) {
        self.etcd_snapshot_size
            .get_or_create(&ObjectNameLabels {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            })
            .set(bytes);
    }

    /// Drops the series of an EtcdBackup that is gone.
    pub fn forget_etcd_backup(&self, namespace: &str, name: &str) {
        self.etcd_backups.forget(namespace, name);
        self.etcd_snapshot_size.remove(&ObjectNameLabels {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        });
    }

    /// Counts a deletion cleanup that was skipped.
    pub fn cleanup_skipped(&self, controller: &'static str, reason: &'static str) {
        self.cleanups_skipped
            .get_or_create(&SkippedCleanupLabels { controller, reason })
            .inc();
    }

    pub fn watch_failed(&self, controller: &'static str, kind: &str) {
        self.watch_errors
            .get_or_create(&WatchLabels {
                controller,
                kind: kind.to_owned(),
            })
            .inc();
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)?;
        Ok(text)
    }
}

/// Sums `rest_client_requests_total` by method from a Prometheus text exposition.
pub fn requests_by_method(text: &str) -> BTreeMap<String, u64> {
    let mut requests = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("rest_client_requests_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.split_once("} ") else {
            continue;
        };
        let method = labels
            .split(',')
            .find_map(|label| label.strip_prefix("method=\""))
            .and_then(|m| m.strip_suffix('"'));
        if let (Some(method), Ok(value)) = (method, value.trim().parse::<u64>()) {
            *requests.entry(method.to_owned()).or_insert(0) += value;
        }
    }
    requests
}

#[cfg(test)]
mod tests {
    use super::Metrics;

    fn degraded_series(metrics: &Metrics) -> Vec<String> {
        metrics
            .encode()
            .unwrap_or_default()
            .lines()
            .filter(|line| line.starts_with("app_operator_degraded_objects{"))
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn a_started_controller_has_its_reconcile_series_at_zero_before_any_reconcile() {
        let metrics = Metrics::default();
        metrics.controller_started("myapp", 4);
        let text = metrics.encode().unwrap_or_default();
        for series in [
            r#"controller_runtime_reconcile_total{controller="myapp",result="success"} 0"#,
            r#"controller_runtime_reconcile_total{controller="myapp",result="error"} 0"#,
            r#"controller_runtime_reconcile_errors_total{controller="myapp"} 0"#,
            r#"controller_runtime_reconcile_time_seconds_count{controller="myapp"} 0"#,
        ] {
            assert!(
                text.lines().any(|line| line == series),
                "{series} in:\n{text}"
            );
        }
    }

    #[test]
    fn a_degraded_object_has_one_series_with_its_current_reason_until_it_recovers() {
        let metrics = Metrics::default();
        metrics.set_degraded("myapp", "ns", "web", Some("ApplyFailed"));
        metrics.set_degraded("myapp", "ns", "web", Some("Conflict"));
        assert_eq!(
            degraded_series(&metrics),
            [
                r#"app_operator_degraded_objects{controller="myapp",namespace="ns",name="web",reason="Conflict"} 1"#
            ]
        );
        metrics.set_degraded("myapp", "ns", "web", None);
        assert!(degraded_series(&metrics).is_empty());
    }
}
