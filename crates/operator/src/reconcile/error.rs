use strum::IntoStaticStr;

/// Why a reconcile failed. Each variant names what failed on which object; `reason()` is the
/// CamelCase condition reason and event reason, and the variant name is a bounded metric label.
#[derive(Debug, thiserror::Error, IntoStaticStr)]
pub enum Error {
    #[error(
        "{kind} {name} already exists and is not controlled by this resource; it is left alone (delete or rename it to let the operator manage it)"
    )]
    Conflict { kind: String, name: String },

    #[error("reading {kind} {name}: {source}")]
    Get {
        kind: String,
        name: String,
        source: kube::Error,
    },

    #[error("applying {kind} {name}: {source}")]
    Apply {
        kind: String,
        name: String,
        source: kube::Error,
    },

    #[error("deleting {kind} {name}: {source}")]
    Delete {
        kind: String,
        name: String,
        source: kube::Error,
    },

    #[error("creating a Pod: {source}")]
    CreatePod { source: kube::Error },

    #[error("writing status: {source}")]
    Status { source: kube::Error },

    #[error("encoding a child object: {0}")]
    Encode(#[source] serde_json::Error),

    #[error("the object has no {0} (the API server always sets it)")]
    MissingMetadata(&'static str),
}

impl Error {
    /// The condition/event reason (CamelCase, as the API conventions ask).
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Conflict { .. } => "ChildConflict",
            Error::Get { .. } => "ReadFailed",
            Error::Apply { .. } => "ApplyFailed",
            Error::Delete { .. } => "DeleteFailed",
            Error::CreatePod { .. } => "PodCreateFailed",
            Error::Status { .. } => "StatusUpdateFailed",
            Error::Encode(_) => "EncodeFailed",
            Error::MissingMetadata(_) => "InvalidObject",
        }
    }

    /// A bounded label for metrics (the variant name, never the message).
    pub fn metric_label(&self) -> &'static str {
        self.into()
    }
}
