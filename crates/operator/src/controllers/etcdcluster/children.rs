//! What an EtcdCluster is made of, built from its spec alone: member Pods (each with its own data
//! volume), the headless peer Service, the client Service and a PodDisruptionBudget.

use std::collections::BTreeMap;

use app_operator_api::EtcdCluster;
use app_operator_api::etcdcluster::{PodPolicy, RestoreStatus};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EmptyDirVolumeSource, HTTPGetAction, PersistentVolumeClaim,
    PersistentVolumeClaimVolumeSource, Pod, PodSpec, Probe, SecretVolumeSource, Service,
    ServicePort, ServiceSpec, Volume, VolumeMount,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use crate::controllers::bucket::fetch_container;
use crate::controllers::restricted::{NON_ROOT, pod_security_context, restrict};
use crate::etcd::address::{Addressing, CLIENT_PORT, PEER_PORT, scheme};
use crate::etcd::version::Version;
use crate::etcd::{image, quorum};
use crate::reconcile::{MANAGED_BY, MANAGED_BY_LABEL};

/// The member container an in-place upgrade replaces (its ID), until the kubelet reports the new
/// one.
pub const REPLACED_CONTAINER_ANNOTATION: &str = "etcd.database.coreos.com/replaced-container";
/// The member's etcd version, as the coreos operator annotated it.
pub const VERSION_ANNOTATION: &str = "etcd.version";
/// The member container's name.
pub const CONTAINER: &str = "etcd";
const DATA_VOLUME: &str = "etcd-data";
const DATA_MOUNT: &str = "/var/etcd";
pub const DATA_DIR: &str = "/var/etcd/data";
/// On a restored cluster's first member: the snapshot it starts from, as [`RestoreStatus`] JSON.
pub const RESTORED_FROM_ANNOTATION: &str = "etcd.database.coreos.com/restored-from";
const SNAPSHOT_VOLUME: &str = "snapshot";
/// A snapshot downloaded from a bucket, in the restoring member's emptyDir.
const DOWNLOADED_SNAPSHOT: &str = "snapshot.db";
const SNAPSHOT_MOUNT: &str = "/var/etcd-restore";
/// How often the kubelet asks a member's `/health` (one small read confirmed by the leader).
const READINESS_PERIOD_SECONDS: i32 = 1;
/// Where the members' certificates are mounted (the coreos operator's paths).
const PEER_TLS_VOLUME: &str = "member-peer-tls";
const PEER_TLS_DIR: &str = "/etc/etcdtls/member/peer-tls";
const SERVER_TLS_VOLUME: &str = "member-server-tls";
const SERVER_TLS_DIR: &str = "/etc/etcdtls/member/server-tls";
/// Plain-HTTP `/health`, `/livez` and `/metrics` of a member serving TLS to clients, who must
/// present a certificate the kubelet's probes do not have.
pub const METRICS_PORT: u16 = 2381;

/// The label naming a member's (or a Service's, a claim's) cluster.
pub const CLUSTER_LABEL: &str = "etcd_cluster";

/// `app=etcd,etcd_cluster=<name>`: the coreos operator's labels, which users select by.
pub fn selector_labels(cluster: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app".to_owned(), "etcd".to_owned()),
        (CLUSTER_LABEL.to_owned(), cluster.to_owned()),
    ])
}

pub fn selector(cluster: &str) -> String {
    format!("app=etcd,{CLUSTER_LABEL}={cluster}")
}

fn labels(cluster: &str) -> BTreeMap<String, String> {
    let mut labels = selector_labels(cluster);
    labels.insert(MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned());
    labels
}

fn meta(cluster: &EtcdCluster, name: String, owner: &OwnerReference) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: cluster.namespace(),
        labels: Some(labels(&cluster.name_any())),
        owner_references: Some(vec![owner.clone()]),
        ..ObjectMeta::default()
    }
}

/// How a member's process joins: founding a new cluster, or joining one that has added it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterState {
    New,
    Existing,
}

/// Everything a member Pod depends on besides the spec.
pub struct MemberPod<'a> {
    pub name: &'a str,
    pub version: &'a Version,
    /// `name=peerURL` of every member, this one included, as etcd checks it at start.
    pub initial_cluster: &'a str,
    pub state: ClusterState,
    pub addressing: Addressing,
    /// The snapshot the first member of a restored cluster starts from.
    pub restore: Option<&'a RestoreStatus>,
    /// The operator's image, which downloads a snapshot from a bucket.
    pub helper_image: Option<&'a str>,
}

/// A member's Pod: its name is its hostname (`hostname` + `subdomain` give it a stable DNS name
/// under the headless Service); `restartPolicy: Never`, since a member that died is replaced,
/// not restarted on a data dir etcd may no longer accept.
pub fn member_pod(cluster: &EtcdCluster, owner: &OwnerReference, member: &MemberPod) -> Pod {
    let name = cluster.name_any();
    let namespace = cluster.namespace().unwrap_or_default();
    let policy = cluster.spec.pod.clone().unwrap_or_default();
    let (peer_tls, server_tls) = (
        cluster.spec.peer_tls_secret(),
        cluster.spec.server_tls_secret(),
    );
    let listen = member
        .addressing
        .listen_host(&name, &namespace, member.name);
    let peer_url = member
        .addressing
        .peer_url(&name, &namespace, member.name, peer_tls.is_some());
    let client_url =
        member
            .addressing
            .client_url(&name, &namespace, member.name, server_tls.is_some());
    let state = match member.state {
        ClusterState::New => "new",
        ClusterState::Existing => "existing",
    };
    // The membership flags etcd (and `etcdutl snapshot restore`, for a restored member) reads.
    let membership = [
        format!("--name={}", member.name),
        format!("--data-dir={DATA_DIR}"),
        format!("--initial-advertise-peer-urls={peer_url}"),
        format!("--initial-cluster={}", member.initial_cluster),
        format!(
            "--initial-cluster-token={}",
            cluster.uid().unwrap_or_default()
        ),
    ];
    let command: Vec<String> = std::iter::once("/usr/local/bin/etcd".to_owned())
        .chain(membership.iter().cloned())
        .chain([
            format!(
                "--listen-peer-urls={}://{listen}:{PEER_PORT}",
                scheme(peer_tls.is_some())
            ),
            format!(
                "--listen-client-urls={}://{listen}:{CLIENT_PORT}",
                scheme(server_tls.is_some())
            ),
            format!("--advertise-client-urls={client_url}"),
            format!("--initial-cluster-state={state}"),
        ])
        .chain(peer_tls.into_iter().flat_map(|_| {
            [
                "--peer-client-cert-auth=true".to_owned(),
                // Peers are authenticated by the CA; etcd would also match a peer's address to
                // its certificate's names by reverse DNS, which fails for a member that has just
                // started (its Pod is not in the Service's DNS yet), and a joining member that
                // is refused exits.
                member.version.peer_skip_client_san_flag().to_owned(),
                format!("--peer-trusted-ca-file={PEER_TLS_DIR}/peer-ca.crt"),
                format!("--peer-cert-file={PEER_TLS_DIR}/peer.crt"),
                format!("--peer-key-file={PEER_TLS_DIR}/peer.key"),
            ]
        }))
        .chain(server_tls.into_iter().flat_map(|_| {
            [
                "--client-cert-auth=true".to_owned(),
                format!("--trusted-ca-file={SERVER_TLS_DIR}/server-ca.crt"),
                format!("--cert-file={SERVER_TLS_DIR}/server.crt"),
                format!("--key-file={SERVER_TLS_DIR}/server.key"),
                format!("--listen-metrics-urls=http://{listen}:{METRICS_PORT}"),
            ]
        }))
        .collect();
    let image = image(&cluster.spec.repository, member.version);
    let mut pod_labels = policy.labels.clone();
    pod_labels.extend(labels(&name));
    let mut annotations = policy.annotations.clone();
    annotations.insert(VERSION_ANNOTATION.to_owned(), member.version.to_string());
    let data = match &policy.persistent_volume_claim_spec {
        Some(_) => Volume {
            name: DATA_VOLUME.into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: member.name.to_owned(),
                read_only: None,
            }),
            ..Volume::default()
        },
        None => Volume {
            name: DATA_VOLUME.into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        },
    };
    let data_mount = VolumeMount {
        name: DATA_VOLUME.into(),
        mount_path: DATA_MOUNT.into(),
        ..VolumeMount::default()
    };
    let mut volumes = vec![data];
    let mut mounts = vec![data_mount.clone()];
    for (secret, volume, dir) in [
        (peer_tls, PEER_TLS_VOLUME, PEER_TLS_DIR),
        (server_tls, SERVER_TLS_VOLUME, SERVER_TLS_DIR),
    ] {
        if let Some(secret) = secret {
            let (volume, mount) = secret_volume(secret, volume, dir);
            volumes.push(volume);
            mounts.push(mount);
        }
    }
    // Probes need no certificate: on the metrics port when clients must present one.
    let health_port = IntOrString::Int(i32::from(if server_tls.is_some() {
        METRICS_PORT
    } else {
        CLIENT_PORT
    }));
    let mut ports = vec![
        container_port("client", CLIENT_PORT),
        container_port("peer", PEER_PORT),
    ];
    if server_tls.is_some() {
        ports.push(container_port("metrics", METRICS_PORT));
    }
    let mut init_containers = Vec::new();
    if let Some(restore) = member.restore {
        annotations.insert(
            RESTORED_FROM_ANNOTATION.to_owned(),
            serde_json::to_string(restore).unwrap_or_default(),
        );
        let snapshot_mount = VolumeMount {
            name: SNAPSHOT_VOLUME.into(),
            mount_path: SNAPSHOT_MOUNT.into(),
            read_only: Some(true),
            ..VolumeMount::default()
        };
        let snapshot = match (&restore.s3, member.helper_image) {
            // Downloaded (and checked) into an emptyDir first.
            (Some(s3), Some(helper_image)) => {
                let file = format!("{SNAPSHOT_MOUNT}/{DOWNLOADED_SNAPSHOT}");
                let (fetch, credentials) = fetch_container(
                    helper_image,
                    s3,
                    &file,
                    VolumeMount {
                        read_only: None,
                        ..snapshot_mount.clone()
                    },
                );
                init_containers.push(fetch);
                volumes.push(credentials);
                volumes.push(Volume {
                    name: SNAPSHOT_VOLUME.into(),
                    empty_dir: Some(EmptyDirVolumeSource::default()),
                    ..Volume::default()
                });
                file
            }
            _ => {
                volumes.push(Volume {
                    name: SNAPSHOT_VOLUME.into(),
                    persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                        claim_name: restore.claim_name.clone().unwrap_or_default(),
                        read_only: Some(true),
                    }),
                    ..Volume::default()
                });
                format!("{SNAPSHOT_MOUNT}/{}", restore.snapshot)
            }
        };
        // A new data dir from the snapshot, with this cluster's membership (`etcdutl` gives it
        // a new cluster ID, so no member of the old cluster is in it).
        let restore_command = [
            "/usr/local/bin/etcdutl".to_owned(),
            "snapshot".to_owned(),
            "restore".to_owned(),
            snapshot,
        ]
        .into_iter()
        .chain(membership.iter().cloned())
        .collect();
        init_containers.push(Container {
            name: "restore".into(),
            image: Some(image.clone()),
            command: Some(restore_command),
            volume_mounts: Some(vec![data_mount.clone(), snapshot_mount]),
            ..Container::default()
        });
    }
    Pod {
        metadata: ObjectMeta {
            labels: Some(pod_labels),
            annotations: Some(annotations),
            ..meta(cluster, member.name.to_owned(), owner)
        },
        // `restricted` unless `pod.securityContext` says otherwise (the user's choice): etcd
        // writes only its data directory, so its root filesystem is read-only.
        spec: Some(restrict(
            PodSpec {
                hostname: Some(member.name.to_owned()),
                subdomain: Some(name.clone()),
                restart_policy: Some("Never".into()),
                node_selector: non_empty(policy.node_selector.clone()),
                tolerations: non_empty_vec(policy.tolerations.clone()),
                affinity: policy.affinity.clone(),
                init_containers: non_empty_vec(init_containers),
                containers: vec![Container {
                    name: CONTAINER.into(),
                    image: Some(image),
                    command: Some(command),
                    env: non_empty_vec(policy.etcd_env.clone()),
                    resources: policy.resources.clone(),
                    ports: Some(ports),
                    // Every second: an upgrade or a restart moves on once the member is Ready
                    // again, and a member restarted on a new image often fails its first probe
                    // (not yet connected to its peers); a longer period is waited out in full.
                    readiness_probe: Some(Probe {
                        http_get: Some(HTTPGetAction {
                            path: Some("/health".into()),
                            port: health_port.clone(),
                            ..HTTPGetAction::default()
                        }),
                        period_seconds: Some(READINESS_PERIOD_SECONDS),
                        ..Probe::default()
                    }),
                    // A member that stops answering even a local read (a hung process) is killed;
                    // with `restartPolicy: Never` its Pod fails and the member is replaced once the
                    // others hold a quorum. Older releases have no `/livez`; their `/health` needs a
                    // leader, and killing members that lost theirs would turn a partition into an
                    // outage.
                    liveness_probe: member.version.serves_livez().then(|| Probe {
                        http_get: Some(HTTPGetAction {
                            path: Some("/livez".into()),
                            port: health_port,
                            ..HTTPGetAction::default()
                        }),
                        period_seconds: Some(10),
                        timeout_seconds: Some(5),
                        failure_threshold: Some(6),
                        ..Probe::default()
                    }),
                    volume_mounts: Some(mounts),
                    ..Container::default()
                }],
                volumes: Some(volumes),
                ..PodSpec::default()
            },
            policy
                .security_context
                .clone()
                .unwrap_or_else(|| pod_security_context(Some(NON_ROOT))),
            true,
        )),
        status: None,
    }
}

/// The member's data claim, when the spec asks for persistent storage. Named after the Pod.
pub fn member_claim(
    cluster: &EtcdCluster,
    owner: &OwnerReference,
    pod: &str,
) -> Option<PersistentVolumeClaim> {
    let policy: &PodPolicy = cluster.spec.pod.as_ref()?;
    let spec = policy.persistent_volume_claim_spec.clone()?;
    Some(PersistentVolumeClaim {
        metadata: meta(cluster, pod.to_owned(), owner),
        spec: Some(spec),
        status: None,
    })
}

/// The claim a member Pod keeps its data on (`None`: its data is on emptyDir).
pub fn data_claim(pod: &Pod) -> Option<String> {
    let volumes = pod.spec.as_ref()?.volumes.as_ref()?;
    let data = volumes.iter().find(|v| v.name == DATA_VOLUME)?;
    Some(data.persistent_volume_claim.as_ref()?.claim_name.clone())
}

/// The etcd version a member Pod's image runs (from the annotation the operator sets with it).
pub fn pod_version(pod: &Pod) -> Option<Version> {
    Version::parse(pod.annotations().get(VERSION_ANNOTATION)?)
}

/// The ID of the member container the kubelet last reported (`None`: none started yet).
pub fn container_id(pod: &Pod) -> Option<&str> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    let id = statuses
        .iter()
        .find(|c| c.name == CONTAINER)?
        .container_id
        .as_deref()?;
    Some(id).filter(|id| !id.is_empty())
}

/// The kubelet has reported another member container than the one an image change (the
/// upgrade's patch names it in [`REPLACED_CONTAINER_ANNOTATION`]) replaced, if any: until the
/// kubelet has restarted it (a second or two), the Pod shows the old container and its `Ready`,
/// and its `observedGeneration` moves before that too. By ID, not by image: the kubelet reports
/// one of the image's tags, not necessarily the spec's.
pub fn replaced_container_gone(pod: &Pod) -> bool {
    match pod.annotations().get(REPLACED_CONTAINER_ANNOTATION) {
        Some(replaced) => container_id(pod).is_some_and(|id| id != replaced),
        None => true,
    }
}

/// Secret `secret` mounted read-only at `dir`.
pub fn secret_volume(secret: &str, volume: &str, dir: &str) -> (Volume, VolumeMount) {
    (
        Volume {
            name: volume.into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret.to_owned()),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        },
        VolumeMount {
            name: volume.into(),
            mount_path: dir.into(),
            read_only: Some(true),
            ..VolumeMount::default()
        },
    )
}

fn container_port(name: &str, port: u16) -> ContainerPort {
    ContainerPort {
        name: Some(name.into()),
        container_port: i32::from(port),
        ..ContainerPort::default()
    }
}

fn service_port(name: &str, port: u16) -> ServicePort {
    ServicePort {
        name: Some(name.into()),
        port: i32::from(port),
        target_port: Some(IntOrString::Int(i32::from(port))),
        ..ServicePort::default()
    }
}

/// The headless Service that gives each member its DNS name; not-ready addresses are published
/// because a joining member must be reachable before it is ready.
pub fn peer_service(cluster: &EtcdCluster, owner: &OwnerReference) -> Service {
    let name = cluster.name_any();
    Service {
        metadata: meta(cluster, name.clone(), owner),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            publish_not_ready_addresses: Some(true),
            selector: Some(selector_labels(&name)),
            ports: Some(vec![
                service_port("client", CLIENT_PORT),
                service_port("peer", PEER_PORT),
            ]),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// `<name>-client`: what applications connect to.
pub fn client_service(cluster: &EtcdCluster, owner: &OwnerReference) -> Service {
    let name = cluster.name_any();
    Service {
        metadata: meta(cluster, format!("{name}-client"), owner),
        spec: Some(ServiceSpec {
            selector: Some(selector_labels(&name)),
            ports: Some(vec![service_port("client", CLIENT_PORT)]),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// Voluntary evictions (node drains) may take only members the quorum can spare. An integer
/// `minAvailable`, the form Kubernetes' docs give for Pods an operator owns: the disruption
/// controller then counts the Pods it selects, where `maxUnavailable` has it look up the
/// EtcdCluster's scale subresource (seen failing as `CalculateExpectedPodCountFailed`).
pub fn disruption_budget(cluster: &EtcdCluster, owner: &OwnerReference) -> PodDisruptionBudget {
    let name = cluster.name_any();
    let size = usize::try_from(cluster.spec.size).unwrap_or(1);
    PodDisruptionBudget {
        metadata: meta(cluster, name.clone(), owner),
        spec: Some(PodDisruptionBudgetSpec {
            min_available: Some(IntOrString::Int(
                i32::try_from(quorum(size)).unwrap_or(i32::MAX),
            )),
            selector: Some(LabelSelector {
                match_labels: Some(selector_labels(&name)),
                ..LabelSelector::default()
            }),
            ..PodDisruptionBudgetSpec::default()
        }),
        status: None,
    }
}

fn non_empty(map: BTreeMap<String, String>) -> Option<BTreeMap<String, String>> {
    (!map.is_empty()).then_some(map)
}

fn non_empty_vec<T>(items: Vec<T>) -> Option<Vec<T>> {
    (!items.is_empty()).then_some(items)
}

#[cfg(test)]
mod tests {
    use app_operator_api::EtcdClusterSpec;

    use super::*;

    fn cluster(spec: serde_json::Value) -> (EtcdCluster, OwnerReference) {
        let spec: EtcdClusterSpec = serde_json::from_value(spec).unwrap();
        let mut cluster = EtcdCluster::new("db", spec);
        cluster.metadata.namespace = Some("prod".into());
        cluster.metadata.uid = Some("uid-1".into());
        let owner = crate::reconcile::apply::controller_reference(&cluster).unwrap();
        (cluster, owner)
    }

    #[test]
    fn a_replaced_member_container_is_gone_once_the_kubelet_reports_another() {
        let pod = |replaced: Option<&str>, reported: Option<&str>| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": { "annotations": replaced.map(|id| serde_json::json!({
                    REPLACED_CONTAINER_ANNOTATION: id
                })) },
                "status": { "containerStatuses": [{
                    "name": "etcd", "image": "etcd", "imageID": "", "ready": true,
                    "restartCount": 0, "containerID": reported
                }] }
            }))
            .unwrap()
        };
        assert!(
            replaced_container_gone(&pod(None, Some("containerd://a"))),
            "never upgraded"
        );
        assert!(
            !replaced_container_gone(&pod(Some("containerd://a"), Some("containerd://a"))),
            "the replaced container is still reported"
        );
        assert!(replaced_container_gone(&pod(
            Some("containerd://a"),
            Some("containerd://b")
        )));
        assert!(
            !replaced_container_gone(&pod(Some(""), None)),
            "replaced before any ID was reported (kwok): not until one is"
        );
    }

    #[test]
    fn a_member_pod_joins_under_its_stable_dns_name_and_is_never_restarted() {
        let (cluster, owner) = cluster(serde_json::json!({
            "size": 3,
            "pod": { "labels": { "team": "a" }, "etcdEnv": [{ "name": "ETCD_QUOTA_BACKEND_BYTES", "value": "1" }] }
        }));
        let version = Version::parse("3.6.16").unwrap();
        let member = MemberPod {
            name: "db-abcde12345",
            version: &version,
            initial_cluster: "db-1=http://a:2380,db-abcde12345=http://b:2380",
            state: ClusterState::Existing,
            addressing: Addressing::ClusterDns,
            restore: None,
            helper_image: None,
        };
        let pod = member_pod(&cluster, &owner, &member);
        let spec = pod.spec.unwrap();
        assert_eq!(spec.hostname.as_deref(), Some("db-abcde12345"));
        assert_eq!(spec.subdomain.as_deref(), Some("db"));
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        let container = &spec.containers[0];
        let readiness = container.readiness_probe.as_ref();
        assert_eq!(
            readiness.and_then(|p| p.period_seconds),
            Some(1),
            "a restarted member is back in its Services within a second of answering"
        );
        let liveness = container
            .liveness_probe
            .as_ref()
            .and_then(|p| p.http_get.as_ref());
        assert_eq!(
            liveness.and_then(|get| get.path.as_deref()),
            Some("/livez"),
            "a hung member is killed, then replaced"
        );
        let old = Version::parse("3.5.10").unwrap();
        let old_pod = member_pod(
            &cluster,
            &owner,
            &MemberPod {
                version: &old,
                ..member
            },
        );
        assert_eq!(
            old_pod.spec.unwrap().containers[0].liveness_probe,
            None,
            "no /livez before 3.5.11"
        );
        assert_eq!(
            container.image.as_deref(),
            Some("gcr.io/etcd-development/etcd:v3.6.16")
        );
        let command = container.command.clone().unwrap();
        for flag in [
            "--name=db-abcde12345",
            "--listen-peer-urls=http://0.0.0.0:2380",
            "--advertise-client-urls=http://db-abcde12345.db.prod.svc:2379",
            "--initial-advertise-peer-urls=http://db-abcde12345.db.prod.svc:2380",
            "--initial-cluster=db-1=http://a:2380,db-abcde12345=http://b:2380",
            "--initial-cluster-state=existing",
            "--initial-cluster-token=uid-1",
        ] {
            assert!(
                command.iter().any(|c| c == flag),
                "{flag} missing: {command:?}"
            );
        }
        let labels = pod.metadata.labels.unwrap();
        assert_eq!(labels.get("app").map(String::as_str), Some("etcd"));
        assert_eq!(labels.get("etcd_cluster").map(String::as_str), Some("db"));
        assert_eq!(labels.get("team").map(String::as_str), Some("a"));
        assert_eq!(
            pod.metadata
                .annotations
                .unwrap()
                .get(VERSION_ANNOTATION)
                .map(String::as_str),
            Some("3.6.16")
        );
        assert_eq!(container.env.as_ref().map(Vec::len), Some(1));
        assert!(spec.volumes.unwrap()[0].empty_dir.is_some());
        assert!(member_claim(&cluster, &owner, "db-abcde12345").is_none());
    }

    #[test]
    fn a_tls_member_speaks_https_with_its_secrets_and_is_probed_on_the_plain_metrics_port() {
        let (cluster, owner) = cluster(serde_json::json!({
            "size": 3,
            "TLS": { "static": {
                "member": { "peerSecret": "db-peer", "serverSecret": "db-server" },
                "operatorSecret": "db-operator"
            }}
        }));
        let version = Version::parse("3.6.16").unwrap();
        let member = MemberPod {
            name: "db-abcde12345",
            version: &version,
            initial_cluster: "db-abcde12345=https://db-abcde12345.db.prod.svc:2380",
            state: ClusterState::New,
            addressing: Addressing::ClusterDns,
            restore: None,
            helper_image: None,
        };
        let spec = member_pod(&cluster, &owner, &member).spec.unwrap();
        let container = &spec.containers[0];
        let command = container.command.clone().unwrap();
        for flag in [
            "--listen-peer-urls=https://0.0.0.0:2380",
            "--listen-client-urls=https://0.0.0.0:2379",
            "--advertise-client-urls=https://db-abcde12345.db.prod.svc:2379",
            "--initial-advertise-peer-urls=https://db-abcde12345.db.prod.svc:2380",
            "--peer-client-cert-auth=true",
            "--peer-skip-client-san-verification=true",
            "--peer-trusted-ca-file=/etc/etcdtls/member/peer-tls/peer-ca.crt",
            "--peer-cert-file=/etc/etcdtls/member/peer-tls/peer.crt",
            "--peer-key-file=/etc/etcdtls/member/peer-tls/peer.key",
            "--client-cert-auth=true",
            "--trusted-ca-file=/etc/etcdtls/member/server-tls/server-ca.crt",
            "--cert-file=/etc/etcdtls/member/server-tls/server.crt",
            "--key-file=/etc/etcdtls/member/server-tls/server.key",
            "--listen-metrics-urls=http://0.0.0.0:2381",
        ] {
            assert!(
                command.iter().any(|c| c == flag),
                "{flag} missing: {command:?}"
            );
        }
        let secrets: Vec<_> = spec
            .volumes
            .iter()
            .flatten()
            .filter_map(|v| v.secret.as_ref()?.secret_name.clone())
            .collect();
        assert_eq!(
            secrets,
            ["db-peer", "db-server"],
            "the operator's is not mounted"
        );
        let mounts: Vec<_> = container
            .volume_mounts
            .iter()
            .flatten()
            .filter(|m| m.read_only == Some(true))
            .map(|m| m.mount_path.as_str())
            .collect();
        assert_eq!(
            mounts,
            [
                "/etc/etcdtls/member/peer-tls",
                "/etc/etcdtls/member/server-tls"
            ]
        );
        for probe in [&container.readiness_probe, &container.liveness_probe] {
            let get = probe.as_ref().and_then(|p| p.http_get.as_ref()).unwrap();
            assert_eq!(get.port, IntOrString::Int(2381), "{get:?}");
            assert_eq!(get.scheme, None, "plain HTTP: {get:?}");
        }
        assert_eq!(
            crate::controllers::restricted::restricted_violations(&spec),
            Vec::<String>::new()
        );

        let (peer_only, owner) = self::cluster(serde_json::json!({
            "size": 3, "TLS": { "static": { "member": { "peerSecret": "db-peer" } } }
        }));
        let old = Version::parse("3.5.21").unwrap();
        let spec = member_pod(
            &peer_only,
            &owner,
            &MemberPod {
                version: &old,
                ..member
            },
        )
        .spec
        .unwrap();
        let command = spec.containers[0].command.clone().unwrap();
        assert!(command.contains(&"--listen-client-urls=http://0.0.0.0:2379".to_owned()));
        assert!(command.contains(&"--listen-peer-urls=https://0.0.0.0:2380".to_owned()));
        assert!(
            !command
                .iter()
                .any(|c| c.starts_with("--listen-metrics-urls"))
        );
    }

    #[test]
    fn a_member_restored_from_a_bucket_downloads_the_object_before_etcdutl_reads_it() {
        let version = Version::parse("3.6.16").unwrap();
        let object = RestoreStatus {
            backup_name: None,
            claim_name: None,
            s3: Some(app_operator_api::etcdbackup::S3Source {
                path: "backups/ns/etcd.db".into(),
                aws_secret: "keys".into(),
                endpoint: Some("http://10.0.0.1:7070".into()),
                force_path_style: true,
            }),
            snapshot: "backups/ns/etcd.db".into(),
            etcd_revision: None,
        };
        let member = MemberPod {
            name: "db-abcde12345",
            version: &version,
            initial_cluster: "db-abcde12345=http://b:2380",
            state: ClusterState::New,
            addressing: Addressing::ClusterDns,
            restore: Some(&object),
            helper_image: Some("app-operator:v1"),
        };
        let (cluster, owner) = cluster(serde_json::json!({ "size": 1 }));
        let spec = member_pod(&cluster, &owner, &member).spec.unwrap();
        assert_eq!(
            crate::controllers::restricted::restricted_violations(&spec),
            Vec::<String>::new()
        );
        let init = spec.init_containers.unwrap();
        let names: Vec<&str> = init.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["fetch", "restore"]);
        assert!(
            init[0]
                .args
                .as_ref()
                .unwrap()
                .contains(&"--file=/var/etcd-restore/snapshot.db".to_owned())
        );
        assert_eq!(
            init[1].command.as_ref().unwrap()[3],
            "/var/etcd-restore/snapshot.db"
        );
        let volumes = spec.volumes.unwrap();
        let snapshot = volumes.iter().find(|v| v.name == "snapshot").unwrap();
        assert!(snapshot.empty_dir.is_some(), "{snapshot:?}");
    }

    #[test]
    fn members_are_restricted_unless_the_pod_policy_sets_a_security_context() {
        let version = Version::parse("3.6.16").unwrap();
        let snapshot = RestoreStatus {
            backup_name: Some("nightly".into()),
            claim_name: Some("backups".into()),
            s3: None,
            snapshot: "nightly-0.db".into(),
            etcd_revision: Some(1),
        };
        let member = MemberPod {
            name: "db-abcde12345",
            version: &version,
            initial_cluster: "db-abcde12345=http://b:2380",
            state: ClusterState::New,
            addressing: Addressing::ClusterDns,
            restore: Some(&snapshot),
            helper_image: None,
        };
        let (default, owner) = cluster(serde_json::json!({ "size": 1 }));
        let spec = member_pod(&default, &owner, &member).spec.unwrap();
        assert_eq!(
            crate::controllers::restricted::restricted_violations(&spec),
            Vec::<String>::new(),
            "the member and its restore init container"
        );
        assert_eq!(spec.security_context.unwrap().run_as_user, Some(65532));

        let (as_root, owner) = cluster(serde_json::json!({
            "size": 1, "pod": { "securityContext": { "runAsUser": 0 } }
        }));
        let spec = member_pod(&as_root, &owner, &member).spec.unwrap();
        let pod = spec.security_context.clone().unwrap();
        assert_eq!((pod.run_as_user, pod.run_as_non_root), (Some(0), None));
        assert!(
            !crate::controllers::restricted::restricted_violations(&spec).is_empty(),
            "the user's choice, not restricted"
        );
    }

    #[test]
    fn services_and_the_budget_keep_quorum_and_reach_unready_members() {
        let (cluster, owner) = cluster(serde_json::json!({ "size": 5 }));
        let peer = peer_service(&cluster, &owner).spec.unwrap();
        assert_eq!(peer.cluster_ip.as_deref(), Some("None"));
        assert_eq!(peer.publish_not_ready_addresses, Some(true));
        assert_eq!(
            client_service(&cluster, &owner).metadata.name.as_deref(),
            Some("db-client")
        );
        let budget = disruption_budget(&cluster, &owner).spec.unwrap();
        assert_eq!(
            budget.min_available,
            Some(IntOrString::Int(3)),
            "5 members keep a quorum of 3"
        );
        assert_eq!(budget.max_unavailable, None);
    }
}
