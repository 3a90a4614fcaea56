//! The control plane side of the harness: CRDs, the operator's identity, namespaces, waiting.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};

pub async fn install_crds(admin: &Client) -> Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(admin.clone());
    for crd in app_operator::api::crds() {
        let name = crd.name_any();
        crds.patch(
            &name,
            &PatchParams::apply("app-operator-bench").force(),
            &Patch::Apply(&crd),
        )
        .await?;
        wait_for(Duration::from_secs(60), || async {
            let status = crds.get(&name).await.ok()?.status?;
            status
                .conditions?
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
                .then_some(())
        })
        .await
        .context("CRDs not Established")?;
    }
    Ok(())
}

/// Who runs the operator: the ServiceAccount `app-operator-bench/app-operator`, bound to the
/// ClusterRole of config/rbac and to every ClusterRole in `extra_roles` (what another operator
/// declares it needs besides).
pub struct Identity<'a> {
    pub kubectl: PathBuf,
    pub admin_kubeconfig: &'a Path,
    pub extra_roles: &'a [PathBuf],
}

impl Identity<'_> {
    fn kubectl(&self, args: &[&str]) -> Result<String> {
        let output = Command::new(&self.kubectl)
            .args(args)
            .env("KUBECONFIG", self.admin_kubeconfig)
            .stderr(Stdio::inherit())
            .output()?;
        if !output.status.success() {
            bail!("kubectl {} failed", args.join(" "));
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// Creates the identity and writes a kubeconfig for it to `path`.
    pub async fn create(&self, admin: &Client, path: &Path) -> Result<()> {
        let namespace = "app-operator-bench";
        ensure_namespace(admin, namespace).await?;
        let mut roles = vec!["manager-role".to_owned()];
        self.kubectl(&[
            "apply",
            "-f",
            &display(&crate::repo().join("config/rbac/role.yaml")),
        ])?;
        for file in self.extra_roles {
            let applied = self.kubectl(&["apply", "-o", "name", "-f", &display(file)])?;
            roles.extend(
                applied
                    .lines()
                    .filter_map(|l| l.strip_prefix("clusterrole.rbac.authorization.k8s.io/"))
                    .map(str::to_owned),
            );
        }
        let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), namespace);
        let account: ServiceAccount =
            serde_json::from_value(serde_json::json!({ "metadata": { "name": "app-operator" } }))?;
        accounts
            .patch(
                "app-operator",
                &PatchParams::apply("app-operator-bench").force(),
                &Patch::Apply(&account),
            )
            .await?;
        for role in &roles {
            let binding = format!("app-operator-bench-{role}");
            self.kubectl(&[
                "delete",
                "clusterrolebinding",
                &binding,
                "--ignore-not-found",
            ])?;
            self.kubectl(&[
                "create",
                "clusterrolebinding",
                &binding,
                &format!("--clusterrole={role}"),
                "--serviceaccount=app-operator-bench:app-operator",
            ])?;
        }
        let request = serde_json::json!({ "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": { "expirationSeconds": 86400 } });
        let token: k8s_openapi::api::authentication::v1::TokenRequest = accounts
            .create_subresource("token", "app-operator", &PostParams::default(), &request)
            .await?;
        let token = token.status.map(|s| s.token).unwrap_or_default();
        let admin_config = kube::config::Kubeconfig::read_from(self.admin_kubeconfig)?;
        let cluster = admin_config
            .clusters
            .first()
            .and_then(|c| c.cluster.clone())
            .context("no cluster in the kubeconfig")?;
        std::fs::write(
            path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    certificate-authority-data: {}\nusers:\n- name: app-operator\n  user:\n    token: {token}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: app-operator\ncurrent-context: c\n",
                cluster.server.unwrap_or_default(),
                cluster.certificate_authority_data.unwrap_or_default(),
            ),
        )?;
        Ok(())
    }
}

fn display(path: &Path) -> String {
    path.display().to_string()
}

pub async fn ensure_namespace(admin: &Client, name: &str) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    let namespace: Namespace =
        serde_json::from_value(serde_json::json!({ "metadata": { "name": name } }))?;
    namespaces
        .patch(
            name,
            &PatchParams::apply("app-operator-bench").force(),
            &Patch::Apply(&namespace),
        )
        .await?;
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), name);
    wait_for(Duration::from_secs(60), || async {
        accounts.get_opt("default").await.ok().flatten()
    })
    .await
    .context("default ServiceAccount")?;
    Ok(())
}

/// Deletes the namespace `name` and waits until it is gone (its objects go first), for at most
/// 10 min.
pub async fn delete_namespace(admin: &Client, name: &str) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    let started = Instant::now();
    let _ = namespaces.delete(name, &DeleteParams::background()).await;
    wait_for(Duration::from_secs(600), || async {
        namespaces.get_opt(name).await.ok()?.is_none().then_some(())
    })
    .await
    .with_context(|| format!("namespace {name} was not deleted"))?;
    // Not measured: the log says how long it took.
    eprintln!(
        "bench: namespace {name} deleted in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Waits until nothing of `api` matches `selector`.
pub async fn until_none<K>(api: &Api<K>, selector: &ListParams, timeout: Duration) -> Option<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    wait_for(timeout, || async {
        api.list(selector)
            .await
            .ok()?
            .items
            .is_empty()
            .then_some(())
    })
    .await
}

pub async fn wait_for<T, F, Fut>(timeout: Duration, mut probe: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = probe().await {
            return Some(value);
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
