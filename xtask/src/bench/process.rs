//! The operator under test as a process: ours, or any operator a user brings that serves
//! controller-runtime's metric names on an address it is told.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use app_operator::manager::served_port;
use app_operator::telemetry::metrics::requests_by_method;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde::Serialize;

/// How to start an operator.
#[derive(Clone, Debug, Serialize)]
pub enum Launch {
    /// app-operator: it picks free ports itself and logs them; `args` follow the harness's own.
    Ours { binary: PathBuf, args: Vec<String> },
    /// Another operator's command line, run through `sh -c`, with `{metrics}` and `{health}`
    /// replaced by free local addresses for its metrics and health probe servers.
    Command { name: String, line: String },
}

impl Launch {
    pub fn name(&self) -> &str {
        match self {
            Launch::Ours { .. } => "app-operator",
            Launch::Command { name, .. } => name,
        }
    }

    /// The command line as the report states it.
    pub fn describe(&self) -> String {
        match self {
            Launch::Ours { binary, args } => format!("{} run {}", binary.display(), args.join(" "))
                .trim_end()
                .to_owned(),
            Launch::Command { line, .. } => line.clone(),
        }
    }
}

/// A running operator; SIGKILLed when dropped.
pub struct Operator {
    launch: Launch,
    kubeconfig: PathBuf,
    log: PathBuf,
    /// Where this process's part of the log starts (restarts append to it).
    log_start: usize,
    child: Child,
    metrics: u16,
    health: u16,
    /// Peak RSS (MiB) sampled every 250 ms since [`Operator::start`] or the last
    /// [`Operator::take_peak`].
    peak: Arc<Mutex<f64>>,
    /// The peak over every process so far, up to the last [`Operator::take_peak`].
    taken_peak: f64,
    sampler: tokio::task::JoinHandle<()>,
    /// CPU seconds and requests of the processes this one replaced.
    before_restarts: (f64, BTreeMap<String, u64>),
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.sampler.abort();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Operator {
    /// Starts the operator with `kubeconfig` and waits until it is ready.
    pub async fn start(launch: &Launch, kubeconfig: &Path, output: &Path) -> Result<Operator> {
        let log = output.join(format!("{}.log", launch.name()));
        let _ = std::fs::remove_file(&log);
        let (child, metrics, health) = spawn(launch, kubeconfig, &log)?;
        let peak = Arc::new(Mutex::new(0.0_f64));
        let mut operator = Operator {
            launch: launch.clone(),
            kubeconfig: kubeconfig.to_owned(),
            log,
            log_start: 0,
            child,
            metrics,
            health,
            sampler: sample_peak(peak.clone(), local(metrics)),
            peak,
            taken_peak: 0.0,
            before_restarts: (0.0, BTreeMap::new()),
        };
        operator.wait_ready().await?;
        Ok(operator)
    }

    /// Stops the process with SIGTERM (as the kubelet does), starts it again and returns how long
    /// it took from the start until it was ready.
    pub async fn restart(&mut self) -> Result<f64> {
        let scrape = self.scrape();
        let (cpu, requests) = (scrape.cpu_seconds(), scrape.requests());
        let _ = kill(self.pid()?, Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.child.try_wait()?.is_none() {
            if Instant::now() > deadline {
                bail!("{} did not stop within 60 s of SIGTERM", self.launch.name());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.before_restarts.0 += cpu;
        for (method, count) in requests {
            *self.before_restarts.1.entry(method).or_insert(0) += count;
        }
        self.sampler.abort();
        let started = Instant::now();
        self.log_start = std::fs::read(&self.log).map_or(0, |log| log.len());
        let (child, metrics, health) = spawn(&self.launch, &self.kubeconfig, &self.log)?;
        (self.child, self.metrics, self.health) = (child, metrics, health);
        self.take_peak();
        self.sampler = sample_peak(self.peak.clone(), local(metrics));
        self.wait_ready().await?;
        Ok(started.elapsed().as_secs_f64())
    }

    /// Stops the process (SIGSTOP) while the floors run: it would reconcile their MyApps, and
    /// take CPU from them. Its watches resume (or are re-established) on [`Operator::resume`].
    pub fn pause(&self) -> Result<()> {
        Ok(kill(self.pid()?, Signal::SIGSTOP)?)
    }

    pub fn resume(&self) -> Result<()> {
        Ok(kill(self.pid()?, Signal::SIGCONT)?)
    }

    fn pid(&self) -> Result<Pid> {
        Ok(Pid::from_raw(i32::try_from(self.child.id())?))
    }

    async fn wait_ready(&mut self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Launch::Ours { .. } = self.launch {
                // Ours logs the ports it bound.
                let log = std::fs::read(&self.log).unwrap_or_default();
                let log = String::from_utf8_lossy(log.get(self.log_start..).unwrap_or_default());
                if let (Some(health), Some(metrics)) = (
                    served_port(&log, "health probes"),
                    served_port(&log, "metrics"),
                ) {
                    (self.health, self.metrics) = (health, metrics);
                    self.sampler.abort();
                    self.sampler = sample_peak(self.peak.clone(), local(metrics));
                }
            }
            if self.health != 0
                && crate::http_get(&format!("127.0.0.1:{}", self.health), "/readyz").is_some()
            {
                return Ok(());
            }
            if self.child.try_wait()?.is_some() || Instant::now() > deadline {
                bail!(
                    "{} did not become ready; see {}",
                    self.launch.name(),
                    self.log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the operator has sent no request and had no work queued or running for 3 s;
    /// returns its requests by method then, and when it last did something.
    pub async fn until_idle(&self, within: Duration) -> Result<(BTreeMap<String, u64>, Instant)> {
        let quiet_for = Duration::from_secs(3);
        let mut last = self.requests();
        let mut last_change = Instant::now();
        let deadline = Instant::now() + within;
        loop {
            // The pace of the metrics reads that decide when it is idle.
            tokio::time::sleep(Duration::from_millis(200)).await;
            let scrape = self.scrape();
            let requests = scrape.requests();
            if requests != last || scrape.busy() {
                (last, last_change) = (requests, Instant::now());
            } else if last_change.elapsed() >= quiet_for {
                return Ok((last, last_change));
            }
            if Instant::now() > deadline {
                bail!(
                    "{} was not idle within {} s",
                    self.launch.name(),
                    within.as_secs()
                );
            }
        }
    }

    /// One read of the metrics endpoint.
    pub fn scrape(&self) -> Scrape {
        Scrape::of(self.metrics)
    }

    /// This process's API requests by method.
    pub fn requests(&self) -> BTreeMap<String, u64> {
        self.scrape().requests()
    }

    pub fn rss_mib(&self) -> f64 {
        self.scrape().rss_mib()
    }

    /// The resident set split as the kernel counts it: what the operator allocated, and pages of
    /// mapped files (its code, mostly), which no cache change can shrink.
    pub fn rss_parts(&self) -> Option<RssParts> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        RssParts::of_status(&status)
    }

    /// The peak RSS since the start or the last call, and starts a new peak.
    pub fn take_peak(&mut self) -> f64 {
        let peak = std::mem::take(&mut *self.peak.lock().unwrap_or_else(|p| p.into_inner()));
        self.taken_peak = self.taken_peak.max(peak);
        peak
    }

    /// The peak RSS of every process of this operator so far.
    pub fn overall_peak(&mut self) -> f64 {
        self.take_peak();
        self.taken_peak
    }

    /// CPU seconds and requests by method of every process of this operator so far.
    pub fn totals(&self) -> (f64, BTreeMap<String, u64>) {
        let (mut cpu, mut requests) = self.before_restarts.clone();
        let scrape = self.scrape();
        cpu += scrape.cpu_seconds();
        for (method, count) in scrape.requests() {
            *requests.entry(method).or_insert(0) += count;
        }
        (cpu, requests)
    }
}

/// `RssAnon` and `RssFile` of `/proc/<pid>/status`, in MiB.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct RssParts {
    pub anonymous_mib: f64,
    pub file_mib: f64,
}

impl RssParts {
    /// From the text of `/proc/<pid>/status` (`RssAnon:\t   2028 kB`); none without both lines.
    fn of_status(status: &str) -> Option<RssParts> {
        let mib = |field: &str| -> Option<f64> {
            let value = status.lines().find_map(|line| line.strip_prefix(field))?;
            let kib: f64 = value.trim().strip_suffix("kB")?.trim().parse().ok()?;
            Some(kib / 1024.0)
        };
        Some(RssParts {
            anonymous_mib: mib("RssAnon:")?,
            file_mib: mib("RssFile:")?,
        })
    }
}

fn spawn(launch: &Launch, kubeconfig: &Path, log: &Path) -> Result<(Child, u16, u16)> {
    let stderr = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    match launch {
        Launch::Ours { binary, args } => {
            let child = Command::new(binary)
                .args([
                    "run",
                    "--log-format=json",
                    "--log-level=warn,app_operator::manager::server=info",
                    "--metrics-bind-address=127.0.0.1:0",
                    "--health-probe-bind-address=127.0.0.1:0",
                ])
                .arg(format!("--kubeconfig={}", kubeconfig.display()))
                .args(args)
                .stdout(Stdio::null())
                .stderr(stderr)
                .spawn()
                .with_context(|| format!("starting {}", binary.display()))?;
            Ok((child, 0, 0))
        }
        Launch::Command { line, .. } => {
            let (metrics, health) = (free_port()?, free_port()?);
            let line = line
                .replace("{metrics}", &format!("127.0.0.1:{metrics}"))
                .replace("{health}", &format!("127.0.0.1:{health}"));
            // As a shell runs it, leading `NAME=value` words included (`exec` alone would take
            // the first for a command), and with the operator as the process the harness
            // signals and measures (`exec env`, not a child of `sh`).
            let child = Command::new("sh")
                .args(["-c", &format!("exec env {line}")])
                .env("KUBECONFIG", kubeconfig)
                .stdout(stderr.try_clone()?)
                .stderr(stderr)
                .spawn()
                .with_context(|| format!("starting {line}"))?;
            Ok((child, metrics, health))
        }
    }
}

/// A port free right now, below the kernel's ephemeral range: the operator binds it a moment
/// later, and a port from that range (what binding port 0 gives) can be taken in between by
/// any outgoing connection of the harness (bench run at 905b23e: a compared operator's restart
/// failed with "Address already in use"). Only a listener can take one from below it.
fn free_port() -> Result<u16> {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    // Spread the starting point so that successive calls do not all probe the same ports.
    static NEXT: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);
    let below = ephemeral_low.saturating_sub(20000).max(1024)..ephemeral_low;
    let span = below.end - below.start;
    let offset = NEXT.fetch_add(7919, std::sync::atomic::Ordering::Relaxed)
        ^ u16::try_from(std::process::id() % 65536).unwrap_or(0);
    (0..span)
        .map(|i| below.start + offset.wrapping_add(i) % span)
        .find(|&port| std::net::TcpListener::bind(("127.0.0.1", port)).is_ok())
        .with_context(|| format!("no free port in {below:?}"))
}

/// The address of an operator's metrics endpoint on this machine.
fn local(port: u16) -> String {
    format!("127.0.0.1:{port}")
}

/// Samples the RSS the metrics endpoint at `address` reports into `peak`, every 250 ms.
pub fn sample_peak(peak: Arc<Mutex<f64>>, address: String) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let at = address.clone();
            let rss = tokio::task::spawn_blocking(move || Scrape::at(&at).rss_mib())
                .await
                .unwrap_or(0.0);
            {
                let mut max = peak.lock().unwrap_or_else(|p| p.into_inner());
                *max = max.max(rss);
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    })
}

/// The text of an operator's metrics endpoint (empty when it does not answer), read by
/// controller-runtime's metric names.
pub struct Scrape(String);

impl Scrape {
    fn of(port: u16) -> Scrape {
        if port == 0 {
            return Scrape(String::new());
        }
        Scrape::at(&local(port))
    }

    /// The metrics endpoint at `address` (`host:port`).
    pub fn at(address: &str) -> Scrape {
        Scrape(crate::http_get(address, "/metrics").unwrap_or_default())
    }

    /// Whether the endpoint answered nothing.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The samples whose series (name and labels) starts with `prefix`.
    fn values<'a>(&'a self, prefix: &'a str) -> impl Iterator<Item = f64> + 'a {
        self.0.lines().filter_map(move |line| {
            let (series, value) = line.rsplit_once(' ')?;
            series
                .starts_with(prefix)
                .then(|| value.trim().parse().ok())?
        })
    }

    /// API requests by method (`rest_client_requests_total`).
    pub fn requests(&self) -> BTreeMap<String, u64> {
        requests_by_method(&self.0)
    }

    /// Whether a controller has work queued or in progress (`workqueue_depth`,
    /// `controller_runtime_active_workers`).
    pub fn busy(&self) -> bool {
        self.values("workqueue_depth{")
            .chain(self.values("controller_runtime_active_workers{"))
            .any(|value| value > 0.0)
    }

    pub fn cpu_seconds(&self) -> f64 {
        self.values("process_cpu_seconds_total").sum()
    }

    pub fn rss_mib(&self) -> f64 {
        self.values("process_resident_memory_bytes").sum::<f64>() / 1024.0 / 1024.0
    }
}

#[cfg(test)]
mod tests {
    use super::RssParts;

    #[test]
    fn rss_parts_are_read_from_the_status_file() {
        let status = "Name:\tapp-operator\nVmRSS:\t   15324 kB\nRssAnon:\t    2048 kB\nRssFile:\t   13276 kB\nRssShmem:\t       0 kB\n";
        assert_eq!(
            RssParts::of_status(status),
            Some(RssParts {
                anonymous_mib: 2.0,
                file_mib: 13276.0 / 1024.0,
            })
        );
        // A kernel without the split (before 4.5) reports neither.
        assert_eq!(RssParts::of_status("VmRSS:\t   15324 kB\n"), None);
    }
}
