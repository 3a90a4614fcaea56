//! The CRD manifests as committed under `config/crd/bases/` (kubebuilder's file names).

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// `(file name, YAML)` for every CRD, e.g. `example.com_myapps.yaml`.
pub fn crd_files() -> Result<Vec<(String, String)>, serde_yaml::Error> {
    app_operator_api::crds().iter().map(crd_file).collect()
}

fn crd_file(crd: &CustomResourceDefinition) -> Result<(String, String), serde_yaml::Error> {
    let name = format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural);
    Ok((name, format!("---\n{}", serde_yaml::to_string(crd)?)))
}

/// The Helm chart's copy of the manager ClusterRole's rules: everything after `rules:` in
/// `config/rbac/role.yaml`.
pub fn chart_rules(role_yaml: &str) -> Option<String> {
    let (_, rules) = role_yaml.split_once("\nrules:\n")?;
    Some(format!(
        "# Generated from config/rbac/role.yaml by `make manifests`.\n{rules}"
    ))
}
