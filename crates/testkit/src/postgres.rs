//! Real PostgreSQL servers (Debian's packages, `/usr/lib/postgresql/<major>/bin`) for tests, and
//! running shell scripts the way a Job's container runs them.
//!
//! PostgreSQL refuses to run as root: when the tests run as root, servers, scripts and `psql` run
//! as the `postgres` account (which Debian's packages create), and the directories they write are
//! given to it ([`owned_dir`], [`Scratch`]). Otherwise they run as the tests' own user.
//!
//! Nothing here skips: without the binaries every call fails, saying what to install.

use std::ffi::OsStr;
use std::fs::{self, OpenOptions};
use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::{Pid, Uid, User};

/// Where Debian installs each PostgreSQL major: `<ROOT>/<major>/bin`.
pub const ROOT: &str = "/usr/lib/postgresql";

/// What to do when the binaries are missing.
pub const INSTALL_HINT: &str = "install Debian's PostgreSQL server: \
    `apt-get install --no-install-recommends postgresql` (`make test` does it)";

/// How long a server may take to accept connections, and to shut down.
pub const TIMEOUT: Duration = Duration::from_secs(60);

/// The host the servers listen on (and the only one).
pub const HOST: Ipv4Addr = Ipv4Addr::LOCALHOST;

/// One installed PostgreSQL major: its number and its `bin` directory.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub major: u32,
    pub dir: PathBuf,
}

impl Binaries {
    /// The highest major installed under [`ROOT`] (with a server: `bin/initdb`), if any.
    pub fn find() -> Option<Binaries> {
        fs::read_dir(ROOT)
            .ok()?
            .filter_map(Result::ok)
            .filter_map(|entry| {
                let major = entry.file_name().to_str()?.parse().ok()?;
                let dir = entry.path().join("bin");
                dir.join("initdb")
                    .is_file()
                    .then_some(Binaries { major, dir })
            })
            .max_by_key(|binaries| binaries.major)
    }

    /// [`Binaries::find`], or an error saying what to install.
    pub fn get() -> io::Result<Binaries> {
        Binaries::find().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "no PostgreSQL server binaries ({ROOT}/<major>/bin/initdb): {INSTALL_HINT}"
                ),
            )
        })
    }

    pub fn bin(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The `PATH` of a script: this `bin` directory first (as in the `postgres` image), then the
    /// usual system directories.
    pub fn path(&self) -> String {
        format!(
            "{}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            self.dir.display()
        )
    }
}

/// The account servers and scripts run as: `postgres` when this process is root, else `None`
/// (this process's own user).
fn account() -> io::Result<Option<User>> {
    if !Uid::effective().is_root() {
        return Ok(None);
    }
    match User::from_name("postgres")? {
        Some(user) => Ok(Some(user)),
        None => Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "running as root, but there is no `postgres` account to run PostgreSQL as: {INSTALL_HINT}"
            ),
        )),
    }
}

/// Creates `path` (and its parents) and gives it to the account PostgreSQL runs as.
pub fn owned_dir(path: &Path) -> io::Result<()> {
    fs::create_dir_all(path)?;
    give(path)
}

/// Gives one file or directory to the account PostgreSQL runs as (nothing to do when not root).
fn give(path: &Path) -> io::Result<()> {
    match account()? {
        Some(user) => {
            std::os::unix::fs::chown(path, Some(user.uid.as_raw()), Some(user.gid.as_raw()))
        }
        None => Ok(()),
    }
}

/// `program` with the environment of a Job's container: nothing inherited but `HOME`; `PATH`
/// with the PostgreSQL `bin` directory first; `LANG=C.UTF-8`; stdin from /dev/null; as the
/// account PostgreSQL runs as.
pub fn command(program: impl AsRef<OsStr>) -> io::Result<Command> {
    let binaries = Binaries::get()?;
    let mut command = Command::new(program);
    command
        .env_clear()
        .env("PATH", binaries.path())
        .env("LANG", "C.UTF-8")
        .stdin(Stdio::null());
    match account()? {
        Some(user) => {
            command
                .uid(user.uid.as_raw())
                .gid(user.gid.as_raw())
                .env("HOME", &user.dir)
                .env("USER", &user.name);
        }
        None => {
            if let Some(home) = std::env::var_os("HOME") {
                command.env("HOME", home);
            }
        }
    }
    Ok(command)
}

/// `bash -c <script>` as a Job's container runs it ([`command`]), with `env` added.
pub fn script<I, K, V>(script: &str, env: I) -> io::Result<Command>
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<OsStr>,
    V: AsRef<OsStr>,
{
    let mut command = command("bash")?;
    command.arg("-c").arg(script).envs(env);
    Ok(command)
}

/// Runs [`script`] to its end: its exit status, stdout and stderr.
pub fn run_script<I, K, V>(script_text: &str, env: I) -> io::Result<Output>
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<OsStr>,
    V: AsRef<OsStr>,
{
    script(script_text, env)?.output()
}

/// A process's exit status and output, for assertion messages.
pub fn transcript(output: &Output) -> String {
    format!(
        "{}\n--- stdout ---\n{}--- stderr ---\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// A fresh scratch directory for one test, owned by the account PostgreSQL runs as; removed when
/// dropped, kept (and named on stderr) when the test fails. Drop servers before it.
pub struct Scratch {
    path: PathBuf,
}

impl Scratch {
    /// `<temp>/app-operator-postgres/<pid>-<n>-<name>`: keep `name` short, Unix socket paths
    /// inside it are limited to about 100 bytes.
    pub fn new(name: &str) -> io::Result<Scratch> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let parent = std::env::temp_dir().join("app-operator-postgres");
        fs::create_dir_all(&parent)?;
        // Whatever the umask: the postgres account must reach its directories inside. (Made by
        // another user, it is theirs to set; a directory it cannot reach fails later, clearly.)
        let _ = fs::set_permissions(&parent, fs::Permissions::from_mode(0o755));
        let path = parent.join(format!(
            "{}-{}-{name}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        if path.exists() {
            fs::remove_dir_all(&path)?;
        }
        owned_dir(&path)?;
        Ok(Scratch { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A new directory `name` inside, owned by the account PostgreSQL runs as.
    pub fn dir(&self, name: &str) -> io::Result<PathBuf> {
        let path = self.path.join(name);
        owned_dir(&path)?;
        Ok(path)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("PostgreSQL scratch directory kept: {}", self.path.display());
        } else {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}

/// A PostgreSQL server of its own: data in `<dir>/pgdata` (where SampleDB's Jobs put `PGDATA`
/// below the volume, here `<dir>`), its Unix socket in `<dir>/sockets`, its log in
/// `<dir>/postgres.log`, listening on [`HOST`] at a free port; every connection authenticates with
/// a password (scram-sha-256). Stopped when dropped; the files stay.
pub struct PostgresServer {
    binaries: Binaries,
    data: PathBuf,
    sockets: PathBuf,
    log: PathBuf,
    user: String,
    password: String,
    port: u16,
    process: Option<Child>,
}

impl PostgresServer {
    /// [`PostgresServer::create`] and [`PostgresServer::start`].
    pub fn new(dir: &Path, user: &str, password: &str) -> io::Result<PostgresServer> {
        let mut server = PostgresServer::create(dir, user, password)?;
        server.start()?;
        Ok(server)
    }

    /// Creates the data directory (`initdb`, superuser `user` with `password`), not started.
    pub fn create(dir: &Path, user: &str, password: &str) -> io::Result<PostgresServer> {
        let server = PostgresServer::existing(dir, user, password)?;
        let pwfile = dir.join("pwfile");
        fs::write(&pwfile, format!("{password}\n"))?;
        give(&pwfile)?;
        let output = command(server.binaries.bin("initdb"))?
            .arg("--pgdata")
            .arg(&server.data)
            .args(["--username", user, "--auth=scram-sha-256", "--no-sync"])
            .arg(format!("--pwfile={}", pwfile.display()))
            .output();
        fs::remove_file(&pwfile)?;
        let output = output?;
        if !output.status.success() {
            return Err(io::Error::other(format!(
                "initdb of {} failed: {}",
                server.data.display(),
                transcript(&output)
            )));
        }
        Ok(server)
    }

    /// A server for the data directory that is (or will be) in `<dir>/pgdata`, not started.
    pub fn existing(dir: &Path, user: &str, password: &str) -> io::Result<PostgresServer> {
        owned_dir(dir)?;
        let sockets = dir.join("sockets");
        owned_dir(&sockets)?;
        let port = TcpListener::bind((HOST, 0))?.local_addr()?.port();
        Ok(PostgresServer {
            binaries: Binaries::get()?,
            data: dir.join("pgdata"),
            sockets,
            log: dir.join("postgres.log"),
            user: user.to_owned(),
            password: password.to_owned(),
            port,
            process: None,
        })
    }

    /// Starts the server and waits until it accepts connections (an error with the end of its
    /// log if it exits first or [`TIMEOUT`] passes).
    pub fn start(&mut self) -> io::Result<()> {
        if self.process.is_some() {
            return Ok(());
        }
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let child = command(self.binaries.bin("postgres"))?
            .arg("-D")
            .arg(&self.data)
            .arg("-k")
            .arg(&self.sockets)
            .args(["-p", &self.port.to_string()])
            .args(["-c", &format!("listen_addresses={HOST}")])
            // Test data is thrown away.
            .args(["-c", "fsync=off"])
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        self.process = Some(child);
        self.wait_ready()
    }

    fn wait_ready(&mut self) -> io::Result<()> {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Some(status) = self.exited() {
                self.process = None;
                return Err(
                    self.failure(&format!("exited ({status}) before accepting connections"))
                );
            }
            let ready = command(self.binaries.bin("pg_isready"))?
                .args([
                    "--quiet",
                    "--host",
                    &HOST.to_string(),
                    "--port",
                    &self.port.to_string(),
                ])
                .status()?;
            if ready.success() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(self.failure(&format!("did not accept connections within {TIMEOUT:?}")));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The server's exit status, if it was started and has exited.
    fn exited(&mut self) -> Option<ExitStatus> {
        self.process.as_mut()?.try_wait().ok().flatten()
    }

    pub fn is_running(&mut self) -> bool {
        self.process.is_some() && self.exited().is_none()
    }

    /// A fast shutdown (SIGINT: sessions are ended, a checkpoint written), waiting for it to end;
    /// SIGKILL and an error after [`TIMEOUT`].
    pub fn stop(&mut self) -> io::Result<()> {
        let Some(mut child) = self.process.take() else {
            return Ok(());
        };
        let pid = Pid::from_raw(i32::try_from(child.id()).unwrap_or(i32::MAX));
        let _ = kill(pid, Signal::SIGINT);
        let deadline = Instant::now() + TIMEOUT;
        while Instant::now() < deadline {
            if let Some(status) = child.try_wait()? {
                return if status.success() {
                    Ok(())
                } else {
                    Err(self.failure(&format!("exited with {status} when stopped")))
                };
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        Err(self.failure(&format!("did not stop within {TIMEOUT:?}; killed it")))
    }

    fn failure(&self, what: &str) -> io::Error {
        io::Error::other(format!(
            "PostgreSQL on {} {what}; its log ({}) ends with:\n{}",
            self.data.display(),
            self.log.display(),
            self.log_tail(30)
        ))
    }

    /// The last `lines` lines of the server's log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_else(|e| format!("(no log: {e})"));
        let all: Vec<&str> = text.lines().collect();
        all.iter()
            .skip(all.len().saturating_sub(lines))
            .copied()
            .collect::<Vec<_>>()
            .join("\n")
    }

    pub fn data_dir(&self) -> &Path {
        &self.data
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn user(&self) -> &str {
        &self.user
    }

    pub fn password(&self) -> &str {
        &self.password
    }

    /// libpq's connection variables for `database` over TCP: `PGHOST`, `PGPORT`, `PGUSER`,
    /// `PGPASSWORD`, `PGDATABASE`.
    pub fn env(&self, database: &str) -> Vec<(String, String)> {
        [
            ("PGHOST", HOST.to_string()),
            ("PGPORT", self.port.to_string()),
            ("PGUSER", self.user.clone()),
            ("PGPASSWORD", self.password.clone()),
            ("PGDATABASE", database.to_owned()),
        ]
        .into_iter()
        .map(|(name, value)| (name.to_owned(), value))
        .collect()
    }

    /// Runs `sql` in `database` with `psql` over TCP (stops at the first error): the rows, one a
    /// line, columns separated by `|`; an error with psql's stderr if it fails.
    pub fn psql(&self, database: &str, sql: &str) -> io::Result<String> {
        self.psql_with(database, &self.password, sql)
    }

    /// [`PostgresServer::psql`] with another password (to see that a wrong one is refused).
    pub fn psql_with(&self, database: &str, password: &str, sql: &str) -> io::Result<String> {
        let output = command(self.binaries.bin("psql"))?
            .args([
                "-X",
                "-w",
                "-q",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-c",
                sql,
            ])
            .envs(self.env(database))
            .env("PGPASSWORD", password)
            .output()?;
        if !output.status.success() {
            return Err(io::Error::other(format!(
                "psql -c {sql:?} in database {database} failed: {}",
                transcript(&output)
            )));
        }
        Ok(String::from_utf8_lossy(&output.stdout)
            .trim_end()
            .to_owned())
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}
