use strum::IntoStaticStr;

use crate::mutation::{self, Mutation};

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

    #[error("reading {kind} {name}: {}", api_message(source))]
    Get {
        kind: String,
        name: String,
        source: kube::Error,
    },

    #[error("applying {kind} {name}: {}", api_message(source))]
    Apply {
        kind: String,
        name: String,
        source: kube::Error,
    },

    #[error("deleting {kind} {name}: {}", api_message(source))]
    Delete {
        kind: String,
        name: String,
        source: kube::Error,
    },

    #[error("creating a Pod: {}", api_message(source))]
    CreatePod { source: kube::Error },

    #[error("creating {kind} {name}: {}", api_message(source))]
    Create {
        kind: String,
        name: String,
        source: kube::Error,
    },

    /// An etcd cluster refused or did not answer a call; etcd's own words are in `source`.
    #[error("etcd: {action}: {source}")]
    Etcd {
        action: &'static str,
        source: crate::etcd::EtcdError,
    },

    /// The spec holds a value the schema should have refused (it was stored under an older one).
    #[error("{field}: {message}")]
    InvalidSpec {
        field: &'static str,
        message: String,
    },

    #[error("writing status: {}", api_message(source))]
    Status { source: kube::Error },

    #[error("updating the finalizers: {}", api_message(source))]
    Finalizer { source: kube::Error },

    #[error(
        "{kind} {name} cannot be changed in place ({message}); it is left as it is until the change is undone"
    )]
    ImmutableFieldChanged {
        kind: String,
        name: String,
        message: String,
    },

    /// A deletion's cleanup cannot go on until a person acts; `message` says how to unblock it.
    #[error("{message}")]
    CleanupBlocked {
        reason: &'static str,
        message: String,
    },

    /// Something another object must provide first is missing (the cluster to back up, a
    /// quorum, a claim, a snapshot to restore); looked at again with backoff.
    #[error("{message}")]
    Waiting {
        reason: &'static str,
        message: String,
    },

    /// The operating system gave no random bytes (for a generated password); retried.
    #[error("the system's random number generator failed")]
    Random,

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
            Error::Create { .. } => "CreateFailed",
            Error::Etcd { .. } => "EtcdCallFailed",
            Error::InvalidSpec { .. } => "InvalidSpec",
            Error::Status { .. } => "StatusUpdateFailed",
            Error::Encode(_) => "EncodeFailed",
            Error::Random => "RandomFailed",
            Error::MissingMetadata(_) => "InvalidObject",
            Error::Finalizer { .. } => "FinalizerUpdateFailed",
            Error::CleanupBlocked { reason, .. } | Error::Waiting { reason, .. } => reason,
            Error::ImmutableFieldChanged { .. } => "ImmutableFieldChanged",
        }
    }

    /// The API server's refusal, if that is what this error is.
    fn api_status(&self) -> Option<&kube::core::Status> {
        let source = match self {
            Error::Get { source, .. }
            | Error::Apply { source, .. }
            | Error::Delete { source, .. }
            | Error::CreatePod { source }
            | Error::Create { source, .. }
            | Error::Status { source }
            | Error::Finalizer { source } => source,
            Error::Conflict { .. }
            | Error::Etcd { .. }
            | Error::InvalidSpec { .. }
            | Error::Encode(_)
            | Error::Random
            | Error::MissingMetadata(_)
            | Error::CleanupBlocked { .. }
            | Error::Waiting { .. }
            | Error::ImmutableFieldChanged { .. } => return None,
        };
        match source {
            kube::Error::Api(status) => Some(status),
            _ => None,
        }
    }

    /// Whether retrying cannot help until the object changes: the API server refused what was
    /// sent as invalid (400, 422: a name or value the child kind does not accept, a changed
    /// immutable field), or a person must act. Everything else (409, 429, 5xx, timeouts, a
    /// foreign object in the way) is transient and retried with backoff.
    pub fn is_permanent(&self) -> bool {
        match self {
            Error::Encode(_)
            | Error::MissingMetadata(_)
            | Error::InvalidSpec { .. }
            | Error::CleanupBlocked { .. }
            | Error::ImmutableFieldChanged { .. } => true,
            _ => self.api_status().is_some_and(|status| {
                matches!(status.code, 400 | 422)
                    || (status.code == 429 && mutation::active(Mutation::ThrottledIsPermanent))
            }),
        }
    }

    /// Whether the API server refused a change of an immutable field (a Job's template, a
    /// StatefulSet's volumeClaimTemplates, an immutable ConfigMap's data).
    pub fn is_immutable_field(&self) -> bool {
        self.api_status().is_some_and(|status| {
            status.code == 422
                && (status.message.contains("field is immutable")
                    || status.message.contains("Forbidden: updates to"))
        })
    }

    /// Whether the API server refused the request because the object's namespace is being
    /// deleted (client-go's `HasStatusCause(err, NamespaceTerminatingCause)`) or is already gone
    /// (a stale cache's object: NamespaceLifecycle answers 404 for the namespace itself). Nothing
    /// can be created there any more, and the object itself is about to go (or went), so retrying
    /// and warning are pointless.
    pub fn is_namespace_gone(&self) -> bool {
        let Some(status) = self.api_status() else {
            return false;
        };
        let Some(details) = status.details.as_ref() else {
            return false;
        };
        let terminating = details
            .causes
            .iter()
            .any(|cause| cause.reason == NAMESPACE_TERMINATING_CAUSE);
        let deleted = status.code == 404 && details.kind == "namespaces";
        terminating || deleted
    }

    /// A bounded label for metrics (the variant name, never the message).
    pub fn metric_label(&self) -> &'static str {
        self.into()
    }
}

/// What the API server said (its message, written for people), or the client's own error.
pub fn api_message(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) if !status.message.is_empty() => status.message.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use kube::core::Status;

    use super::Error;

    fn refused(code: u16, message: &str) -> Error {
        apply_answered(
            "Service",
            serde_json::json!({
                "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
                "message": message,
            }),
        )
    }

    /// An apply of `kind` `web` the API server answered with the Status `body`.
    fn apply_answered(kind: &str, body: serde_json::Value) -> Error {
        let status: Status = serde_json::from_value(body).expect("a Status");
        Error::Apply {
            kind: kind.into(),
            name: "web".into(),
            source: kube::Error::Api(status.boxed()),
        }
    }

    #[test]
    fn refusals_as_invalid_are_permanent_the_rest_transient() {
        for code in [400, 422] {
            assert!(refused(code, "invalid").is_permanent(), "{code}");
        }
        for code in [403, 404, 409, 429, 500, 503, 504] {
            assert!(!refused(code, "try again").is_permanent(), "{code}");
        }
        let conflict = Error::Conflict {
            kind: "Service".into(),
            name: "web".into(),
        };
        assert!(!conflict.is_permanent(), "a foreign object may be removed");
    }

    #[test]
    fn messages_are_the_api_servers_not_a_debug_dump() {
        let error = refused(
            422,
            "Service \"1web\" is invalid: metadata.name: Invalid value",
        );
        assert_eq!(
            error.to_string(),
            "applying Service web: Service \"1web\" is invalid: metadata.name: Invalid value"
        );
    }

    #[test]
    fn an_immutable_field_refusal_is_recognised() {
        let error = refused(
            422,
            "Job.batch \"init\" is invalid: spec.template: Invalid value: field is immutable",
        );
        assert!(error.is_immutable_field());
        assert!(!refused(422, "metadata.name: Invalid value").is_immutable_field());
    }

    /// The body of a refusal of Deployment `web` in namespace `demo`, with `cause`, as the
    /// NamespaceLifecycle admission plugin sends it when the cause is `NamespaceTerminating`.
    pub(crate) fn namespace_refusal(cause: &str) -> serde_json::Value {
        serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 403,
            "reason": "Forbidden",
            "message": "deployments.apps \"web\" is forbidden: unable to create new content in namespace demo because it is being terminated",
            "details": { "name": "web", "group": "apps", "kind": "deployments",
                         "causes": [{ "reason": cause, "message": "namespace demo is being terminated" }] }
        })
    }

    /// An apply refused with [`namespace_refusal`].
    fn apply_refused(cause: &str) -> Error {
        apply_answered("Deployment", namespace_refusal(cause))
    }

    #[test]
    fn a_terminating_or_deleted_namespace_is_gone_and_nothing_else_is() {
        assert!(apply_refused("NamespaceTerminating").is_namespace_gone());
        assert!(!apply_refused("FieldValueForbidden").is_namespace_gone());
        // NamespaceLifecycle's answer for an object whose namespace no longer exists.
        let missing = |kind: &str| {
            apply_answered(
                "Deployment",
                serde_json::json!({
                    "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404,
                    "reason": "NotFound", "message": "namespaces \"demo\" not found",
                    "details": { "name": "demo", "kind": kind }
                }),
            )
        };
        assert!(missing("namespaces").is_namespace_gone());
        assert!(
            !missing("deployments").is_namespace_gone(),
            "the child alone is missing"
        );
        let conflict = Error::Conflict {
            kind: "Service".into(),
            name: "web".into(),
        };
        assert!(!conflict.is_namespace_gone());
    }
}
