//! A control plane of a test's own, for tests that crash its components or need its audit log:
//! never the suite's shared one.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use local_cluster::audit::AuditEvent;
use local_cluster::{Cluster, ClusterOptions, Layout, Stop};
use testkit::tools;

/// The operator's ServiceAccount as `config/default` names it.
pub const OPERATOR_ACCOUNT: &str =
    "system:serviceaccount:app-operator-system:app-operator-controller-manager";

/// A control plane, stopped when dropped; its state is removed then, unless the test failed
/// (its logs and audit log are kept to be read).
pub struct OwnCluster {
    pub layout: Layout,
    pub kubeconfig: PathBuf,
}

impl OwnCluster {
    /// Starts one under `target/<name>-<pid>`, with the API server's audit log if `audit`, and
    /// installs the CRDs.
    pub async fn up(name: &str, audit: bool) -> OwnCluster {
        let layout = Layout {
            state_dir: local_cluster::repo_root()
                .join(format!("target/{name}-{}", std::process::id())),
        };
        let options = ClusterOptions {
            audit,
            ..ClusterOptions::default()
        };
        let cluster = Cluster::up(&layout, tools(), &options).await.unwrap();
        let own = OwnCluster {
            kubeconfig: cluster.kubeconfig,
            layout,
        };
        own.kubectl(&[
            "apply",
            "--server-side",
            "-f",
            &repo_file("config/crd/bases"),
        ]);
        own.kubectl(&[
            "wait",
            "--for=condition=Established",
            "crd",
            "--all",
            "--timeout=60s",
        ]);
        own
    }

    pub fn kubectl(&self, args: &[&str]) -> String {
        testkit::kubectl_ok_on(&self.kubeconfig, args)
    }

    pub async fn client(&self) -> kube::Client {
        local_cluster::admin_client(&self.kubeconfig).await.unwrap()
    }

    /// Stops `component` as `how` says, leaves it down for `down`, starts it again and waits
    /// until it serves; returns when it was back.
    pub async fn restart(&self, component: &str, how: Stop, down: Duration) -> Instant {
        Cluster::stop_component(&self.layout, component, how).unwrap();
        // The downtime the test asked for: nothing is watched.
        tokio::time::sleep(down).await;
        Cluster::start_component(&self.layout, component, Duration::from_secs(120))
            .await
            .unwrap();
        Instant::now()
    }

    /// Installs the operator's own ServiceAccount, roles, bindings and admission policies, as
    /// `config/default` renders them (the Deployment and the CRDs left out), and when `fenced`
    /// the leader writes policy of `config/fencing` (left out: the mutation its row must catch).
    pub fn install_operator_rbac(&self, fenced: bool) {
        let rendered = self.kubectl(&["kustomize", &repo_file("config/default")]);
        let mut kept: Vec<&str> = rendered
            .split("\n---\n")
            .filter(|document| {
                let kind = document
                    .lines()
                    .find_map(|line| line.strip_prefix("kind: "))
                    .unwrap_or_default();
                matches!(
                    kind,
                    "Namespace"
                        | "ServiceAccount"
                        | "ClusterRole"
                        | "ClusterRoleBinding"
                        | "Role"
                        | "RoleBinding"
                        | "ValidatingAdmissionPolicy"
                        | "ValidatingAdmissionPolicyBinding"
                )
            })
            .collect();
        let fencing = fenced.then(|| self.kubectl(&["kustomize", &repo_file("config/fencing")]));
        kept.extend(fencing.as_deref());
        let path = self.layout.state_dir.join("operator-rbac.yaml");
        std::fs::write(&path, kept.join("\n---\n")).unwrap();
        self.kubectl(&["apply", "--server-side", "-f", &path.display().to_string()]);
    }

    /// A kubeconfig acting as the operator's ServiceAccount from the Pod `pod` (impersonated
    /// with the Pod name a token bound to a Pod carries): what the operator's ClusterRole and
    /// policies see of a replica (see [`OwnCluster::install_operator_rbac`]).
    pub fn kubeconfig_as_pod(&self, pod: &str) -> PathBuf {
        let text = std::fs::read_to_string(&self.kubeconfig).unwrap();
        let path = self.layout.state_dir.join(format!("{pod}.kubeconfig"));
        let user = format!(
            "  user:\n    as: {OPERATOR_ACCOUNT}\n    as-user-extra:\n      authentication.kubernetes.io/pod-name:\n      - {pod}\n"
        );
        std::fs::write(&path, text.replace("  user:\n", &user)).unwrap();
        path
    }

    /// The writes the audit log holds so far.
    pub fn audit(&self) -> Vec<AuditEvent> {
        local_cluster::audit::events(&self.layout.audit_log()).unwrap()
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // A failed test: the components' logs and the audit log stay to be read.
            for component in self.layout.recorded().iter().rev() {
                component.stop(Duration::from_secs(10));
            }
            eprintln!(
                "the control plane's logs are kept in {}",
                self.layout.state_dir.display()
            );
            return;
        }
        let _ = Cluster::down(&self.layout);
    }
}

pub fn repo_file(path: &str) -> String {
    format!("{}/../../{path}", env!("CARGO_MANIFEST_DIR"))
}
