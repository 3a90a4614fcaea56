//! The control plane's processes: started in their own process group with a log file and a pid
//! file each, so a later `cluster-down` (another process) can find and stop exactly them.

use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::Pid;

use crate::error::Error;

/// A component to start: its name (for logs and pid files), program and arguments.
pub struct Spec {
    pub name: String,
    pub program: PathBuf,
    pub args: Vec<String>,
}

/// A started component, still our child.
pub struct Started {
    pub name: String,
    pub child: Child,
    pub log: PathBuf,
}

impl Started {
    /// Fails with the tail of the component's log if it has exited.
    pub fn check_alive(&mut self) -> Result<(), Error> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(Error::ComponentExited {
                component: self.name.clone(),
                status,
                tail: log_tail(&self.log, 30),
                log: self.log.clone(),
            }),
            Err(source) => Err(Error::Io {
                action: "waiting for",
                path: self.log.clone(),
                source,
            }),
        }
    }
}

/// Starts `spec`, its output appended to `<logs>/<name>.log` (a restarted component keeps its
/// earlier log), and records it in `<pids>/<name>.pid`: the pid, the program, then each argument
/// on its own line, so the same process can be started again.
pub fn start(spec: Spec, logs: &Path, pids: &Path) -> Result<Started, Error> {
    let log = logs.join(format!("{}.log", spec.name));
    let out = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .map_err(Error::io("creating", &log))?;
    let err = out.try_clone().map_err(Error::io("opening", &log))?;
    let child = Command::new(&spec.program)
        .args(&spec.args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        // Its own process group: a Ctrl-C in the terminal that ran `cluster-up` does not reach it.
        .process_group(0)
        .spawn()
        .map_err(|source| Error::Spawn {
            command: spec.program.display().to_string(),
            source,
        })?;
    let pid_file = pids.join(format!("{}.pid", spec.name));
    let record: String = [child.id().to_string(), spec.program.display().to_string()]
        .into_iter()
        .chain(spec.args)
        .map(|line| format!("{line}\n"))
        .collect();
    fs::write(&pid_file, record).map_err(Error::io("writing", &pid_file))?;
    Ok(Started {
        name: spec.name,
        child,
        log,
    })
}

/// A process recorded in a pid file.
#[derive(Debug)]
pub struct Recorded {
    pub name: String,
    pub pid: i32,
    pub program: PathBuf,
    pub args: Vec<String>,
}

impl Recorded {
    /// True while the pid still runs the recorded program (not a zombie, not a reused pid).
    pub fn is_running(&self) -> bool {
        fs::read_link(format!("/proc/{}/exe", self.pid)).is_ok_and(|exe| exe == self.program)
    }

    /// SIGTERM, then SIGKILL if it has not gone after `grace`.
    pub fn stop(&self, grace: Duration) {
        self.signal_until_gone(Signal::SIGTERM, grace);
    }

    /// SIGKILL at once, as a crash or a lost machine would.
    pub fn kill(&self) {
        self.signal_until_gone(Signal::SIGKILL, Duration::ZERO);
    }

    /// The spec it was started with, to start it again.
    pub fn spec(&self) -> Spec {
        Spec {
            name: self.name.clone(),
            program: self.program.clone(),
            args: self.args.clone(),
        }
    }

    /// Sends `first`, then SIGKILL if it has not gone after `grace`, and waits until it has.
    fn signal_until_gone(&self, first: Signal, grace: Duration) {
        if !self.is_running() {
            return;
        }
        let pid = Pid::from_raw(self.pid);
        let _ = kill(pid, first);
        let deadline = Instant::now() + grace;
        while self.is_running() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if self.is_running() {
            let _ = kill(pid, Signal::SIGKILL);
            while self.is_running() {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        // Gone for good: reap it if it is our child (a no-op otherwise), and give whoever
        // adopted it (init) a moment to, so no zombie entry is left behind.
        let deadline = Instant::now() + Duration::from_secs(10);
        while Path::new(&format!("/proc/{}", self.pid)).exists() && Instant::now() < deadline {
            let _ = waitpid(pid, Some(WaitPidFlag::WNOHANG));
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Every process recorded under `pids`, in the order they were started.
pub fn recorded(pids: &Path) -> Vec<Recorded> {
    let Ok(entries) = fs::read_dir(pids) else {
        return Vec::new();
    };
    let mut found: Vec<(std::time::SystemTime, Recorded)> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let text = fs::read_to_string(entry.path()).ok()?;
            let mut lines = text.lines();
            let pid = lines.next()?.trim().parse().ok()?;
            let program = PathBuf::from(lines.next()?.trim());
            let args = lines.map(str::to_owned).collect();
            let name = entry.path().file_stem()?.to_string_lossy().into_owned();
            let modified = entry.metadata().and_then(|m| m.modified()).ok()?;
            Some((
                modified,
                Recorded {
                    name,
                    pid,
                    program,
                    args,
                },
            ))
        })
        .collect();
    found.sort_by_key(|(modified, _)| *modified);
    found.into_iter().map(|(_, recorded)| recorded).collect()
}

/// The last `lines` lines of a log file (reads at most the last 64 KiB).
pub fn log_tail(path: &Path, lines: usize) -> String {
    let Ok(mut file) = File::open(path) else {
        return String::from("(no log)");
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)));
    let mut text = String::new();
    let _ = file.read_to_string(&mut text);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Runs `command` to its end; its standard output, or an error with its standard error.
pub fn run(command: &mut Command) -> Result<String, Error> {
    run_with_input(command, "")
}

/// Runs `command` with `input` on its standard input; its standard output, or an error with its
/// standard error.
pub fn run_with_input(command: &mut Command, input: &str) -> Result<String, Error> {
    use std::io::Write;
    let line = format!(
        "{} {}",
        command.get_program().to_string_lossy(),
        command
            .get_args()
            .map(|arg| arg.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ")
    );
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| Error::Spawn {
            command: line.clone(),
            source,
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(input.as_bytes())
            .map_err(Error::io("writing to", command.get_program()))?;
    }
    let output = child
        .wait_with_output()
        .map_err(Error::io("waiting for", command.get_program()))?;
    if !output.status.success() {
        // Long logs (mmdebstrap's) say what went wrong at their end.
        let stderr = String::from_utf8_lossy(&output.stderr);
        let lines: Vec<&str> = stderr.lines().collect();
        let tail = lines
            .get(lines.len().saturating_sub(40)..)
            .unwrap_or_default();
        return Err(Error::Command {
            command: line,
            status: output.status,
            output: tail.join("\n"),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}
