//! The real node: Pods that run. containerd + runc (Debian's), the CNI bridge, a kubelet and
//! kube-proxy from the pinned Kubernetes module, CoreDNS for cluster DNS, an image registry on
//! loopback that containerd uses for every registry host, filled with the images built here, and
//! an S3-compatible object store on the machine's address for backups ([`crate::object_store`]).
//!
//! Three settings this kind of machine cannot do without (`shared/research/realnode.md`): the
//! kubelet's `failCgroupV1: false` (cgroup v1), containerd's `restrict_oom_score_adj` (no
//! CAP_SYS_RESOURCE), and an API server advertised on the machine's own address (Pods reach it
//! through the `kubernetes` Service, which cannot point at loopback).
//!
//! Nothing leaves the machine: Pod and Service addresses are routed only here, forwarding from the
//! Pod network to anywhere but itself is refused, CoreDNS serves the cluster domain and nothing
//! else, and every image name resolves to the loopback registry (a missing image fails at once).
//! One real node per machine (its iptables chains, bridge and cgroups are the machine's): a lock
//! refuses a second. `cluster-down` undoes all of it ([`down`]).

use std::fs;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::Api;

use crate::cluster::{Cluster, Layout, Stop, args, free_ports, node_is_ready, wait_for};
use crate::error::Error;
use crate::host::{self, HostRecord};
use crate::images::Images;
use crate::kubeconfig;
use crate::object_store::{self, ObjectStore};
use crate::pki::{ClientIdentity, Pki};
use crate::process::{self, Spec, Started};
use crate::registry;
use crate::tools::{Tools, cache_root};

/// The node's name (its kubelet's client certificate says `system:node:<name>`).
pub const NODE_NAME: &str = "real-node";
/// Pod addresses: routed only on this machine, apart from kwok's fake 10.244.0.0/16 and the
/// Service range 10.96.0.0/16.
pub const POD_CIDR: &str = "10.88.0.0/16";
pub const BRIDGE: &str = "aonode0";
/// The `kube-dns` Service's address, which the kubelet writes into every Pod's resolv.conf.
pub const CLUSTER_DNS: &str = "10.96.0.10";
pub const CLUSTER_DOMAIN: &str = "cluster.local";
/// The iptables chain that keeps Pod traffic on the machine.
pub const CHAIN: &str = "APP-OPERATOR-NODE";
/// The default StorageClass's provisioner on the real node (local-path-provisioner).
pub const STORAGE_PROVISIONER: &str = "rancher.io/local-path";
/// The kubelet's port on the node's address (the API server's `logs`/`exec` go there).
const KUBELET_PORT: u16 = 10250;
/// The image registry hosts our manifests and samples name; each resolves to the loopback one.
const REGISTRY_HOSTS: &[&str] = &[
    "docker.io",
    "registry-1.docker.io",
    "quay.io",
    "gcr.io",
    "registry.k8s.io",
    "ghcr.io",
];

/// The identity the API server uses to reach the kubelet (`kubectl logs`/`exec`): the kubelet
/// asks the API server (webhook) whether this user may, and system:masters may.
pub fn apiserver_kubelet_client() -> ClientIdentity {
    ClientIdentity {
        file_stem: "apiserver-kubelet-client",
        user: "kube-apiserver-kubelet-client",
        group: Some("system:masters"),
    }
}

/// The node's own identities: the kubelet's and kube-proxy's.
fn identities() -> Vec<ClientIdentity> {
    vec![
        ClientIdentity {
            file_stem: "kubelet",
            user: "system:node:real-node",
            group: Some("system:nodes"),
        },
        ClientIdentity {
            file_stem: "kube-proxy",
            user: "system:kube-proxy",
            group: None,
        },
    ]
}

/// Where the node keeps its state: `<state dir>/node`.
#[derive(Debug, Clone)]
pub struct NodeLayout {
    pub dir: PathBuf,
}

impl NodeLayout {
    pub fn of(layout: &Layout) -> NodeLayout {
        NodeLayout {
            dir: layout.state_dir.join("node"),
        }
    }

    pub fn exists(&self) -> bool {
        self.dir.exists()
    }

    fn containerd(&self) -> PathBuf {
        self.dir.join("containerd")
    }

    /// containerd's socket; the kubelet and crictl use it.
    pub fn containerd_socket(&self) -> PathBuf {
        self.containerd().join("containerd.sock")
    }

    fn kubelet(&self) -> PathBuf {
        self.dir.join("kubelet")
    }

    fn cni(&self) -> PathBuf {
        self.dir.join("cni")
    }

    /// What the kubelet gives Pods as the host's resolv.conf: nothing (cluster DNS only).
    fn empty_resolv_conf(&self) -> PathBuf {
        self.dir.join("resolv.conf")
    }

    fn host_record(&self) -> PathBuf {
        self.dir.join("host-before.json")
    }

    /// The loopback registry's address (`127.0.0.1:<port>`), for `make load`.
    pub fn registry_address(&self) -> Result<String, Error> {
        let path = self.dir.join("registry-address");
        fs::read_to_string(&path)
            .map(|text| text.trim().to_owned())
            .map_err(Error::io("reading", &path))
    }

    /// The object store's endpoint, bucket and keys, for tests and backups to reach it.
    pub fn object_store(&self) -> Result<ObjectStore, Error> {
        ObjectStore::load(&self.dir)
    }

    /// The file [`NodeLayout::object_store`] reads (it holds the keys).
    pub fn object_store_file(&self) -> PathBuf {
        object_store::file(&self.dir)
    }

    /// The object store's data: one directory per bucket, on the node's disk.
    fn object_store_data(&self) -> PathBuf {
        self.dir.join("object-store")
    }
}

/// The machine's own IPv4 address, which the node and the API server are advertised on: traffic
/// to it stays on this machine. The first non-loopback address of an interface that is up.
pub fn host_address() -> Result<Ipv4Addr, Error> {
    let output = process::run(
        Command::new("ip").args(["-o", "-4", "addr", "show", "up", "scope", "global"]),
    )?;
    output
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            words.find(|word| *word == "inet")?;
            words.next()?.split('/').next()?.parse::<Ipv4Addr>().ok()
        })
        .find(|address| !address.is_loopback())
        .ok_or_else(|| {
            Error::Prerequisite(
                "the real node needs an IPv4 address on a network interface other than loopback \
                 (the kubelet refuses 127.0.0.0/8): `ip -4 addr` shows none"
                    .to_owned(),
            )
        })
}

/// Takes the machine's real-node lock for this cluster, refusing while another one's node runs.
pub fn lock(layout: &Layout) -> Result<(), Error> {
    host::take_lock(&layout.state_dir)
}

/// What the node's processes need from the machine: the API server's address and client
/// certificates.
pub struct Start<'a> {
    pub layout: &'a Layout,
    pub tools: &'a Tools,
    pub pki: &'a Pki,
    pub node_ip: Ipv4Addr,
    pub api_server: String,
    pub ca_file: PathBuf,
    pub client: Client,
    pub timeout: Duration,
}

/// Starts the registry (and fills it), the object store (with its bucket), containerd, the
/// kubelet (waits for the node to be Ready), kube-proxy and CoreDNS (waits until it serves).
pub async fn start(start: &Start<'_>, started: &mut Vec<Started>) -> Result<(), Error> {
    let node = NodeLayout::of(start.layout);
    host::ensure_packages()?;
    for dir in [
        node.containerd(),
        node.kubelet(),
        node.cni().join("net.d"),
        node.object_store_data(),
    ] {
        fs::create_dir_all(&dir).map_err(Error::io("creating", &dir))?;
    }
    let record = HostRecord::capture();
    record.save(&node.host_record())?;
    host::keep_pod_traffic_here(POD_CIDR, BRIDGE, CHAIN)?;

    let images = Images::ensure(start.tools, &start.tools.sources)?;
    let [registry_port, kubelet_healthz, proxy_metrics, proxy_healthz] = free_ports()?;
    let registry_address = format!("127.0.0.1:{registry_port}");
    let registry_config = node.dir.join("registry.yml");
    let storage = cache_root().join("registry");
    write(
        &registry_config,
        &registry::config(&storage, &registry_address),
    )?;
    write(&node.dir.join("registry-address"), &registry_address)?;
    spawn(
        start,
        started,
        Spec {
            name: "registry".into(),
            program: registry::PROGRAM.into(),
            args: vec!["serve".into(), registry_config.display().to_string()],
        },
    )?;
    wait_for(
        started,
        start.timeout,
        start.layout,
        "the image registry to accept connections",
        || async { Ok(std::net::TcpStream::connect(&registry_address).is_ok()) },
    )
    .await?;
    for image in &images.images {
        registry::push_archive(&image.archive, &registry_address)?;
    }

    // On the machine's own address, not loopback: Pods on the node reach it there.
    let store = ObjectStore::generate(SocketAddrV4::new(
        start.node_ip,
        object_store::free_port(start.node_ip)?,
    ))?;
    spawn(
        start,
        started,
        store.spec(start.tools.bin("versitygw"), &node.object_store_data()),
    )?;
    wait_for(
        started,
        start.timeout,
        start.layout,
        "the object store to accept connections",
        || async { Ok(std::net::TcpStream::connect(store.address()).is_ok()) },
    )
    .await?;
    store.create_bucket()?;
    store.save(&node.dir)?;

    let certs_d = node.containerd().join("certs.d");
    for host in REGISTRY_HOSTS.iter().chain(std::iter::once(&"_default")) {
        let dir = certs_d.join(host);
        fs::create_dir_all(&dir).map_err(Error::io("creating", &dir))?;
        write(&dir.join("hosts.toml"), &hosts_toml(&registry_address))?;
    }
    write(
        &node.cni().join("net.d/10-app-operator.conflist"),
        &cni_conflist(&node),
    )?;
    let containerd_config = node.containerd().join("config.toml");
    write(
        &containerd_config,
        &containerd_config_toml(&node, &image_named(&images, "registry.k8s.io/pause:")?),
    )?;
    spawn(
        start,
        started,
        Spec {
            name: "containerd".into(),
            program: "/usr/bin/containerd".into(),
            args: vec!["--config".into(), containerd_config.display().to_string()],
        },
    )?;
    let socket = node.containerd_socket();
    wait_for(
        started,
        start.timeout,
        start.layout,
        "containerd's socket",
        || async { Ok(std::os::unix::net::UnixStream::connect(&socket).is_ok()) },
    )
    .await?;

    let pki_dir = start.layout.state_dir.join("pki");
    let serving = start.pki.server(
        NODE_NAME,
        &[
            &start.node_ip.to_string(),
            NODE_NAME,
            "localhost",
            "127.0.0.1",
        ],
    )?;
    let kubelet_crt = pki_dir.join("kubelet-serving.crt");
    let kubelet_key = pki_dir.join("kubelet-serving.key");
    write(&kubelet_crt, &serving.cert_pem)?;
    write(&kubelet_key, &serving.key_pem)?;
    let kubeconfig_for = |stem: &str| -> Result<PathBuf, Error> {
        let identity = identities()
            .into_iter()
            .find(|identity| identity.file_stem == stem)
            .ok_or_else(|| Error::Invalid(format!("no identity {stem}")))?;
        let key = start.pki.client(&identity)?;
        let path = start.layout.state_dir.join(format!("{stem}.kubeconfig"));
        write(
            &path,
            &kubeconfig::render(
                &start.api_server,
                &start.pki.ca.cert_pem,
                identity.user,
                &key,
            ),
        )?;
        Ok(path)
    };
    write(&node.empty_resolv_conf(), "")?;
    let kubelet_config = node.dir.join("kubelet.yaml");
    write(
        &kubelet_config,
        &kubelet_config_yaml(&KubeletSettings {
            node: &node,
            node_ip: start.node_ip,
            ca_file: &start.ca_file,
            tls_cert: &kubelet_crt,
            tls_key: &kubelet_key,
            healthz_port: kubelet_healthz,
        }),
    )?;
    spawn(
        start,
        started,
        Spec {
            name: "kubelet".into(),
            program: start.tools.bin("kubelet"),
            args: args(&[
                ("config", &kubelet_config.display().to_string()),
                (
                    "kubeconfig",
                    &kubeconfig_for("kubelet")?.display().to_string(),
                ),
                ("root-dir", &node.kubelet().display().to_string()),
                ("hostname-override", NODE_NAME),
                ("node-ip", &start.node_ip.to_string()),
                ("v", "1"),
            ]),
        },
    )?;
    let nodes: Api<Node> = Api::all(start.client.clone());
    wait_for(
        started,
        start.timeout,
        start.layout,
        &format!("node {NODE_NAME} to be Ready"),
        || async {
            Ok(nodes
                .get_opt(NODE_NAME)
                .await
                .ok()
                .flatten()
                .is_some_and(|node| node_is_ready(&node)))
        },
    )
    .await?;

    let proxy_config = node.dir.join("kube-proxy.yaml");
    write(
        &proxy_config,
        &kube_proxy_config_yaml(&kubeconfig_for("kube-proxy")?, proxy_metrics, proxy_healthz),
    )?;
    spawn(
        start,
        started,
        Spec {
            name: "kube-proxy".into(),
            program: start.tools.bin("kube-proxy"),
            args: args(&[("config", &proxy_config.display().to_string())]),
        },
    )?;

    // The cluster add-ons, each from a file kept beside the node's configuration.
    let coredns = coredns_manifests(&image_named(&images, "registry.k8s.io/coredns/coredns:")?);
    let storage = local_path_storage(
        &start.tools.sources,
        &node.dir.join("volumes"),
        &image_named(&images, "docker.io/app-operator/toolbox:")?,
    )?;
    for (file, manifest) in [
        ("coredns.json", coredns.to_string()),
        ("local-path-storage.yaml", storage),
    ] {
        let path = node.dir.join(file);
        write(&path, &manifest)?;
        process::run(Command::new(start.tools.bin("kubectl")).args([
            "--kubeconfig",
            &start.layout.kubeconfig().display().to_string(),
            "apply",
            "--server-side",
            "--field-manager=local-cluster",
            "-f",
            &path.display().to_string(),
        ]))?;
    }
    for (namespace, name) in [
        ("kube-system", "coredns"),
        ("local-path-storage", "local-path-provisioner"),
    ] {
        let deployments: Api<Deployment> = Api::namespaced(start.client.clone(), namespace);
        wait_for(
            started,
            start.timeout,
            start.layout,
            &format!("Deployment {namespace}/{name} to be Available"),
            || async {
                Ok(deployments
                    .get_opt(name)
                    .await
                    .ok()
                    .flatten()
                    .and_then(|d| d.status)
                    .and_then(|s| s.available_replicas)
                    .is_some_and(|n| n >= 1))
            },
        )
        .await?;
    }
    Ok(())
}

/// local-path-provisioner's own manifest (`deploy/local-path-storage.yaml` of the pinned module),
/// with its volumes under `volumes` (removed with the node) and its helper Pods (`mkdir`, `rm`)
/// on `helper_image` instead of busybox, which is not built here.
fn local_path_storage(sources: &Path, volumes: &Path, helper_image: &str) -> Result<String, Error> {
    let path = crate::tools::module_dir(
        &sources.join("local-path-provisioner"),
        "github.com/rancher/local-path-provisioner",
    )?
    .join("deploy/local-path-storage.yaml");
    let manifest = fs::read_to_string(&path).map_err(Error::io("reading", &path))?;
    for expected in ["/opt/local-path-provisioner", "image: busybox"] {
        if !manifest.contains(expected) {
            return Err(Error::Invalid(format!(
                "{} no longer says {expected:?}: the real node's storage needs a look",
                path.display()
            )));
        }
    }
    Ok(manifest
        .replace(
            "/opt/local-path-provisioner",
            &volumes.display().to_string(),
        )
        .replace("image: busybox", &format!("image: {helper_image}")))
}

/// The first name of the built images that starts with `prefix` (repository and colon).
fn image_named(images: &Images, prefix: &str) -> Result<String, Error> {
    images
        .images
        .iter()
        .flat_map(|image| &image.names)
        .find(|name| name.starts_with(prefix))
        .cloned()
        .ok_or_else(|| Error::Invalid(format!("no image {prefix}… was built")))
}

fn spawn(start: &Start<'_>, started: &mut Vec<Started>, spec: Spec) -> Result<(), Error> {
    started.push(process::start(
        spec,
        &start.layout.logs(),
        &start.layout.state_dir.join("pids"),
    )?);
    Ok(())
}

fn write(path: &Path, contents: &str) -> Result<(), Error> {
    fs::write(path, contents).map_err(Error::io("writing", path))
}

/// containerd's view of a registry host: the loopback registry and nothing else, so a name
/// resolves only here and a missing image fails at once.
fn hosts_toml(registry: &str) -> String {
    format!(
        "server = \"http://{registry}\"\n\n[host.\"http://{registry}\"]\n  capabilities = [\"pull\", \"resolve\", \"push\"]\n"
    )
}

/// The Pod network: one bridge, addresses from [`POD_CIDR`] kept in the node's directory, no
/// masquerading (nothing is to leave the machine), hairpin for a Pod reaching itself through its
/// Service.
fn cni_conflist(node: &NodeLayout) -> String {
    serde_json::json!({
        "cniVersion": "1.0.0",
        "name": "app-operator-node",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": true,
                "ipMasq": false,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{ "subnet": POD_CIDR }]],
                    "routes": [{ "dst": "0.0.0.0/0" }],
                    "dataDir": node.cni().join("ipam").display().to_string(),
                },
            },
            { "type": "portmap", "capabilities": { "portMappings": true } },
            { "type": "loopback" },
        ],
    })
    .to_string()
}

/// containerd 1.6's configuration (version 2): its own root, state and socket under the node's
/// directory; `restrict_oom_score_adj` (this machine lacks CAP_SYS_RESOURCE, without it every
/// sandbox fails); cgroupfs (no systemd); the pause image built here; the registry hosts above.
fn containerd_config_toml(node: &NodeLayout, pause: &str) -> String {
    let dir = node.containerd();
    format!(
        r#"version = 2
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "{socket}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  restrict_oom_score_adj = true
  enable_unprivileged_ports = true
  enable_unprivileged_icmp = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni}"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{certs}"
"#,
        root = dir.join("root").display(),
        state = dir.join("state").display(),
        socket = node.containerd_socket().display(),
        pause = pause,
        cni = node.cni().join("net.d").display(),
        certs = dir.join("certs.d").display(),
    )
}

struct KubeletSettings<'a> {
    node: &'a NodeLayout,
    node_ip: Ipv4Addr,
    ca_file: &'a Path,
    tls_cert: &'a Path,
    tls_key: &'a Path,
    healthz_port: u16,
}

/// The kubelet as `hack/local-up-cluster.sh` and the node e2e tests run it without systemd, with
/// what this machine needs: `failCgroupV1: false`, `oomScoreAdj: 0` (no CAP_SYS_RESOURCE), no
/// image garbage collection or disk eviction on the shared disk, and no resolv.conf of the
/// machine's for Pods (cluster DNS only).
fn kubelet_config_yaml(settings: &KubeletSettings<'_>) -> String {
    let node = settings.node;
    format!(
        r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: true
cgroupRoot: /
containerRuntimeEndpoint: unix://{socket}
failSwapOn: false
oomScoreAdj: 0
address: {node_ip}
port: {KUBELET_PORT}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: {healthz}
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: {ca}
authorization:
  mode: Webhook
tlsCertFile: {cert}
tlsPrivateKeyFile: {key}
rotateCertificates: false
serverTLSBootstrap: false
clusterDNS:
- {CLUSTER_DNS}
clusterDomain: {CLUSTER_DOMAIN}
resolvConf: {resolv}
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "0%"
  nodefs.available: "0%"
  nodefs.inodesFree: "0%"
  imagefs.available: "0%"
podLogsDir: {logs}
staticPodPath: ""
"#,
        socket = node.containerd_socket().display(),
        node_ip = settings.node_ip,
        healthz = settings.healthz_port,
        ca = settings.ca_file.display(),
        cert = settings.tls_cert.display(),
        key = settings.tls_key.display(),
        resolv = node.empty_resolv_conf().display(),
        logs = node.dir.join("pod-logs").display(),
    )
}

/// kube-proxy in iptables mode (no IPVS in this kernel), leaving global sysctls alone
/// (conntrack sizes, `route_localnet`) as kind and local-up-cluster do.
fn kube_proxy_config_yaml(kubeconfig: &Path, metrics_port: u16, healthz_port: u16) -> String {
    format!(
        r#"apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: {kubeconfig}
hostnameOverride: {NODE_NAME}
mode: iptables
clusterCIDR: {POD_CIDR}
oomScoreAdj: 0
metricsBindAddress: 127.0.0.1:{metrics_port}
healthzBindAddress: 127.0.0.1:{healthz_port}
conntrack:
  maxPerCore: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
iptables:
  localhostNodePorts: false
"#,
        kubeconfig = kubeconfig.display(),
    )
}

/// CoreDNS as Kubernetes' own addon manifest has it (`cluster/addons/dns/coredns`), answering
/// for the cluster domain (and reverse lookups) only: no `forward`, so no query leaves the
/// machine and any other name is refused.
fn coredns_manifests(image: &str) -> serde_json::Value {
    let corefile = format!(
        "{CLUSTER_DOMAIN}:53 in-addr.arpa:53 ip6.arpa:53 {{\n    errors\n    health {{\n        lameduck 5s\n    }}\n    ready\n    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{\n        pods insecure\n        ttl 30\n    }}\n    prometheus :9153\n    cache 30\n    loop\n    reload\n    loadbalance\n}}\n"
    );
    let labels = serde_json::json!({ "k8s-app": "kube-dns" });
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": { "name": "coredns", "namespace": "kube-system" },
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": { "name": "system:coredns" },
                "rules": [
                    { "apiGroups": [""], "resources": ["endpoints", "services", "pods", "namespaces"], "verbs": ["list", "watch"] },
                    { "apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"] },
                ],
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": { "name": "system:coredns" },
                "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:coredns" },
                "subjects": [{ "kind": "ServiceAccount", "name": "coredns", "namespace": "kube-system" }],
            },
            {
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": { "name": "coredns", "namespace": "kube-system" },
                "data": { "Corefile": corefile },
            },
            {
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": { "name": "coredns", "namespace": "kube-system", "labels": labels },
                "spec": {
                    "replicas": 1,
                    "selector": { "matchLabels": labels },
                    "template": {
                        "metadata": { "labels": labels },
                        "spec": {
                            "serviceAccountName": "coredns",
                            "priorityClassName": "system-cluster-critical",
                            "dnsPolicy": "Default",
                            "securityContext": { "seccompProfile": { "type": "RuntimeDefault" } },
                            "containers": [{
                                "name": "coredns",
                                "image": image,
                                "args": ["-conf", "/etc/coredns/Corefile"],
                                "resources": {
                                    "limits": { "memory": "170Mi" },
                                    "requests": { "cpu": "100m", "memory": "70Mi" },
                                },
                                "volumeMounts": [{ "name": "config-volume", "mountPath": "/etc/coredns", "readOnly": true }],
                                "ports": [
                                    { "containerPort": 53, "name": "dns", "protocol": "UDP" },
                                    { "containerPort": 53, "name": "dns-tcp", "protocol": "TCP" },
                                    { "containerPort": 9153, "name": "metrics", "protocol": "TCP" },
                                ],
                                "livenessProbe": {
                                    "httpGet": { "path": "/health", "port": 8080 },
                                    "initialDelaySeconds": 60, "timeoutSeconds": 5, "failureThreshold": 5,
                                },
                                "readinessProbe": { "httpGet": { "path": "/ready", "port": 8181 } },
                                "securityContext": {
                                    "allowPrivilegeEscalation": false,
                                    "capabilities": { "add": ["NET_BIND_SERVICE"], "drop": ["ALL"] },
                                    "readOnlyRootFilesystem": true,
                                },
                            }],
                            "volumes": [{
                                "name": "config-volume",
                                "configMap": { "name": "coredns", "items": [{ "key": "Corefile", "path": "Corefile" }] },
                            }],
                        },
                    },
                },
            },
            {
                "apiVersion": "v1", "kind": "Service",
                "metadata": {
                    "name": "kube-dns", "namespace": "kube-system",
                    "labels": { "k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS" },
                },
                "spec": {
                    "selector": labels,
                    "clusterIP": CLUSTER_DNS,
                    "ports": [
                        { "name": "dns", "port": 53, "protocol": "UDP" },
                        { "name": "dns-tcp", "port": 53, "protocol": "TCP" },
                        { "name": "metrics", "port": 9153, "protocol": "TCP" },
                    ],
                },
            },
        ],
    })
}

/// The pinned tools the node runs, found beside its kube-proxy (crictl is built with it).
fn tools_bin(recorded: &[process::Recorded]) -> Option<PathBuf> {
    recorded
        .iter()
        .find(|r| r.name == "kube-proxy")
        .and_then(|c| c.program.parent().map(Path::to_owned))
}

/// Pulls `images` onto the running node through its registry (`crictl pull`), so that a tag
/// pushed again names the new image there at once, as after `kind load`: Pods started from then
/// on run it, `imagePullPolicy: IfNotPresent` or not.
pub fn pull(layout: &Layout, images: &[String]) -> Result<(), Error> {
    let crictl = tools_bin(&layout.recorded())
        .map(|bin| bin.join("crictl"))
        .ok_or_else(|| {
            Error::Prerequisite(format!(
                "no real node runs (state in {})",
                layout.state_dir.display()
            ))
        })?;
    let endpoint = format!(
        "unix://{}",
        NodeLayout::of(layout).containerd_socket().display()
    );
    for image in images {
        process::run(Command::new(&crictl).args([
            "--runtime-endpoint",
            &endpoint,
            "--image-endpoint",
            &endpoint,
            "pull",
            image,
        ]))?;
    }
    Ok(())
}

/// Restarts the node as a machine that lost its power would restart, its disks kept: the kubelet
/// and containerd stop, every container's process is killed (SIGKILL), then containerd and the
/// kubelet start again and find every container gone. The control plane runs on.
pub async fn restart(layout: &Layout, timeout: Duration) -> Result<(), Error> {
    Cluster::stop_component(layout, "kubelet", Stop::Term)?;
    Cluster::stop_component(layout, "containerd", Stop::Term)?;
    host::kill_cgroup_processes("kubepods");
    host::kill_shims(&NodeLayout::of(layout).containerd_socket());
    Cluster::start_component(layout, "containerd", timeout).await?;
    Cluster::start_component(layout, "kubelet", timeout).await
}

/// Undoes everything the node did to the machine, in the order that leaves nothing behind: the
/// kubelet stops (so nothing restarts), every Pod sandbox is stopped and removed through the CRI
/// (the network plugin releases its address and veth), kube-proxy's rules go, containerd and any
/// shim it left stop, then the bridge, iptables chains, mounts, cgroups, sysctls and files the
/// node made. Returns the names of the processes it stopped.
pub fn down(layout: &Layout) -> Result<Vec<String>, Error> {
    let node = NodeLayout::of(layout);
    if !node.exists() {
        return Ok(Vec::new());
    }
    let recorded = layout.recorded();
    let find = |name: &str| recorded.iter().find(|r| r.name == name);
    let tools_bin = tools_bin(&recorded);
    let mut stopped = Vec::new();
    let mut stop = |name: &str| {
        if let Some(component) = find(name).filter(|c| c.is_running()) {
            component.stop(Duration::from_secs(10));
            stopped.push(name.to_owned());
        }
    };
    stop("kubelet");
    let socket = node.containerd_socket();
    if find("containerd").is_some_and(|c| c.is_running())
        && let Some(bin) = &tools_bin
    {
        let endpoint = format!("unix://{}", socket.display());
        // Best effort: whatever this leaves, the steps below remove by force.
        let _ = process::run(Command::new(bin.join("crictl")).args([
            "--runtime-endpoint",
            &endpoint,
            "--timeout",
            "60s",
            "rmp",
            "--all",
            "--force",
        ]));
    }
    stop("kube-proxy");
    if let Some(bin) = &tools_bin {
        let _ = process::run(Command::new(bin.join("kube-proxy")).arg("--cleanup"));
    }
    stop("containerd");
    host::kill_shims(&socket);
    stop("registry");
    stop(object_store::NAME);
    host::remove_iptables_chains(&["KUBE-", "CNI-", CHAIN])?;
    host::delete_link(BRIDGE);
    host::unmount_below(&node.dir);
    host::unmount_pod_network_namespaces();
    host::remove_cgroups("kubepods");
    if let Some(record) = HostRecord::load(&node.host_record()) {
        record.restore();
    }
    host::release_lock(&layout.state_dir);
    Ok(stopped)
}

/// What a stopped node left on the machine (empty when `down` did its job): containers, mounts,
/// network namespaces, the bridge, iptables chains, cgroups.
pub fn leftovers(layout: &Layout) -> Vec<String> {
    let node = NodeLayout::of(layout);
    let mut found = host::shims(&node.containerd_socket())
        .into_iter()
        .map(|pid| format!("containerd shim process {pid}"))
        .collect::<Vec<_>>();
    found.extend(
        host::mounts_below(&node.dir)
            .into_iter()
            .chain(
                host::mounts_below(Path::new("/run/netns"))
                    .into_iter()
                    .filter(|m| m.contains("cni-")),
            )
            .map(|mount| format!("mount {mount}")),
    );
    if host::link_exists(BRIDGE) {
        found.push(format!("network interface {BRIDGE}"));
    }
    found.extend(
        host::iptables_chains(&["KUBE-", "CNI-", CHAIN])
            .into_iter()
            .map(|chain| format!("iptables chain {chain}")),
    );
    found.extend(
        host::cgroups("kubepods")
            .into_iter()
            .map(|dir| format!("cgroup {}", dir.display())),
    );
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coredns_answers_the_cluster_domain_only() {
        let manifests = coredns_manifests("registry.k8s.io/coredns/coredns:v1.13.1");
        let corefile = manifests["items"][3]["data"]["Corefile"]
            .as_str()
            .unwrap_or_default();
        assert!(corefile.starts_with("cluster.local:53 in-addr.arpa:53 ip6.arpa:53 {"));
        assert!(!corefile.contains("forward"), "{corefile}");
        assert_eq!(manifests["items"][5]["spec"]["clusterIP"], CLUSTER_DNS);
    }

    #[test]
    fn every_registry_host_resolves_to_the_loopback_registry_only() {
        let hosts = hosts_toml("127.0.0.1:5000");
        assert!(hosts.starts_with("server = \"http://127.0.0.1:5000\""));
        assert_eq!(hosts.matches("http://").count(), 2, "{hosts}");
    }

    #[test]
    fn the_pod_network_does_not_masquerade() {
        let node = NodeLayout {
            dir: PathBuf::from("/state/node"),
        };
        let conflist: serde_json::Value =
            serde_json::from_str(&cni_conflist(&node)).unwrap_or_default();
        assert_eq!(conflist["plugins"][0]["ipMasq"], false);
        assert_eq!(
            conflist["plugins"][0]["ipam"]["ranges"][0][0]["subnet"],
            POD_CIDR
        );
        assert_eq!(
            conflist["plugins"][0]["ipam"]["dataDir"],
            "/state/node/cni/ipam"
        );
    }
}
