//! The operator as its own process (`app-operator run`), for tests of what only a process has:
//! flags, probes, metrics, signals, leader election.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use app_operator::manager::served_port;
use testkit::eventually;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::TIMEOUT;

/// A running `app-operator run`, killed when dropped.
pub struct OperatorProcess {
    child: Child,
    pub health: u16,
    pub metrics: u16,
    log: PathBuf,
}

impl OperatorProcess {
    /// Starts the operator with both servers on port 0 and reads the ports it bound from its log
    /// (ports picked by the test could be handed to two processes at once).
    pub fn spawn(kubeconfig: &Path, args: &[&str]) -> OperatorProcess {
        OperatorProcess::spawn_with_env(kubeconfig, args, &[])
    }

    /// [`OperatorProcess::spawn`] with `env` set, e.g. `POD_NAME` for a replica that plays a Pod.
    pub fn spawn_with_env(
        kubeconfig: &Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> OperatorProcess {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let dir = std::env::temp_dir().join("app-operator-tests");
        std::fs::create_dir_all(&dir).unwrap();
        let sequence = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let log = dir.join(format!("operator-{}-{sequence}.log", std::process::id()));
        let child = Command::new(env!("CARGO_BIN_EXE_app-operator"))
            .arg("run")
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg("--health-probe-bind-address=127.0.0.1:0")
            .arg("--metrics-bind-address=127.0.0.1:0")
            .arg("--log-format=json")
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        // The guard first: if the ports never show up, dropping it still kills and reaps.
        let mut process = OperatorProcess {
            child,
            health: 0,
            metrics: 0,
            log,
        };
        let port = |log: &Path, server: &str| -> Option<u16> {
            served_port(&std::fs::read_to_string(log).ok()?, server)
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let (Some(health), Some(metrics)) = (
                port(&process.log, "health probes"),
                port(&process.log, "metrics"),
            ) {
                (process.health, process.metrics) = (health, metrics);
                return process;
            }
            assert!(
                Instant::now() < deadline,
                "the operator did not log its ports:\n{}",
                process.log()
            );
            // Between reads of the log, under the deadline above.
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit status, if the process has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().unwrap()
    }

    /// Waits for the process to exit (after a signal sent by the test).
    pub fn wait(&mut self) -> std::process::ExitStatus {
        self.child.wait().unwrap()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The value of the metric line starting with `series` (name and labels), if present.
    pub async fn metric(&self, series: &str) -> Option<f64> {
        let (_, body) = get(self.metrics, "/metrics").await?;
        body.lines()
            .find(|l| l.starts_with(series))
            .and_then(|l| l.rsplit(' ').next()?.parse().ok())
    }

    /// Waits until `/readyz` answers 200.
    pub async fn ready(&self) {
        eventually(TIMEOUT, "/readyz 200", || async {
            (get(self.health, "/readyz").await?.0 == 200).then_some(())
        })
        .await;
    }
}

impl Drop for OperatorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A plain HTTP/1.0 GET on localhost: (status code, body).
pub async fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let code = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Some((code, body))
}
