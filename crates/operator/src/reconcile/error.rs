use strum::IntoStaticStr;

/// The status cause the NamespaceLifecycle admission plugin gives when it refuses to create an
/// object in a terminating namespace.
const NAMESPACE_TERMINATING_CAUSE: &str = "NamespaceTerminating";

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

    /// Whether the API server refused the request because the object's namespace is being
    /// deleted (client-go's `HasStatusCause(err, NamespaceTerminatingCause)`). Nothing can be
    /// created there any more, and the object itself is about to go, so retrying is pointless.
    pub fn is_namespace_terminating(&self) -> bool {
        let source = match self {
            Error::Get { source, .. }
            | Error::Apply { source, .. }
            | Error::Delete { source, .. }
            | Error::CreatePod { source }
            | Error::Status { source } => source,
            Error::Conflict { .. } | Error::Encode(_) | Error::MissingMetadata(_) => return false,
        };
        let kube::Error::Api(status) = source else {
            return false;
        };
        status.details.as_ref().is_some_and(|details| {
            details
                .causes
                .iter()
                .any(|cause| cause.reason == NAMESPACE_TERMINATING_CAUSE)
        })
    }

    /// A bounded label for metrics (the variant name, never the message).
    pub fn metric_label(&self) -> &'static str {
        self.into()
    }
}

#[cfg(test)]
mod tests {
    use kube::core::Status;

    use super::Error;

    /// An apply refused the way the NamespaceLifecycle admission plugin refuses it, with `cause`.
    fn apply_refused(cause: &str) -> Error {
        let status: Status = serde_json::from_value(serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 403,
            "reason": "Forbidden",
            "message": "deployments.apps \"web\" is forbidden: unable to create new content in namespace demo because it is being terminated",
            "details": { "name": "web", "group": "apps", "kind": "deployments",
                         "causes": [{ "reason": cause, "message": "namespace demo is being terminated" }] }
        }))
        .expect("a Status");
        Error::Apply {
            kind: "Deployment".into(),
            name: "web".into(),
            source: kube::Error::Api(status.boxed()),
        }
    }

    #[test]
    fn only_the_namespace_terminating_cause_is_namespace_terminating() {
        assert!(apply_refused("NamespaceTerminating").is_namespace_terminating());
        assert!(!apply_refused("FieldValueForbidden").is_namespace_terminating());
        let conflict = Error::Conflict {
            kind: "Service".into(),
            name: "web".into(),
        };
        assert!(!conflict.is_namespace_terminating());
    }
}
