//! controller-runtime's `workqueue_*` metrics, so its dashboards and alerts work unchanged.
//! kube-runtime's scheduler keeps its queue to itself, so the runner reports what enters it (a
//! watch event or a child's change naming an object), what leaves it (a reconcile starting, or
//! an object that no longer exists) and each reconcile's end; the queue is mirrored here.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// client-go labels every queue metric with the queue's name; controller-runtime names the queue
/// after the controller and adds `controller` too.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    controller: &'static str,
    name: &'static str,
}

impl QueueLabels {
    fn of(controller: &'static str) -> QueueLabels {
        QueueLabels {
            controller,
            name: controller,
        }
    }
}

/// One controller's queue: when each waiting object was added, when each running reconcile began.
#[derive(Debug, Default)]
struct Queue {
    waiting: HashMap<String, Instant>,
    running: HashMap<u64, Instant>,
    next_run: u64,
}

#[derive(Debug, Default)]
struct Queues(Mutex<BTreeMap<&'static str, Queue>>);

impl Queues {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<&'static str, Queue>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

pub struct WorkQueueMetrics {
    queues: Arc<Queues>,
    adds: Family<QueueLabels, Counter>,
    retries: Family<QueueLabels, Counter>,
    queue_duration: Family<QueueLabels, Histogram>,
    work_duration: Family<QueueLabels, Histogram>,
}

/// client-go's buckets: 1 µs to 10 s, by tens.
fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1e-6, 10.0, 8))
}

impl WorkQueueMetrics {
    pub(super) fn register(registry: &mut Registry) -> WorkQueueMetrics {
        let metrics = WorkQueueMetrics {
            queues: Arc::default(),
            adds: Family::default(),
            retries: Family::default(),
            queue_duration: Family::new_with_constructor(duration_histogram),
            work_duration: Family::new_with_constructor(duration_histogram),
        };
        registry.register(
            "workqueue_adds",
            "Total number of adds handled by workqueue",
            metrics.adds.clone(),
        );
        registry.register(
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            metrics.retries.clone(),
        );
        registry.register(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            metrics.queue_duration.clone(),
        );
        registry.register(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            metrics.work_duration.clone(),
        );
        registry.register_collector(Box::new(QueueGauges(metrics.queues.clone())));
        metrics
    }

    /// A controller's queue exists (and is reported, empty) from its start.
    pub(super) fn started(&self, controller: &'static str) {
        self.queues.lock().entry(controller).or_default();
        self.adds
            .get_or_create(&QueueLabels::of(controller))
            .inc_by(0);
        self.retries
            .get_or_create(&QueueLabels::of(controller))
            .inc_by(0);
    }

    /// The object `key` was queued; one already waiting is not queued twice (nor counted, as in
    /// client-go).
    pub fn added(&self, controller: &'static str, key: String) {
        let mut queues = self.queues.lock();
        let queue = queues.entry(controller).or_default();
        if let std::collections::hash_map::Entry::Vacant(entry) = queue.waiting.entry(key) {
            entry.insert(Instant::now());
            self.adds.get_or_create(&QueueLabels::of(controller)).inc();
        }
    }

    /// The object `key` left the queue without a reconcile (it no longer exists).
    pub fn dropped(&self, controller: &'static str, key: &str) {
        if let Some(queue) = self.queues.lock().get_mut(controller) {
            queue.waiting.remove(key);
        }
    }

    /// A reconcile of `key` starts; it ends when the returned value is dropped. An object not seen
    /// waiting came back from a requeue the scheduler held (controller-runtime's `AddAfter`): it
    /// counts as an add that did not wait.
    pub(super) fn processing(&self, controller: &'static str, key: &str) -> Processing<'_> {
        let labels = QueueLabels::of(controller);
        let mut queues = self.queues.lock();
        let queue = queues.entry(controller).or_default();
        let now = Instant::now();
        let waited = match queue.waiting.remove(key) {
            Some(added) => now.duration_since(added).as_secs_f64(),
            None => {
                self.adds.get_or_create(&labels).inc();
                0.0
            }
        };
        self.queue_duration.get_or_create(&labels).observe(waited);
        let run = queue.next_run;
        queue.next_run = queue.next_run.wrapping_add(1);
        queue.running.insert(run, now);
        Processing {
            metrics: self,
            controller,
            run,
            started: now,
        }
    }

    /// A failed reconcile is queued again after a backoff.
    pub fn retried(&self, controller: &'static str) {
        self.retries
            .get_or_create(&QueueLabels::of(controller))
            .inc();
    }
}

/// One reconcile in progress: counted as unfinished work until dropped.
pub struct Processing<'a> {
    metrics: &'a WorkQueueMetrics,
    controller: &'static str,
    run: u64,
    started: Instant,
}

impl Drop for Processing<'_> {
    fn drop(&mut self) {
        if let Some(queue) = self.metrics.queues.lock().get_mut(self.controller) {
            queue.running.remove(&self.run);
        }
        self.metrics
            .work_duration
            .get_or_create(&QueueLabels::of(self.controller))
            .observe(self.started.elapsed().as_secs_f64());
    }
}

/// The gauges, read from the queues at each scrape.
#[derive(Debug)]
struct QueueGauges(Arc<Queues>);

impl QueueGauges {
    fn encode_gauge(
        encoder: &mut DescriptorEncoder,
        name: &str,
        help: &str,
        values: &[(&'static str, f64)],
    ) -> Result<(), std::fmt::Error> {
        let mut family = encoder.encode_descriptor(
            name,
            help,
            None,
            prometheus_client::metrics::MetricType::Gauge,
        )?;
        for (controller, value) in values {
            ConstGauge::new(*value).encode(family.encode_family(&QueueLabels::of(controller))?)?;
        }
        Ok(())
    }
}

impl Collector for QueueGauges {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let now = Instant::now();
        let (mut depth, mut unfinished, mut longest) = (Vec::new(), Vec::new(), Vec::new());
        for (controller, queue) in self.0.lock().iter() {
            let running = queue
                .running
                .values()
                .map(|started| now.duration_since(*started).as_secs_f64());
            depth.push((*controller, queue.waiting.len() as f64));
            unfinished.push((*controller, running.clone().sum()));
            longest.push((*controller, running.fold(0.0, f64::max)));
        }
        Self::encode_gauge(
            &mut encoder,
            "workqueue_depth",
            "Current depth of workqueue",
            &depth,
        )?;
        Self::encode_gauge(
            &mut encoder,
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has been done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads.",
            &unfinished,
        )?;
        Self::encode_gauge(
            &mut encoder,
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running.",
            &longest,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exposition(registry: &Registry) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).unwrap_or_default();
        text
    }

    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
    }

    const LABELS: &str = "{controller=\"myapp\",name=\"myapp\"}";

    #[test]
    fn the_queue_counts_waiting_objects_once_and_running_work_until_it_ends() {
        let mut registry = Registry::default();
        let queue = WorkQueueMetrics::register(&mut registry);
        queue.started("myapp");
        queue.added("myapp", "ns/a".into());
        queue.added("myapp", "ns/a".into());
        queue.added("myapp", "ns/b".into());
        queue.dropped("myapp", "ns/b");
        let text = exposition(&registry);
        assert_eq!(
            sample(&text, &format!("workqueue_depth{LABELS}")),
            Some(1.0)
        );
        assert_eq!(
            sample(&text, &format!("workqueue_adds_total{LABELS}")),
            Some(2.0)
        );

        let running = queue.processing("myapp", "ns/a");
        let text = exposition(&registry);
        assert_eq!(
            sample(&text, &format!("workqueue_depth{LABELS}")),
            Some(0.0)
        );
        assert!(
            sample(
                &text,
                &format!("workqueue_longest_running_processor_seconds{LABELS}")
            )
            .is_some_and(|seconds| seconds >= 0.0)
        );
        drop(running);
        queue.retried("myapp");
        let text = exposition(&registry);
        assert_eq!(
            sample(
                &text,
                &format!("workqueue_work_duration_seconds_count{LABELS}")
            ),
            Some(1.0)
        );
        assert_eq!(
            sample(&text, &format!("workqueue_unfinished_work_seconds{LABELS}")),
            Some(0.0)
        );
        assert_eq!(
            sample(&text, &format!("workqueue_retries_total{LABELS}")),
            Some(1.0)
        );
    }

    #[test]
    fn a_requeued_object_counts_as_an_add_that_did_not_wait() {
        let mut registry = Registry::default();
        let queue = WorkQueueMetrics::register(&mut registry);
        drop(queue.processing("myapp", "ns/a"));
        let text = exposition(&registry);
        assert_eq!(
            sample(&text, &format!("workqueue_adds_total{LABELS}")),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &text,
                &format!("workqueue_queue_duration_seconds_count{LABELS}")
            ),
            Some(1.0)
        );
    }
}
