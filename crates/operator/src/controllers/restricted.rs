//! The `restricted` Pod Security Standard, which every Pod the operator creates meets, so that
//! they run in a namespace that enforces it (`pod-security.kubernetes.io/enforce=restricted`):
//! not root, no privilege escalation, no capabilities, the runtime's default seccomp profile,
//! and no ServiceAccount token (none of them calls the API server).

use k8s_openapi::api::core::v1::{
    Capabilities, Container, EmptyDirVolumeSource, PodSecurityContext, PodSpec, SeccompProfile,
    SecurityContext, Volume, VolumeMount,
};

/// The user (and group) of Pods whose image has no non-root user of its own: the conventional
/// `nonroot` of distroless images.
pub const NON_ROOT: i64 = 65532;

/// The Pod's part. `user` runs every container as that user and group and makes the volumes
/// writable by the group; `None` leaves the user to the image, which must name a numeric
/// non-root one (the kubelet refuses to start it otherwise, and says so).
pub fn pod_security_context(user: Option<i64>) -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: user,
        run_as_group: user,
        fs_group: user,
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".to_owned(),
            localhost_profile: None,
        }),
        ..PodSecurityContext::default()
    }
}

/// Each container's part; with `read_only_root` its root filesystem cannot be written, and what
/// it writes goes to volumes ([`scratch`] for temporary files).
pub fn container_security_context(read_only_root: bool) -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".to_owned()]),
            add: None,
        }),
        read_only_root_filesystem: read_only_root.then_some(true),
        ..SecurityContext::default()
    }
}

/// A writable directory in a container whose root filesystem is read-only: an emptyDir volume
/// `name` and its mount at `path`.
pub fn scratch(name: &str, path: &str) -> (Volume, VolumeMount) {
    (
        Volume {
            name: name.to_owned(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        },
        VolumeMount {
            name: name.to_owned(),
            mount_path: path.to_owned(),
            ..VolumeMount::default()
        },
    )
}

/// A Pod spec with `security_context` for the Pod, [`container_security_context`] on every
/// container (init containers too) and no ServiceAccount token.
pub fn restrict(
    spec: PodSpec,
    security_context: PodSecurityContext,
    read_only_root: bool,
) -> PodSpec {
    let harden = |containers: Vec<_>| {
        containers
            .into_iter()
            .map(|container| Container {
                security_context: Some(container_security_context(read_only_root)),
                ..container
            })
            .collect()
    };
    PodSpec {
        automount_service_account_token: Some(false),
        security_context: Some(security_context),
        init_containers: spec.init_containers.map(harden),
        containers: harden(spec.containers),
        ..spec
    }
}

/// What the `restricted` level checks of a Pod (Kubernetes' pod-security admission, v1.35):
/// the problems it would report, empty when it admits the Pod.
#[cfg(test)]
pub fn restricted_violations(spec: &PodSpec) -> Vec<String> {
    let pod = spec.security_context.clone().unwrap_or_default();
    let containers = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers);
    let mut problems = Vec::new();
    for container in containers {
        let context = container.security_context.clone().unwrap_or_default();
        let name = &container.name;
        if context.allow_privilege_escalation != Some(false) {
            problems.push(format!("{name}: allowPrivilegeEscalation != false"));
        }
        let drops_all = context
            .capabilities
            .as_ref()
            .and_then(|c| c.drop.as_ref())
            .is_some_and(|drop| drop.iter().any(|c| c == "ALL"));
        if !drops_all {
            problems.push(format!("{name}: capabilities.drop lacks ALL"));
        }
        if context.run_as_non_root.or(pod.run_as_non_root) != Some(true) {
            problems.push(format!("{name}: runAsNonRoot != true"));
        }
        if context.run_as_user.or(pod.run_as_user) == Some(0) {
            problems.push(format!("{name}: runAsUser = 0"));
        }
        let seccomp = context.seccomp_profile.or(pod.seccomp_profile.clone());
        if !seccomp.is_some_and(|p| p.type_ == "RuntimeDefault" || p.type_ == "Localhost") {
            problems.push(format!("{name}: seccompProfile unset"));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_containers() -> PodSpec {
        PodSpec {
            init_containers: Some(vec![Container {
                name: "first".to_owned(),
                ..Container::default()
            }]),
            containers: vec![Container {
                name: "main".to_owned(),
                ..Container::default()
            }],
            ..PodSpec::default()
        }
    }

    #[test]
    fn a_restricted_spec_passes_and_an_unrestricted_one_does_not() {
        assert_eq!(restricted_violations(&two_containers()).len(), 8);
        let spec = restrict(two_containers(), pod_security_context(None), false);
        assert_eq!(restricted_violations(&spec), Vec::<String>::new());
        assert_eq!(spec.automount_service_account_token, Some(false));
    }

    #[test]
    fn a_user_runs_every_container_and_owns_the_volumes() {
        let context = pod_security_context(Some(NON_ROOT));
        assert_eq!(
            (context.run_as_user, context.run_as_group, context.fs_group),
            (Some(NON_ROOT), Some(NON_ROOT), Some(NON_ROOT))
        );
        let spec = restrict(two_containers(), context, true);
        assert!(
            spec.containers
                .iter()
                .chain(spec.init_containers.iter().flatten())
                .all(|c| {
                    c.security_context
                        .as_ref()
                        .is_some_and(|s| s.read_only_root_filesystem == Some(true))
                })
        );
    }
}
