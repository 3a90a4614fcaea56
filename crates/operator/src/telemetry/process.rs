//! Process metrics under the Prometheus client libraries' standard names, read from `/proc` at
//! each scrape: resident memory, CPU seconds, open file descriptors, start time.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Linux reports CPU times in `/proc/<pid>/stat` in USER_HZ, which the kernel ABI fixes at 100.
const TICKS_PER_SECOND: f64 = 100.0;

#[derive(Debug)]
pub struct ProcessCollector {
    /// Read once: a process's start time does not change.
    start_time_seconds: Option<f64>,
}

impl ProcessCollector {
    pub fn new() -> ProcessCollector {
        ProcessCollector {
            start_time_seconds: start_time_seconds(),
        }
    }
}

/// `VmRSS` from `/proc/self/status`, in bytes.
fn resident_memory_bytes() -> Option<i64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: i64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// User + system CPU time from `/proc/self/stat`, in seconds.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name (which may contain spaces): utime is the 14th
    // field overall, the 12th after ")".
    let after_name = stat.rsplit_once(')')?.1;
    let mut fields = after_name.split_whitespace().skip(11);
    let user: f64 = fields.next()?.parse().ok()?;
    let system: f64 = fields.next()?.parse().ok()?;
    Some((user + system) / TICKS_PER_SECOND)
}

/// When the process started (Unix seconds): its start in ticks after boot (`/proc/self/stat`),
/// plus the boot time (`btime` in `/proc/stat`).
fn start_time_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // starttime is the 22nd field overall, the 20th after ")".
    let ticks: f64 = stat
        .rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()?;
    let system = std::fs::read_to_string("/proc/stat").ok()?;
    let boot: f64 = system
        .lines()
        .find_map(|line| line.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    Some(boot + ticks / TICKS_PER_SECOND)
}

fn open_fds() -> Option<i64> {
    let count = std::fs::read_dir("/proc/self/fd").ok()?.count();
    i64::try_from(count).ok()
}

/// Encodes `metric` as the family `name`, when there is a value (a `/proc` file may be unreadable).
fn encode_one(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    metric: Option<impl EncodeMetric>,
) -> Result<(), std::fmt::Error> {
    match metric {
        Some(metric) => {
            metric.encode(encoder.encode_descriptor(name, help, None, metric.metric_type())?)
        }
        None => Ok(()),
    }
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        encode_one(
            &mut encoder,
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            resident_memory_bytes().map(ConstGauge::new),
        )?;
        encode_one(
            &mut encoder,
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds.",
            cpu_seconds().map(ConstCounter::new),
        )?;
        encode_one(
            &mut encoder,
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
            self.start_time_seconds.map(ConstGauge::new),
        )?;
        encode_one(
            &mut encoder,
            "process_open_fds",
            "Number of open file descriptors.",
            open_fds().map(ConstGauge::new),
        )
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_start_time_is_in_the_recent_past() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let started = super::start_time_seconds().unwrap_or_default();
        assert!(
            started <= now + 1.0 && now - started < 3600.0,
            "started {started}, now {now}"
        );
    }
}
