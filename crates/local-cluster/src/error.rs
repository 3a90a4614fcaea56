use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },

    #[error("`{command}` failed ({status}):\n{output}")]
    Command {
        command: String,
        status: std::process::ExitStatus,
        output: String,
    },

    #[error("could not run `{command}`: {source} (is it installed and on PATH?)")]
    Spawn {
        command: String,
        source: std::io::Error,
    },

    /// A tool the build needs is missing or too old: one line saying which, and how to get it.
    #[error("{0}")]
    Prerequisite(String),

    #[error("generating certificates: {0}")]
    Certificate(#[from] rcgen::Error),

    #[error(
        "a local control plane is already running (state in {state_dir}); nothing was changed.\n\
         Use it with: export KUBECONFIG={kubeconfig}\n\
         Stop it with: make cluster-down"
    )]
    AlreadyRunning {
        state_dir: PathBuf,
        kubeconfig: PathBuf,
    },

    #[error("{component} exited ({status}) while starting; last lines of {log}:\n{tail}")]
    ComponentExited {
        component: String,
        status: std::process::ExitStatus,
        log: PathBuf,
        tail: String,
    },

    #[error("timed out after {seconds}s waiting for {what}; logs are in {logs}")]
    Timeout {
        what: String,
        seconds: u64,
        logs: PathBuf,
    },

    #[error("{what}: {source}")]
    Kube {
        what: &'static str,
        source: kube::Error,
    },

    #[error("{0}")]
    Invalid(String),

    #[error("building the image {what}: {source}")]
    OciSpec {
        what: &'static str,
        source: oci_spec::OciSpecError,
    },

    #[error("encoding the image {what}: {source}")]
    Json {
        what: &'static str,
        source: serde_json::Error,
    },
}

impl Error {
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Error::Io {
            action,
            path,
            source,
        }
    }
}
