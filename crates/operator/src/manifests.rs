//! The CRD manifests as committed under `config/crd/bases/` (kubebuilder's file names).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

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
pub fn chart_rules(role_yaml: &str) -> Option<String> {
    let (_, rules) = role_yaml.split_once("\nrules:\n")?;
    Some(format!(
        "# Generated from config/rbac/role.yaml by `make manifests`.\n{rules}"
    ))
}

/// The Helm chart's copy of the alerts: the `spec` of `config/prometheus/alerts.yaml` (a
/// PrometheusRule), dedented into a plain Prometheus rule file (`groups:`).
pub fn chart_alert_groups(alerts_yaml: &str) -> Option<String> {
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
    for crd in app_operator_api::crds() {
        let (group, plural) = (&crd.spec.group, &crd.spec.names.plural);
        let kind = crd.spec.names.kind.to_lowercase();
        for (role, aggregate_to, verbs) in USER_ROLES {
            yaml.push_str(&format!(
                "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  \
                 name: {name_prefix}{kind}-{role}-role\n  labels:\n    \
                 rbac.authorization.k8s.io/aggregate-to-{aggregate_to}: \"true\"\n{labels}\
                 rules:\n- apiGroups:\n  - {group}\n  resources:\n  - {plural}\n  verbs:\n{}\
                 - apiGroups:\n  - {group}\n  resources:\n  - {plural}/status\n  verbs:\n  - get\n",
                verbs
                    .iter()
                    .map(|verb| format!("  - {verb}\n"))
                    .collect::<String>()
            ));
        }
    }
    yaml
}

/// The per-kind user roles: for kustomize (which prefixes names) and for the chart.
pub fn user_role_files() -> [(&'static str, String); 2] {
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
