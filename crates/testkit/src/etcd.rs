//! Real etcd processes (the pinned `etcd` binary) for tests.
//!
//! Each member listens on a loopback address of its own, `127.a.b.c` (all of 127/8 is local on
//! Linux), on the standard ports, so member URLs look like a real cluster's and tests running at
//! the same time never share one. [`EtcdProcess`] is the bare process (any arguments, a data dir,
//! a log), for runners that take their arguments from elsewhere, such as a Pod's command line;
//! [`EtcdMember`] adds the usual flags, a scratch directory and the addresses.

use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub const CLIENT_PORT: u16 = 2379;
pub const PEER_PORT: u16 = 2380;

/// How long a member may take to serve clients; generous, for a loaded machine.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The pinned etcd binary.
pub fn etcd_binary() -> PathBuf {
    crate::tools().bin("etcd")
}

pub fn client_url(address: Ipv4Addr) -> String {
    format!("http://{address}:{CLIENT_PORT}")
}

pub fn peer_url(address: Ipv4Addr) -> String {
    format!("http://{address}:{PEER_PORT}")
}

/// A loopback address whose client and peer ports are free, never handed out twice in this
/// process. Addresses come from a block of 254 chosen by the process id (`127.a.b.1-254`), so
/// test binaries running at the same time pick from different blocks; the ports are checked by
/// binding them, in case another process uses the address anyway.
pub fn free_address() -> Ipv4Addr {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    // (a, b) pairs with a in 1..=254: 127.0.x.x is left to everything else that uses loopback.
    const BLOCKS: u32 = 254 * 256;
    let pid = std::process::id();
    for _ in 0..1000 {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let block = pid.wrapping_add(n / 254) % BLOCKS;
        let octet = |value: u32| u8::try_from(value).unwrap_or(u8::MAX);
        let address = Ipv4Addr::new(
            127,
            octet(1 + block / 256),
            octet(block % 256),
            octet(1 + n % 254),
        );
        let free = |port| TcpListener::bind(SocketAddrV4::new(address, port)).is_ok();
        if free(CLIENT_PORT) && free(PEER_PORT) {
            return address;
        }
    }
    panic!("found no loopback address with ports {CLIENT_PORT} and {PEER_PORT} free");
}

/// A running etcd process, killed when dropped.
pub struct EtcdProcess {
    child: Child,
    log: PathBuf,
}

impl EtcdProcess {
    /// Starts `etcd --data-dir=<data_dir> <args>`, its output going to `log`. Returns at once.
    pub fn spawn(args: Vec<String>, data_dir: &Path, log: &Path) -> EtcdProcess {
        let binary = etcd_binary();
        Self::spawn_binary(&binary, args, data_dir, log)
            .unwrap_or_else(|e| panic!("starting {}: {e}", binary.display()))
    }

    /// [`EtcdProcess::spawn`] with another etcd binary (another release, for upgrades); an error
    /// instead of a failed test, for the member runner that `make run` uses too.
    pub fn spawn_binary(
        binary: &Path,
        args: Vec<String>,
        data_dir: &Path,
        log: &Path,
    ) -> std::io::Result<EtcdProcess> {
        let out = File::create(log)?;
        let err = out.try_clone()?;
        let child = Command::new(binary)
            .arg(format!("--data-dir={}", data_dir.display()))
            .args(&args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()?;
        Ok(EtcdProcess {
            child,
            log: log.to_owned(),
        })
    }

    pub fn pid(&self) -> Pid {
        Pid::from_raw(i32::try_from(self.child.id()).unwrap_or(i32::MAX))
    }

    pub fn log(&self) -> &Path {
        &self.log
    }

    /// The last lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log, lines)
    }

    /// The exit status, if the process has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Waits until etcd answers HTTP on `client` (it accepts connections before it serves: a
    /// member of a new cluster serves once a quorum has started). Fails the test with the tail of
    /// the log if the process exits first or `timeout` passes.
    pub async fn wait_serving(&mut self, client: SocketAddr, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exited() {
                panic!(
                    "etcd ({}) exited with {status} before serving on {client}; its log ends with:\n{}",
                    self.log.display(),
                    self.log_tail(30)
                );
            }
            if http_get(client, "/version").await.is_some() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "etcd did not serve on {client} within {timeout:?}; its log ({}) ends with:\n{}",
                self.log.display(),
                self.log_tail(30)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// SIGKILL, and reaps it.
    pub fn kill(&mut self) {
        if self.exited().is_none() {
            let _ = kill(self.pid(), Signal::SIGKILL);
        }
        let _ = self.child.wait();
    }

    /// SIGTERM, and waits for it to exit (SIGKILL after 30 s).
    pub fn stop(&mut self) -> std::io::Result<ExitStatus> {
        if self.exited().is_none() {
            let _ = kill(self.pid(), Signal::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some(status) = self.exited() {
                return Ok(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = kill(self.pid(), Signal::SIGKILL);
        self.child.wait()
    }

    /// SIGSTOP: the process keeps its ports (connections are accepted by the kernel) but answers
    /// nothing, like a hung member. Returns once every thread has stopped: the signal reaches a
    /// thread running on the other CPU some time after `kill` returns, and on a loaded VM that
    /// thread answered a request sent after it (CI, 2026-12-06: a member read "hung" listed
    /// its members).
    pub fn pause(&self) {
        let _ = kill(self.pid(), Signal::SIGSTOP);
        let deadline = Instant::now() + Duration::from_secs(5);
        while !every_thread_stopped(self.pid()) {
            assert!(
                Instant::now() < deadline,
                "etcd ({}) did not stop within 5 s of SIGSTOP",
                self.pid()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// SIGCONT after [`EtcdProcess::pause`].
    pub fn resume(&self) {
        let _ = kill(self.pid(), Signal::SIGCONT);
    }
}

/// Whether every thread of `pid` is stopped (state `T` in its `/proc/<pid>/task/<tid>/stat`); a
/// process that is gone has nothing left running.
fn every_thread_stopped(pid: Pid) -> bool {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return true;
    };
    tasks.flatten().all(|task| {
        fs::read_to_string(task.path().join("stat")).map_or(true, |stat| {
            // `tid (comm) state …`: the name may hold spaces, so the state follows the last `)`.
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                == Some("T")
        })
    })
}

impl Drop for EtcdProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Whether the member starts a new cluster or joins an existing one (after a member-add).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterState {
    New,
    Existing,
}

/// How to start one member with the standard flags.
#[derive(Debug, Clone)]
pub struct MemberSpec {
    pub name: String,
    pub address: Ipv4Addr,
    /// `name=peer-url,…` of every member, this one included.
    pub initial_cluster: String,
    pub state: ClusterState,
    pub token: String,
}

impl MemberSpec {
    /// The flags of a member listening on its own address, without `--data-dir`.
    pub fn args(&self) -> Vec<String> {
        let state = match self.state {
            ClusterState::New => "new",
            ClusterState::Existing => "existing",
        };
        vec![
            format!("--name={}", self.name),
            format!("--initial-advertise-peer-urls={}", peer_url(self.address)),
            format!("--listen-peer-urls={}", peer_url(self.address)),
            format!("--listen-client-urls={}", client_url(self.address)),
            format!("--advertise-client-urls={}", client_url(self.address)),
            format!("--initial-cluster={}", self.initial_cluster),
            format!("--initial-cluster-state={state}"),
            format!("--initial-cluster-token={}", self.token),
            // Test data is thrown away; skipping fsync keeps a loaded disk from stalling raft.
            "--unsafe-no-fsync".to_owned(),
        ]
    }
}

/// `name=peer-url,…` for `--initial-cluster`.
pub fn initial_cluster<'a>(members: impl IntoIterator<Item = (&'a str, Ipv4Addr)>) -> String {
    members
        .into_iter()
        .map(|(name, address)| format!("{name}={}", peer_url(address)))
        .collect::<Vec<_>>()
        .join(",")
}

/// A token of its own for each cluster: etcd derives member IDs from it and the peer URLs.
pub fn cluster_token() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "test-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// One etcd member in a scratch directory (data and log), removed when dropped after the process
/// is killed; kept when the test fails, for its log.
pub struct EtcdMember {
    pub name: String,
    pub address: Ipv4Addr,
    process: EtcdProcess,
    dir: PathBuf,
}

impl EtcdMember {
    /// Starts the member's process; returns at once (members of a new cluster serve only once a
    /// quorum of them has started, see [`EtcdMember::wait_serving`]).
    pub fn spawn(spec: &MemberSpec) -> EtcdMember {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join("app-operator-etcd").join(format!(
            "{}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed),
            spec.name
        ));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        let process = EtcdProcess::spawn(spec.args(), &dir.join("data"), &dir.join("etcd.log"));
        EtcdMember {
            name: spec.name.clone(),
            address: spec.address,
            process,
            dir,
        }
    }

    /// Starts the member and waits until it serves.
    pub async fn start(spec: &MemberSpec) -> EtcdMember {
        let mut member = EtcdMember::spawn(spec);
        member.wait_serving().await;
        member
    }

    /// Starts a member that joins the cluster of `existing` after a member-add of its peer URL.
    pub async fn join(name: &str, address: Ipv4Addr, existing: &[&EtcdMember]) -> EtcdMember {
        let members = existing
            .iter()
            .map(|m| (m.name.as_str(), m.address))
            .chain([(name, address)]);
        let spec = MemberSpec {
            name: name.to_owned(),
            address,
            initial_cluster: initial_cluster(members),
            state: ClusterState::Existing,
            // Ignored when joining an existing cluster.
            token: cluster_token(),
        };
        EtcdMember::start(&spec).await
    }

    pub async fn wait_serving(&mut self) {
        let client = SocketAddr::V4(SocketAddrV4::new(self.address, CLIENT_PORT));
        self.process.wait_serving(client, START_TIMEOUT).await;
    }

    pub fn client_url(&self) -> String {
        client_url(self.address)
    }

    pub fn peer_url(&self) -> String {
        peer_url(self.address)
    }

    pub fn client_address(&self) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(self.address, CLIENT_PORT))
    }

    pub fn process(&mut self) -> &mut EtcdProcess {
        &mut self.process
    }

    pub fn kill(&mut self) {
        self.process.kill();
    }
}

impl Drop for EtcdMember {
    fn drop(&mut self) {
        self.process.kill();
        if std::thread::panicking() {
            eprintln!(
                "etcd member {} kept its files: {}",
                self.name,
                self.dir.display()
            );
        } else {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// A new cluster of `size` members named `m0`, `m1`, …, each serving.
pub async fn start_cluster(size: usize) -> Vec<EtcdMember> {
    let names: Vec<String> = (0..size).map(|i| format!("m{i}")).collect();
    let addresses: Vec<Ipv4Addr> = names.iter().map(|_| free_address()).collect();
    let cluster = initial_cluster(
        names
            .iter()
            .map(String::as_str)
            .zip(addresses.iter().copied()),
    );
    let token = cluster_token();
    // All spawned before any is waited for: none serves before a quorum has started.
    let mut members: Vec<EtcdMember> = names
        .iter()
        .zip(&addresses)
        .map(|(name, address)| {
            EtcdMember::spawn(&MemberSpec {
                name: name.clone(),
                address: *address,
                initial_cluster: cluster.clone(),
                state: ClusterState::New,
                token: token.clone(),
            })
        })
        .collect();
    for member in &mut members {
        member.wait_serving().await;
    }
    members
}

/// A plain HTTP/1.0 `GET` with a 2 s deadline: the status code and body, or `None`.
pub async fn http_get(address: SocketAddr, path: &str) -> Option<(u16, String)> {
    http_request(address, "GET", path, "").await
}

/// A plain HTTP/1.0 request with a JSON `body` (none when empty) and a 2 s deadline: the status
/// code and body, or `None` when nothing answered in time.
pub async fn http_request(
    address: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
) -> Option<(u16, String)> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(address).await.ok()?;
        let request = if body.is_empty() {
            format!("{method} {path} HTTP/1.0\r\nHost: {address}\r\n\r\n")
        } else {
            format!(
                "{method} {path} HTTP/1.0\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
        };
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.ok()?;
        let answer = String::from_utf8_lossy(&answer).into_owned();
        let (head, body) = answer.split_once("\r\n\r\n")?;
        let status = head.split_whitespace().nth(1)?.parse().ok()?;
        Some((status, body.to_owned()))
    };
    tokio::time::timeout(Duration::from_secs(2), exchange)
        .await
        .ok()
        .flatten()
}

/// The last `lines` lines of a log file (reads at most its last 64 KiB).
pub(crate) fn log_tail(path: &Path, lines: usize) -> String {
    let Ok(mut file) = File::open(path) else {
        return String::from("(no log)");
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)));
    let mut bytes = Vec::new();
    let _ = file.read_to_end(&mut bytes);
    // The seek may land inside a UTF-8 sequence.
    let text = String::from_utf8_lossy(&bytes);
    let all: Vec<&str> = text.lines().collect();
    all.get(all.len().saturating_sub(lines)..)
        .unwrap_or_default()
        .join("\n")
}
