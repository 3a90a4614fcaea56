//! Every file `make manifests` writes: the CRDs (under `config/crd/bases/` with kubebuilder's file
//! names, and in the chart), the chart's copies of the manager's rules and of the alerts, the
//! per-kind user roles and the API reference. A test keeps the committed copies current. Build
//! time only: xtask uses it, the operator does not carry it.

mod api_reference;

use std::path::{Path, PathBuf};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

#[derive(Debug, thiserror::Error)]
pub enum ManifestsError {
    #[error("writing a CRD as YAML: {0}")]
    Yaml(#[from] serde_norway::Error),
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{file} has no `{marker}` line to copy from")]
    NoMarker {
        file: &'static str,
        marker: &'static str,
    },
}

/// `(path relative to the repository, content)` of every generated file; `repo` is read for
/// the files copied from hand-written ones (`config/rbac/role.yaml`,
/// `config/rbac/owned_objects_policy.yaml`, `config/fencing/leader_writes_policy.yaml`,
/// `config/prometheus/alerts.yaml`,
/// `config/grafana/dashboard.json`).
pub fn generated_files(repo: &Path) -> Result<Vec<(String, String)>, ManifestsError> {
    let read = |file: &'static str| {
        let path = repo.join(file);
        std::fs::read_to_string(&path).map_err(|source| ManifestsError::Read { path, source })
    };
    let mut files = Vec::new();
    for (name, yaml) in crd_files()? {
        for dir in ["config/crd/bases", "charts/app-operator/files/crds"] {
            files.push((format!("{dir}/{name}"), yaml.clone()));
        }
    }
    const ROLE: &str = "config/rbac/role.yaml";
    const ALERTS: &str = "config/prometheus/alerts.yaml";
    let rules = chart_rules(&read(ROLE)?).ok_or(ManifestsError::NoMarker {
        file: ROLE,
        marker: "rules:",
    })?;
    files.push((
        "charts/app-operator/files/manager-role-rules.yaml".into(),
        rules,
    ));
    let groups = chart_alert_groups(&read(ALERTS)?).ok_or(ManifestsError::NoMarker {
        file: ALERTS,
        marker: "spec:",
    })?;
    files.push(("charts/app-operator/files/alert-groups.yaml".into(), groups));
    for (policy, copy) in [
        (
            "config/rbac/owned_objects_policy.yaml",
            "charts/app-operator/files/owned-objects-policy.yaml",
        ),
        (
            "config/fencing/leader_writes_policy.yaml",
            "charts/app-operator/files/leader-writes-policy.yaml",
        ),
    ] {
        files.push((
            copy.into(),
            format!(
                "# Generated from {policy} by `make manifests`; the chart puts its own names in.\n{}",
                read(policy)?
            ),
        ));
    }
    files.push((
        "charts/app-operator/files/dashboard.json".into(),
        read("config/grafana/dashboard.json")?,
    ));
    files.extend(
        user_role_files()
            .into_iter()
            .map(|(file, yaml)| (file.to_owned(), yaml)),
    );
    files.push((
        "docs/api-reference.md".into(),
        api_reference::api_reference(),
    ));
    Ok(files)
}

/// `(file name, YAML)` for every CRD, e.g. `example.com_myapps.yaml`.
pub fn crd_files() -> Result<Vec<(String, String)>, serde_norway::Error> {
    app_operator_api::crds().iter().map(crd_file).collect()
}

fn crd_file(crd: &CustomResourceDefinition) -> Result<(String, String), serde_norway::Error> {
    let name = format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural);
    Ok((name, format!("---\n{}", serde_norway::to_string(crd)?)))
}

/// The Helm chart's copy of the manager ClusterRole's rules: everything after `rules:` in
/// `config/rbac/role.yaml`.
fn chart_rules(role_yaml: &str) -> Option<String> {
    let (_, rules) = role_yaml.split_once("\nrules:\n")?;
    Some(format!(
        "# Generated from config/rbac/role.yaml by `make manifests`.\n{rules}"
    ))
}

/// The Helm chart's copy of the alerts: the `spec` of `config/prometheus/alerts.yaml` (a
/// PrometheusRule), dedented into a plain Prometheus rule file (`groups:`).
fn chart_alert_groups(alerts_yaml: &str) -> Option<String> {
    let (_, spec) = alerts_yaml.split_once("\nspec:\n")?;
    let groups: String = spec
        .lines()
        .map(|line| format!("{}\n", line.strip_prefix("  ").unwrap_or(line)))
        .collect();
    Some(format!(
        "# Generated from config/prometheus/alerts.yaml by `make manifests`.\n{groups}"
    ))
}

/// Who may do what with one kind, and the built-in role that role is aggregated into (as
/// cert-manager and kubebuilder's scaffolds do): a namespace's `view`, `edit` and `admin`
/// RoleBindings then cover the operator's kinds too.
const USER_ROLES: [(&str, &str, &[&str]); 3] = [
    ("viewer", "view", &["get", "list", "watch"]),
    (
        "editor",
        "edit",
        &[
            "create", "delete", "get", "list", "patch", "update", "watch",
        ],
    ),
    (
        "admin",
        "admin",
        &[
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ],
    ),
];

/// The viewer, editor and admin ClusterRoles of every kind, as one YAML stream. `name_prefix`
/// goes before each name (`""` where kustomize adds its own prefix, a Helm expression in the
/// chart) and `labels` are extra metadata lines (e.g. the chart's labels template).
pub fn user_roles(name_prefix: &str, labels: &str) -> String {
    let mut yaml = String::from(
        "# Generated from the CRDs by `make manifests`: viewer, editor and admin roles per kind,\n\
         # aggregated into the built-in view, edit and admin ClusterRoles.\n",
    );
    let list =
        |verbs: &[&str]| -> String { verbs.iter().map(|verb| format!("  - {verb}\n")).collect() };
    for crd in app_operator_api::crds() {
        let (group, plural) = (&crd.spec.group, &crd.spec.names.plural);
        let kind = crd.spec.names.kind.to_lowercase();
        let scales = crd
            .spec
            .versions
            .iter()
            .any(|v| v.subresources.as_ref().is_some_and(|s| s.scale.is_some()));
        for (role, aggregate_to, verbs) in USER_ROLES {
            // `kubectl scale` goes through the scale subresource: who may read a kind may read its
            // scale, who may change it may scale it (as the built-in roles have deployments/scale).
            let scale_verbs: &[&str] = if role == "viewer" {
                &["get"]
            } else {
                &["get", "patch", "update"]
            };
            let scale = if scales {
                format!(
                    "- apiGroups:\n  - {group}\n  resources:\n  - {plural}/scale\n  verbs:\n{}",
                    list(scale_verbs)
                )
            } else {
                String::new()
            };
            yaml.push_str(&format!(
                "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  \
                 name: {name_prefix}{kind}-{role}-role\n  labels:\n    \
                 rbac.authorization.k8s.io/aggregate-to-{aggregate_to}: \"true\"\n{labels}\
                 rules:\n- apiGroups:\n  - {group}\n  resources:\n  - {plural}\n  verbs:\n{}\
                 {scale}- apiGroups:\n  - {group}\n  resources:\n  - {plural}/status\n  verbs:\n  - get\n",
                list(verbs)
            ));
        }
    }
    yaml
}

/// The per-kind user roles: for kustomize (which prefixes names) and for the chart.
fn user_role_files() -> [(&'static str, String); 2] {
    [
        ("config/rbac/user_roles.yaml", user_roles("", "")),
        (
            "charts/app-operator/templates/user-roles.yaml",
            user_roles(
                "{{ include \"app-operator.fullname\" . }}-",
                "    {{- include \"app-operator.labels\" . | nindent 4 }}\n",
            ),
        ),
    ]
}
