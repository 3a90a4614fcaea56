//! The API server's audit log, for fault tests that check who wrote what, and when: never two
//! operator replicas writing at once, no writes once everything converged.

use std::path::Path;

use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use crate::error::Error;

/// Every write (Metadata level: who, what, when, no bodies), from anyone but the control plane's
/// own controllers, whose status churn would swamp the file. Reads are not recorded.
pub(crate) const POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: None
  users: ["system:kube-controller-manager", "system:kube-scheduler", "system:apiserver"]
- level: Metadata
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
"#;

/// One completed write request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEvent {
    /// The user the request acted as: the impersonated one if any, else the authenticated one
    /// (`system:serviceaccount:ns:name`, `admin`).
    pub user: String,
    /// The Pod a ServiceAccount token (or an impersonation) says the request came from, if any:
    /// tells apart replicas that act as one ServiceAccount.
    pub pod: String,
    pub user_agent: String,
    /// `create`, `update`, `patch`, `delete`, `deletecollection`.
    pub verb: String,
    /// The resource, with its subresource after a `/` (`myapps/status`).
    pub resource: String,
    pub namespace: String,
    pub name: String,
    /// The HTTP status code of the answer.
    pub code: u16,
    /// When the answer was complete.
    pub at: Timestamp,
}

/// The writes in the audit log at `path` so far, oldest first. A last line still being written
/// is skipped.
pub fn events(path: &Path) -> Result<Vec<AuditEvent>, Error> {
    let text = std::fs::read_to_string(path).map_err(Error::io("reading", path))?;
    Ok(text.lines().filter_map(parse).collect())
}

fn parse(line: &str) -> Option<AuditEvent> {
    let event: Value = serde_json::from_str(line).ok()?;
    let text = |pointer: &str| {
        event
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let resource = match text("/objectRef/subresource") {
        subresource if subresource.is_empty() => text("/objectRef/resource"),
        subresource => format!("{}/{subresource}", text("/objectRef/resource")),
    };
    let user = match text("/impersonatedUser/username") {
        none if none.is_empty() => text("/user/username"),
        impersonated => impersonated,
    };
    let pod = match text("/impersonatedUser/extra/authentication.kubernetes.io~1pod-name/0") {
        none if none.is_empty() => text("/user/extra/authentication.kubernetes.io~1pod-name/0"),
        impersonated => impersonated,
    };
    Some(AuditEvent {
        user,
        pod,
        user_agent: text("/userAgent"),
        verb: text("/verb"),
        resource,
        namespace: text("/objectRef/namespace"),
        name: text("/objectRef/name"),
        code: u16::try_from(event.pointer("/responseStatus/code")?.as_u64()?).ok()?,
        at: text("/stageTimestamp").parse().ok()?,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_status_patch_is_read_with_its_subresource_and_a_torn_line_is_skipped() {
        let line = r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","stage":"ResponseComplete","verb":"patch","user":{"username":"system:serviceaccount:ops:app-operator"},"userAgent":"app-operator/0.1.0","objectRef":{"resource":"myapps","namespace":"default","name":"web","apiGroup":"example.com","apiVersion":"v1","subresource":"status"},"responseStatus":{"metadata":{},"code":200},"stageTimestamp":"2026-11-24T12:00:01.500000Z"}"#;
        let event = parse(line).unwrap();
        assert_eq!(
            (
                event.verb.as_str(),
                event.resource.as_str(),
                event.name.as_str(),
                event.code
            ),
            ("patch", "myapps/status", "web", 200)
        );
        assert_eq!(event.user, "system:serviceaccount:ops:app-operator");
        assert_eq!(event.pod, "");
        assert_eq!(
            event.at,
            "2026-11-24T12:00:01.5Z".parse::<Timestamp>().unwrap()
        );
        assert_eq!(parse(&line[..line.len() / 2]), None);
    }

    #[test]
    fn the_pod_is_read_from_the_token_or_the_impersonation() {
        let from_token = r#"{"verb":"create","user":{"username":"system:serviceaccount:ops:app-operator","extra":{"authentication.kubernetes.io/pod-name":["app-operator-7f9-x2"]}},"objectRef":{"resource":"pods"},"responseStatus":{"code":201},"stageTimestamp":"2026-11-24T12:00:01Z"}"#;
        let impersonated = r#"{"verb":"create","user":{"username":"admin"},"impersonatedUser":{"username":"system:serviceaccount:ops:app-operator","extra":{"authentication.kubernetes.io/pod-name":["replica-b"]}},"objectRef":{"resource":"pods"},"responseStatus":{"code":403},"stageTimestamp":"2026-11-24T12:00:01Z"}"#;
        assert_eq!(parse(from_token).unwrap().pod, "app-operator-7f9-x2");
        let event = parse(impersonated).unwrap();
        assert_eq!(
            (event.user.as_str(), event.pod.as_str()),
            ("system:serviceaccount:ops:app-operator", "replica-b")
        );
    }
}
