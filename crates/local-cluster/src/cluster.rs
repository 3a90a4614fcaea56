//! `cluster-up` / `cluster-down`: start the control plane, wait until it is really usable (API
//! ready, a Ready node, the default ServiceAccount), and stop exactly what was started.

use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, ServiceAccount};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::error::Error;
use crate::kubeconfig;
use crate::pki::{self, ClientIdentity};
use crate::process::{self, Recorded, Spec, Started};
use crate::tools::Tools;

/// Where a cluster keeps its state: certificates, kubeconfigs, etcd data, logs and pid files.
#[derive(Debug, Clone)]
pub struct Layout {
    pub state_dir: PathBuf,
}

impl Default for Layout {
    /// `$APP_OPERATOR_CLUSTER_DIR`, else `.local/cluster` in the repository.
    fn default() -> Self {
        let state_dir = std::env::var_os("APP_OPERATOR_CLUSTER_DIR")
            .map_or_else(|| crate::repo_root().join(".local/cluster"), PathBuf::from);
        Layout { state_dir }
    }
}

impl Layout {
    /// The admin kubeconfig (`system:masters`).
    pub fn kubeconfig(&self) -> PathBuf {
        self.state_dir.join("kubeconfig")
    }

    pub fn logs(&self) -> PathBuf {
        self.state_dir.join("logs")
    }

    /// The API server's audit log (JSON lines), written when [`ClusterOptions::audit`] is set;
    /// read it with [`crate::audit::events`].
    pub fn audit_log(&self) -> PathBuf {
        self.state_dir.join("audit.log")
    }

    fn pids(&self) -> PathBuf {
        self.state_dir.join("pids")
    }

    fn pki(&self) -> PathBuf {
        self.state_dir.join("pki")
    }

    /// The recorded processes that are still running.
    pub fn running(&self) -> Vec<Recorded> {
        process::recorded(&self.pids())
            .into_iter()
            .filter(Recorded::is_running)
            .collect()
    }

    /// The recorded processes, running or not (what `cluster-down` stops).
    pub fn recorded(&self) -> Vec<Recorded> {
        process::recorded(&self.pids())
    }
}

#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// How many kwok Nodes to register.
    pub nodes: u32,
    /// How long to wait for each readiness step.
    pub timeout: Duration,
    /// Record every write but the control plane's own in [`Layout::audit_log`].
    pub audit: bool,
    /// Also run a real node (kubelet, containerd, CNI, kube-proxy, CoreDNS): see [`crate::node`].
    pub real_node: bool,
    /// The release of the control plane.
    pub kubernetes: Kubernetes,
    /// Serve the API server's `/debug/pprof` (to the admin): the benchmark's planes, whose CPU
    /// is profiled (`hack/profile-control-plane.sh`). Off elsewhere, as hardening guides say.
    pub profiling: bool,
}

/// Which Kubernetes release runs the control plane (kube-apiserver, kube-controller-manager,
/// kube-scheduler); kwok, kubectl and the real node's kubelet are always the pinned release's, so
/// the oldest one runs with kwok only (a kubelet newer than its API server is outside the skew
/// policy).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Kubernetes {
    /// The pinned release (`hack/k8s-tools/kubernetes`).
    #[default]
    Pinned,
    /// The oldest minor app-operator supports (`hack/k8s-tools/kubernetes-1.34`).
    Oldest,
}

impl Kubernetes {
    /// The minor of [`Kubernetes::Oldest`], as the README's table and the chart's `kubeVersion` say.
    pub const OLDEST_MINOR: &str = "1.34";

    /// The name of this release's build of a control-plane `command` among the tools.
    fn binary(self, command: &str) -> String {
        match self {
            Kubernetes::Pinned => command.to_owned(),
            Kubernetes::Oldest => format!("{command}-{}", Kubernetes::OLDEST_MINOR),
        }
    }
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            nodes: 1,
            timeout: Duration::from_secs(120),
            audit: false,
            real_node: false,
            kubernetes: Kubernetes::Pinned,
            profiling: false,
        }
    }
}

impl ClusterOptions {
    /// A real node and no kwok one: every Pod runs.
    pub fn real_node() -> ClusterOptions {
        ClusterOptions {
            nodes: 0,
            real_node: true,
            // The first start pushes the images into the registry and pulls CoreDNS's.
            timeout: Duration::from_secs(300),
            ..ClusterOptions::default()
        }
    }
}

/// A control plane this process started.
pub struct RunningCluster {
    pub kubeconfig: PathBuf,
    pub client: Client,
    /// Held so a failed start can be cleaned up; dropping does not stop the processes.
    _started: Vec<Started>,
}

pub struct Cluster;

/// How [`Cluster::stop_component`] stops a component.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// SIGTERM: a graceful shutdown (SIGKILL if it takes over 10 s).
    Term,
    /// SIGKILL: a crash.
    Kill,
}

fn recorded_component(layout: &Layout, name: &str) -> Result<Recorded, Error> {
    layout
        .recorded()
        .into_iter()
        .find(|component| component.name == name)
        .ok_or_else(|| {
            Error::Invalid(format!(
                "no component {name} recorded in {}",
                layout.pids().display()
            ))
        })
}

/// Client identities, each with its own kubeconfig. The controller manager and scheduler use the
/// identities the bootstrap RBAC policy expects; kwok and people use the admin.
fn identities() -> Vec<ClientIdentity> {
    vec![
        ClientIdentity {
            file_stem: "admin",
            user: "admin",
            group: Some("system:masters"),
        },
        ClientIdentity {
            file_stem: "kube-controller-manager",
            user: "system:kube-controller-manager",
            group: None,
        },
        ClientIdentity {
            file_stem: "kube-scheduler",
            user: "system:kube-scheduler",
            group: None,
        },
    ]
}

impl Cluster {
    /// Starts a control plane; fails without touching anything if one is already running.
    pub async fn up(
        layout: &Layout,
        tools: &Tools,
        options: &ClusterOptions,
    ) -> Result<RunningCluster, Error> {
        if !layout.running().is_empty() {
            return Err(Error::AlreadyRunning {
                state_dir: layout.state_dir.clone(),
                kubeconfig: layout.kubeconfig(),
            });
        }
        // Whatever is left is a stale, stopped cluster.
        if layout.state_dir.exists() {
            fs::remove_dir_all(&layout.state_dir)
                .map_err(Error::io("removing", &layout.state_dir))?;
        }
        for dir in [layout.logs(), layout.pids(), layout.pki()] {
            fs::create_dir_all(&dir).map_err(Error::io("creating", &dir))?;
        }
        let mut started = Vec::new();
        match start_all(layout, tools, options, &mut started).await {
            Ok(client) => Ok(RunningCluster {
                kubeconfig: layout.kubeconfig(),
                client,
                _started: started,
            }),
            Err(error) => {
                for component in started.iter_mut().rev() {
                    let _ = component.child.kill();
                    let _ = component.child.wait();
                }
                Err(error)
            }
        }
    }

    /// Stops one component of a running control plane, as its machine would: SIGTERM (SIGKILL
    /// after 10 s) or SIGKILL at once. Its state (etcd's data, its recorded arguments) stays for
    /// [`Cluster::start_component`].
    pub fn stop_component(layout: &Layout, name: &str, how: Stop) -> Result<(), Error> {
        let component = recorded_component(layout, name)?;
        match how {
            Stop::Term => component.stop(Duration::from_secs(10)),
            Stop::Kill => component.kill(),
        }
        Ok(())
    }

    /// Starts a stopped component again with the same arguments (ports, data directory) and
    /// waits until it serves: etcd accepts connections, the API server's `/readyz` says ok; the
    /// other components until they have stayed up for 2 s.
    pub async fn start_component(
        layout: &Layout,
        name: &str,
        timeout: Duration,
    ) -> Result<(), Error> {
        let component = recorded_component(layout, name)?;
        if component.is_running() {
            return Err(Error::Invalid(format!("{name} is already running")));
        }
        let spec = component.spec();
        let client_port = spec
            .args
            .iter()
            .find_map(|arg| arg.strip_prefix("--listen-client-urls=http://127.0.0.1:"))
            .and_then(|port| port.parse().ok());
        let mut started = [process::start(spec, &layout.logs(), &layout.pids())?];
        let what = format!("{name} to serve again");
        match (name, client_port) {
            ("etcd", Some(port)) => {
                wait_for(&mut started, timeout, layout, &what, || accepts(port)).await
            }
            ("kube-apiserver", _) => {
                let client = admin_client(&layout.kubeconfig()).await?;
                wait_for(&mut started, timeout, layout, &what, || {
                    apiserver_ready(&client)
                })
                .await
            }
            _ => {
                let up_since = Instant::now();
                wait_for(&mut started, timeout, layout, &what, || async {
                    Ok(up_since.elapsed() >= Duration::from_secs(2))
                })
                .await
            }
        }
    }

    /// Stops every recorded process (in reverse start order) and removes the state directory;
    /// a real node first undoes what it did to the machine ([`crate::node::down`]). Returns the
    /// names of the processes that were still running.
    pub fn down(layout: &Layout) -> Result<Vec<String>, Error> {
        let mut stopped = crate::node::down(layout)?;
        for recorded in layout.recorded().iter().rev() {
            if recorded.is_running() {
                recorded.stop(Duration::from_secs(10));
                stopped.push(recorded.name.clone());
            }
        }
        if layout.state_dir.exists() {
            fs::remove_dir_all(&layout.state_dir)
                .map_err(Error::io("removing", &layout.state_dir))?;
        }
        Ok(stopped)
    }
}

async fn start_all(
    layout: &Layout,
    tools: &Tools,
    options: &ClusterOptions,
    started: &mut Vec<Started>,
) -> Result<Client, Error> {
    let pki_dir = layout.pki();
    let node_ip = if options.real_node {
        crate::node::lock(layout)?;
        Some(crate::node::host_address()?)
    } else {
        None
    };
    let node_addresses: Vec<String> = node_ip.iter().map(ToString::to_string).collect();
    let pki = pki::generate(identities(), &node_addresses)?;
    let write = |name: &str, contents: &str| -> Result<String, Error> {
        let path = pki_dir.join(name);
        fs::write(&path, contents).map_err(Error::io("writing", &path))?;
        Ok(path.display().to_string())
    };
    let ca_crt = write("ca.crt", &pki.ca.cert_pem)?;
    let ca_key = write("ca.key", &pki.ca.key_pem)?;
    let apiserver_crt = write("apiserver.crt", &pki.apiserver.cert_pem)?;
    let apiserver_key = write("apiserver.key", &pki.apiserver.key_pem)?;
    let sa_key = write("service-account.key", &pki.service_account_key_pem)?;
    let sa_pub = write("service-account.pub", &pki.service_account_public_pem)?;
    let kubelet_client_flags = match node_ip {
        Some(node_ip) => {
            let client = pki.client(&crate::node::apiserver_kubelet_client())?;
            let crt = write("apiserver-kubelet-client.crt", &client.cert_pem)?;
            let key = write("apiserver-kubelet-client.key", &client.key_pem)?;
            args(&[
                // Pods reach the API server through the `kubernetes` Service, whose endpoint is
                // the advertised address: the machine's own, not loopback.
                ("bind-address", "0.0.0.0"),
                ("advertise-address", &node_ip.to_string()),
                ("kubelet-client-certificate", &crt),
                ("kubelet-client-key", &key),
                ("kubelet-certificate-authority", &ca_crt),
                ("kubelet-preferred-address-types", "InternalIP,Hostname"),
                (
                    "enable-admission-plugins",
                    "OwnerReferencesPermissionEnforcement,NodeRestriction",
                ),
            ])
        }
        None => args(&[
            ("bind-address", "127.0.0.1"),
            ("advertise-address", "127.0.0.1"),
            // As OpenShift has it: setting blockOwnerDeletion on a child needs `update` on
            // the owner's finalizers, so a missing RBAC rule fails the tests here too.
            (
                "enable-admission-plugins",
                "OwnerReferencesPermissionEnforcement",
            ),
            // The "kubernetes" Service cannot point at a loopback address; nothing here needs it.
            ("endpoint-reconciler-type", "none"),
        ]),
    };

    let [
        etcd_port,
        etcd_peer_port,
        api_port,
        kcm_port,
        scheduler_port,
        kwok_port,
    ] = free_ports()?;
    let server = format!("https://127.0.0.1:{api_port}");
    let mut kubeconfigs = std::collections::HashMap::new();
    for (identity, key) in &pki.clients {
        let path = if identity.file_stem == "admin" {
            layout.kubeconfig()
        } else {
            layout
                .state_dir
                .join(format!("{}.kubeconfig", identity.file_stem))
        };
        fs::write(
            &path,
            kubeconfig::render(&server, &pki.ca.cert_pem, identity.user, key),
        )
        .map_err(Error::io("writing", &path))?;
        kubeconfigs.insert(identity.file_stem, path.display().to_string());
    }
    let kubeconfig_of = |stem: &str| kubeconfigs.get(stem).cloned().unwrap_or_default();
    let state = layout.state_dir.display().to_string();
    let etcd_url = format!("http://127.0.0.1:{etcd_port}");
    let etcd_peer_url = format!("http://127.0.0.1:{etcd_peer_port}");

    let start = |started: &mut Vec<Started>, spec: Spec| -> Result<(), Error> {
        started.push(process::start(spec, &layout.logs(), &layout.pids())?);
        Ok(())
    };
    start(
        started,
        Spec {
            name: "etcd".into(),
            program: tools.bin("etcd"),
            args: args(&[
                ("name", "default"),
                ("data-dir", &format!("{state}/etcd")),
                ("listen-client-urls", &etcd_url),
                ("advertise-client-urls", &etcd_url),
                ("listen-peer-urls", &etcd_peer_url),
                ("initial-advertise-peer-urls", &etcd_peer_url),
                ("initial-cluster", &format!("default={etcd_peer_url}")),
                // A throwaway test store: durability on power loss buys nothing here.
                ("unsafe-no-fsync", "true"),
                // Room for the bench's largest rounds (tens of thousands of objects written,
                // rewritten and deleted between two of the API server's compactions) beyond
                // etcd's default quota of 2 GiB; the file grows only as far as it is used.
                ("quota-backend-bytes", "8589934592"),
                ("log-level", "warn"),
            ]),
        },
    )?;
    wait_for(
        started,
        options.timeout,
        layout,
        "etcd to accept connections",
        || accepts(etcd_port),
    )
    .await?;

    let mut audit_flags = Vec::new();
    if options.audit {
        let policy = write("audit-policy.yaml", crate::audit::POLICY)?;
        audit_flags = args(&[
            ("audit-policy-file", &policy),
            ("audit-log-path", &layout.audit_log().display().to_string()),
            ("audit-log-format", "json"),
            // One file for the whole run: rotation would split what a test reads.
            ("audit-log-maxsize", "0"),
            ("audit-log-mode", "blocking"),
        ]);
    }
    start(
        started,
        Spec {
            name: "kube-apiserver".into(),
            program: tools.bin(&options.kubernetes.binary("kube-apiserver")),
            args: [
                args(&[
                    ("etcd-servers", &etcd_url),
                    ("secure-port", &api_port.to_string()),
                    ("tls-cert-file", &apiserver_crt),
                    ("tls-private-key-file", &apiserver_key),
                    ("client-ca-file", &ca_crt),
                    ("authorization-mode", "Node,RBAC"),
                    (
                        "service-account-issuer",
                        "https://kubernetes.default.svc.cluster.local",
                    ),
                    ("service-account-key-file", &sa_pub),
                    ("service-account-signing-key-file", &sa_key),
                    ("service-cluster-ip-range", "10.96.0.0/16"),
                    ("allow-privileged", "true"),
                    ("profiling", &options.profiling.to_string()),
                ]),
                kubelet_client_flags,
                audit_flags,
            ]
            .concat(),
        },
    )?;
    let client = admin_client(&layout.kubeconfig()).await?;
    wait_for(
        started,
        options.timeout,
        layout,
        "kube-apiserver /readyz",
        || apiserver_ready(&client),
    )
    .await?;

    let kcm_kubeconfig = kubeconfig_of("kube-controller-manager");
    let mut kcm_args = args(&[
        ("kubeconfig", &kcm_kubeconfig),
        ("authentication-kubeconfig", &kcm_kubeconfig),
        ("authorization-kubeconfig", &kcm_kubeconfig),
        ("bind-address", "127.0.0.1"),
        ("secure-port", &kcm_port.to_string()),
        ("leader-elect", "false"),
        ("controllers", "*"),
        ("use-service-account-credentials", "true"),
        ("service-account-private-key-file", &sa_key),
        ("root-ca-file", &ca_crt),
        ("cluster-signing-cert-file", &ca_crt),
        ("cluster-signing-key-file", &ca_key),
        // client-go's default 20 QPS would make Deployments, not the operator, the bottleneck.
        ("kube-api-qps", "200"),
        ("kube-api-burst", "400"),
        ("concurrent-deployment-syncs", "10"),
        ("concurrent-replicaset-syncs", "10"),
        // PersistentVolumeClaims bind to directories under /tmp/hostpath_pv, provisioned
        // for the default StorageClass below (as Kubernetes' hack/local-up-cluster.sh).
        ("enable-hostpath-provisioner", "true"),
    ]);
    if !options.real_node {
        // kwok's node Lease is renewed through the API server, so after the fault suite's 40 s
        // etcd stop it can be older than the 50 s default, and the node controller then marks
        // every Pod on the node NotReady. A kubelet would report them Ready again; kwok's
        // stages never do, and a Deployment stayed unready for good (seen in `make chaos`).
        kcm_args.push("--node-monitor-grace-period=3m".to_owned());
    }
    start(
        started,
        Spec {
            name: "kube-controller-manager".into(),
            program: tools.bin(&options.kubernetes.binary("kube-controller-manager")),
            args: kcm_args,
        },
    )?;
    let scheduler_kubeconfig = kubeconfig_of("kube-scheduler");
    start(
        started,
        Spec {
            name: "kube-scheduler".into(),
            program: tools.bin(&options.kubernetes.binary("kube-scheduler")),
            args: args(&[
                ("kubeconfig", &scheduler_kubeconfig),
                ("authentication-kubeconfig", &scheduler_kubeconfig),
                ("authorization-kubeconfig", &scheduler_kubeconfig),
                ("bind-address", "127.0.0.1"),
                ("secure-port", &scheduler_port.to_string()),
                ("leader-elect", "false"),
            ]),
        },
    )?;
    start(
        started,
        Spec {
            name: "kwok".into(),
            program: tools.bin("kwok"),
            args: args(&[
                ("kubeconfig", &kubeconfig_of("admin")),
                ("config", &tools.kwok_stages().display().to_string()),
                ("manage-all-nodes", "false"),
                (
                    "manage-nodes-with-annotation-selector",
                    "kwok.x-k8s.io/node=fake",
                ),
                ("node-ip", "10.0.0.1"),
                ("cidr", "10.244.0.0/16"),
                ("server-address", &format!("127.0.0.1:{kwok_port}")),
                // Heartbeat through a node Lease, as a kubelet does. Without it kwok updates the node
                // status only every ~55 s, past the controller manager's 50 s grace period, and every
                // Pod on the node flaps to NotReady each minute.
                ("node-lease-duration-seconds", "40"),
            ]),
        },
    )?;

    let nodes: Api<Node> = Api::all(client.clone());
    for index in 0..options.nodes {
        let name = format!("kwok-node-{index}");
        nodes
            .patch(
                &name,
                &PatchParams::apply("local-cluster").force(),
                &Patch::Apply(fake_node(&name)),
            )
            .await
            .map_err(|source| Error::Kube {
                what: "registering the kwok node",
                source,
            })?;
        wait_for(
            started,
            options.timeout,
            layout,
            &format!("node {name} to be Ready"),
            || async {
                Ok(nodes
                    .get_opt(&name)
                    .await
                    .ok()
                    .flatten()
                    .is_some_and(|node| node_is_ready(&node)))
            },
        )
        .await?;
    }
    let storage_classes: Api<StorageClass> = Api::all(client.clone());
    storage_classes
        .patch(
            DEFAULT_STORAGE_CLASS,
            &PatchParams::apply("local-cluster").force(),
            &Patch::Apply(default_storage_class(options.real_node)),
        )
        .await
        .map_err(|source| Error::Kube {
            what: "creating the default StorageClass",
            source,
        })?;
    if let Some(node_ip) = node_ip {
        crate::node::start(
            &crate::node::Start {
                layout,
                tools,
                pki: &pki,
                node_ip,
                api_server: server.clone(),
                ca_file: PathBuf::from(&ca_crt),
                client: client.clone(),
                timeout: options.timeout,
            },
            started,
        )
        .await?;
    }
    // Pods are refused until the namespace's default ServiceAccount exists.
    let service_accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
    wait_for(
        started,
        options.timeout,
        layout,
        "the default ServiceAccount",
        || async {
            Ok(service_accounts
                .get_opt("default")
                .await
                .ok()
                .flatten()
                .is_some())
        },
    )
    .await?;
    Ok(client)
}

/// The StorageClass of claims that name none.
pub const DEFAULT_STORAGE_CLASS: &str = "standard";

/// The default StorageClass. With kwok nodes: kube-controller-manager's host-path provisioner,
/// binding at once (no node to wait for: every kwok node sees the same host). With a real node:
/// local-path-provisioner, as kind has it, whose directories any user may write (the host-path
/// provisioner's are root's, and a Pod running as a non-root user could not use its volume).
fn default_storage_class(real_node: bool) -> serde_json::Value {
    let (provisioner, binding) = if real_node {
        (crate::node::STORAGE_PROVISIONER, "WaitForFirstConsumer")
    } else {
        ("kubernetes.io/host-path", "Immediate")
    };
    serde_json::json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": DEFAULT_STORAGE_CLASS,
            "annotations": { "storageclass.kubernetes.io/is-default-class": "true" },
        },
        "provisioner": provisioner,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": binding,
        "allowVolumeExpansion": !real_node,
    })
}

/// A Node that kwok manages (by annotation), with kwok's default capacity (1k CPUs, 1M pods).
fn fake_node(name: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": { "kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0" },
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
            },
        },
    })
}

pub(crate) fn node_is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        })
}

pub async fn admin_client(kubeconfig: &Path) -> Result<Client, Error> {
    let kubeconfig = Kubeconfig::read_from(kubeconfig)
        .map_err(|e| Error::Invalid(format!("reading {}: {e}", kubeconfig.display())))?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| Error::Invalid(format!("kubeconfig: {e}")))?;
    Client::try_from(config).map_err(|source| Error::Kube {
        what: "building a client",
        source,
    })
}

pub(crate) fn args(flags: &[(&str, &str)]) -> Vec<String> {
    flags
        .iter()
        .map(|(flag, value)| format!("--{flag}={value}"))
        .collect()
}

/// Distinct free loopback ports (all bound at once so none is handed out twice).
pub(crate) fn free_ports<const N: usize>() -> Result<[u16; N], Error> {
    let listeners = (0..N)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()
        .map_err(Error::io("binding a free port on", "127.0.0.1"))?;
    let ports = listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(Error::io("reading a free port on", "127.0.0.1"))?;
    ports
        .try_into()
        .map_err(|_| Error::Invalid("free port count".into()))
}

async fn accepts(port: u16) -> Result<bool, Error> {
    Ok(tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_ok())
}

async fn apiserver_ready(client: &Client) -> Result<bool, Error> {
    let request = http::Request::get("/readyz")
        .body(Vec::new())
        .map_err(|e| Error::Invalid(e.to_string()))?;
    Ok(client
        .request_text(request)
        .await
        .is_ok_and(|body| body.trim() == "ok"))
}

/// Polls `ready` until it holds, failing early (with the log tail) if a started component died.
pub(crate) async fn wait_for<F, Fut>(
    started: &mut [Started],
    timeout: Duration,
    layout: &Layout,
    what: &str,
    mut ready: F,
) -> Result<(), Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool, Error>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        for component in started.iter_mut() {
            component.check_alive()?;
        }
        if ready().await? {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(Error::Timeout {
                what: what.to_owned(),
                seconds: timeout.as_secs(),
                logs: layout.logs(),
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
