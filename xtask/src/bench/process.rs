//! The operator under test as a process: ours, or any operator a user brings that serves
//! controller-runtime's metric names on an address it is told.

use std::collections::{BTreeMap, HashMap};
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
    /// app-operator: it picks free ports itself and logs them.
    Ours { binary: PathBuf },
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
            Launch::Ours { binary } => format!("{} run", binary.display()),
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
            sampler: sample_peak(peak.clone(), metrics),
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
        let (cpu, requests) = (self.cpu_seconds(), self.requests());
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
        self.sampler = sample_peak(self.peak.clone(), metrics);
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
                    self.sampler = sample_peak(self.peak.clone(), metrics);
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

    /// Every sample of the metrics endpoint, as `series -> value`.
    fn metrics(&self) -> HashMap<String, f64> {
        let Some(text) = crate::http_get(&format!("127.0.0.1:{}", self.metrics), "/metrics") else {
            return HashMap::new();
        };
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let (series, value) = l.rsplit_once(' ')?;
                Some((series.to_owned(), value.parse().ok()?))
            })
            .collect()
    }

    /// This process's API requests by method (controller-runtime's `rest_client_requests_total`).
    pub fn requests(&self) -> BTreeMap<String, u64> {
        let text = crate::http_get(&format!("127.0.0.1:{}", self.metrics), "/metrics");
        requests_by_method(&text.unwrap_or_default())
    }

    /// Whether a controller has work queued or in progress (controller-runtime's
    /// `workqueue_depth` and `controller_runtime_active_workers`).
    pub fn busy(&self) -> bool {
        self.metrics().iter().any(|(series, value)| {
            (series.starts_with("workqueue_depth{")
                || series.starts_with("controller_runtime_active_workers{"))
                && *value > 0.0
        })
    }

    fn cpu_seconds(&self) -> f64 {
        self.metrics()
            .get("process_cpu_seconds_total")
            .copied()
            .unwrap_or(0.0)
    }

    pub fn rss_mib(&self) -> f64 {
        rss_mib(self.metrics)
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
        cpu += self.cpu_seconds();
        for (method, count) in self.requests() {
            *requests.entry(method).or_insert(0) += count;
        }
        (cpu, requests)
    }
}

fn spawn(launch: &Launch, kubeconfig: &Path, log: &Path) -> Result<(Child, u16, u16)> {
    let stderr = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    match launch {
        Launch::Ours { binary } => {
            let child = Command::new(binary)
                .args([
                    "run",
                    "--log-format=json",
                    "--log-level=warn,app_operator::manager::server=info",
                    "--metrics-bind-address=127.0.0.1:0",
                    "--health-probe-bind-address=127.0.0.1:0",
                ])
                .arg(format!("--kubeconfig={}", kubeconfig.display()))
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
            let child = Command::new("sh")
                .args(["-c", &format!("exec {line}")])
                .env("KUBECONFIG", kubeconfig)
                .stdout(stderr.try_clone()?)
                .stderr(stderr)
                .spawn()
                .with_context(|| format!("starting {line}"))?;
            Ok((child, metrics, health))
        }
    }
}

/// A port free right now (another process could take it before the operator binds it: the
/// operator then fails to start, which the harness reports).
fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn sample_peak(peak: Arc<Mutex<f64>>, port: u16) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let rss = tokio::task::spawn_blocking(move || rss_mib(port))
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

/// An operator's resident memory, from its metrics endpoint.
fn rss_mib(port: u16) -> f64 {
    if port == 0 {
        return 0.0;
    }
    let text = crate::http_get(&format!("127.0.0.1:{port}"), "/metrics").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("process_resident_memory_bytes "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0.0, |bytes| bytes / 1024.0 / 1024.0)
}
