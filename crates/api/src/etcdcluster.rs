//! `EtcdCluster` (`etcd.database.coreos.com/v1beta2`): an etcd cluster of `size` members, each a
//! Pod the operator adds to the cluster before it starts. The coreos etcd-operator's API, so its
//! manifests (seed 004) apply unchanged.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, EnvVar, PersistentVolumeClaimSpec, PodSecurityContext, ResourceRequirements,
    Toleration,
};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::conditions::{Condition, conditions_schema};
use crate::etcdbackup::{FILE_PATTERN, S3Source};

/// The image repository of the etcd project's own releases.
pub const DEFAULT_REPOSITORY: &str = "gcr.io/etcd-development/etcd";

/// The etcd release used when `version` is not set.
pub const DEFAULT_VERSION: &str = "3.6.16";

/// Member Pods are `<name>-<10 random characters>` and their names are hostnames (DNS labels);
/// the client Service is `<name>-client` (a DNS-1035 label).
const NAME_RULE: &str =
    "self.metadata.name.size() <= 52 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')";

/// `X.Y.Z` with an optional leading `v` and pre-release, as etcd tags its releases.
const VERSION_PATTERN: &str =
    r"^v?(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$";

/// CEL: the new version is not older than the old one (the semver library normalises the `v`).
const NO_DOWNGRADE_RULE: &str = "!isSemver(self, true) || !isSemver(oldSelf, true) || semver(self, true).compareTo(semver(oldSelf, true)) >= 0";

/// CEL on the whole object: a restore is neither added nor removed after creation (the field's
/// own rule keeps its value).
const RESTORE_AT_CREATION_RULE: &str = "has(self.spec.restore) == has(oldSelf.spec.restore)";

/// CEL on the whole object: TLS is neither turned on nor off after creation (members' URLs
/// carry the scheme, and etcd cannot move a running member between them).
const TLS_AT_CREATION_RULE: &str = "has(self.spec.TLS) == has(oldSelf.spec.TLS)";

/// CEL on `static`: clients (the operator among them) speak TLS exactly when the members serve
/// it, and a member serving TLS asks clients for a certificate, so the operator needs one.
const CLIENT_TLS_RULE: &str =
    "has(self.operatorSecret) == (has(self.member) && has(self.member.serverSecret))";

/// CEL: the labels the operator selects its Pods by stay its own.
const RESERVED_LABELS_RULE: &str = "!('app' in self) && self.all(k, !k.startsWith('etcd_'))";

/// EtcdClusterSpec defines the desired state of an etcd cluster.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "etcd.database.coreos.com",
    version = "v1beta2",
    kind = "EtcdCluster",
    namespaced,
    status = "EtcdClusterStatus",
    shortname = "etcd",
    category = "app-operator",
    doc = "EtcdCluster is an etcd cluster of `size` members, one Pod each: members are added one at a time before they start, dead members are replaced while a quorum holds, and a new `version` is rolled out member by member. With `restore` set at creation, the cluster starts from an EtcdBackup's snapshot or an object in a bucket.",
    printcolumn(name = "Size", type_ = "integer", json_path = ".spec.size"),
    printcolumn(
        name = "Ready Members",
        type_ = "integer",
        json_path = ".status.readyMembers"
    ),
    printcolumn(name = "Version", type_ = "string", json_path = ".status.currentVersion"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].message"
    ),
    printcolumn(
        name = "Phase",
        type_ = "string",
        priority = 1,
        json_path = ".status.phase"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    scale(
        spec_replicas_path = ".spec.size",
        status_replicas_path = ".status.size",
        label_selector_path = ".status.selector"
    ),
    validation = Rule::new(NAME_RULE).message(
        "metadata.name must be at most 52 characters of lowercase letters, digits and '-', start with a letter and end with a letter or digit: member Pods are named <name>-<10 characters> and used as hostnames"
    ),
    validation = Rule::new(RESTORE_AT_CREATION_RULE).message("spec.restore is set at creation and cannot change"),
    validation = Rule::new(TLS_AT_CREATION_RULE).message("spec.TLS is set at creation and cannot change: create a new cluster (from a backup) to turn TLS on or off")
)]
#[serde(rename_all = "camelCase")]
pub struct EtcdClusterSpec {
    /// Size is the number of members: 1 to 7 (an odd number tolerates the most failures).
    #[schemars(range(min = 1, max = 7))]
    pub size: i32,

    /// Version is the etcd release the members run, e.g. `3.6.16` or `v3.6.16`. It may only go up,
    /// one minor release at a time.
    #[serde(default = "default_version")]
    #[schemars(regex(pattern = VERSION_PATTERN))]
    #[x_kube(validation = Rule::new(NO_DOWNGRADE_RULE).message("version cannot go down: etcd members cannot be downgraded by replacing their binary"))]
    pub version: String,

    /// Repository is the image repository of etcd; the image is `<repository>:v<version>`.
    #[serde(default = "default_repository")]
    #[schemars(length(min = 1, max = 512))]
    pub repository: String,

    /// Paused stops the operator from changing the cluster (it keeps reporting its status).
    #[serde(default)]
    pub paused: bool,

    /// Pod is the policy for the members' Pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodPolicy>,

    /// Restore seeds a new cluster from an EtcdBackup's snapshot or an object in a bucket: the
    /// first member starts from
    /// the snapshot, with this cluster's own membership, and the others join it. Set at
    /// creation only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.restore is set at creation and cannot change"))]
    pub restore: Option<RestoreSource>,

    /// TLS makes the members speak TLS to each other and to clients, with certificates from
    /// Secrets the user provides (the coreos operator's `static` policy). Set at creation only;
    /// the Secrets' contents may be rotated at any time: etcd reads its certificate files on
    /// every handshake, and the kubelet updates the mounted files.
    #[serde(rename = "TLS", default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.TLS is set at creation and cannot change: create a new cluster (from a backup) to turn TLS on or off"))]
    pub tls: Option<TlsPolicy>,
}

/// TLSPolicy says where the members' and the operator's certificates come from.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct TlsPolicy {
    /// Static certificates, in Secrets the user creates (and rotates).
    #[serde(rename = "static", default, skip_serializing_if = "Option::is_none")]
    pub static_tls: Option<StaticTls>,
}

/// StaticTLS names the Secrets, all in the cluster's namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(CLIENT_TLS_RULE).message("TLS.static.operatorSecret and TLS.static.member.serverSecret are set together: members serving TLS ask every client for a certificate, the operator's included"))]
pub struct StaticTls {
    /// Member names the Secrets of the members' own certificates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<MemberSecret>,
    /// OperatorSecret is the Secret of the client certificate the operator (and its backup
    /// Jobs) present to the members: keys `etcd-client.crt`, `etcd-client.key` and
    /// `etcd-client-ca.crt` (the CA that signed the members' server certificates). Set together
    /// with `member.serverSecret`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub operator_secret: Option<String>,
}

/// MemberSecret names the Secrets each member's certificates are in.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MemberSecret {
    /// PeerSecret is the Secret of the certificate members present to each other: keys
    /// `peer.crt`, `peer.key` and `peer-ca.crt` (the CA peers are verified against). Its
    /// certificate is used as server and as client (extended key usages serverAuth and
    /// clientAuth) and names every member: `*.<cluster>.<namespace>.svc`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub peer_secret: Option<String>,
    /// ServerSecret is the Secret of the certificate members serve clients with: keys
    /// `server.crt`, `server.key` and `server-ca.crt` (the CA client certificates are verified
    /// against). It names every member (`*.<cluster>.<namespace>.svc`) and the client Service
    /// (`<cluster>-client.<namespace>.svc`), and has both serverAuth and clientAuth usages
    /// (etcd's gateway dials its own server with it). Clients must present a certificate signed
    /// by that CA. The members' health is then served on plain HTTP on port 2381 (`/health`,
    /// `/livez`, `/metrics`: no data) for the kubelet's probes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub server_secret: Option<String>,
}

impl EtcdClusterSpec {
    fn static_tls(&self) -> Option<&StaticTls> {
        self.tls.as_ref()?.static_tls.as_ref()
    }

    /// The Secret of the members' peer certificate, when peers speak TLS.
    pub fn peer_tls_secret(&self) -> Option<&str> {
        self.static_tls()?.member.as_ref()?.peer_secret.as_deref()
    }

    /// The Secret of the members' server certificate, when clients speak TLS.
    pub fn server_tls_secret(&self) -> Option<&str> {
        self.static_tls()?.member.as_ref()?.server_secret.as_deref()
    }

    /// The Secret of the operator's client certificate, when clients speak TLS.
    pub fn operator_tls_secret(&self) -> Option<&str> {
        self.static_tls()?.operator_secret.as_deref()
    }
}

/// CEL on `restore`: one source.
const ONE_RESTORE_SOURCE_RULE: &str = "has(self.backupName) != has(self.s3)";

/// CEL on `restore`: `snapshot` picks among an EtcdBackup's snapshots.
const SNAPSHOT_OF_BACKUP_RULE: &str = "!has(self.snapshot) || has(self.backupName)";

/// RestoreSource names the snapshot a new cluster starts from: one of an EtcdBackup's, or an
/// object in a bucket (which needs no EtcdBackup, so a cluster can be restored in a namespace
/// that never held one).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new(ONE_RESTORE_SOURCE_RULE).message("spec.restore: set exactly one of backupName and s3"),
    validation = Rule::new(SNAPSHOT_OF_BACKUP_RULE).message("spec.restore.snapshot picks one of an EtcdBackup's snapshots: set it only with backupName"),
)]
pub struct RestoreSource {
    /// BackupName is an EtcdBackup in this namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub backup_name: Option<String>,
    /// Snapshot is one of its kept snapshots (a file in `status.snapshots`, or the last part of
    /// an object's key); the newest when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), regex(pattern = FILE_PATTERN))]
    pub snapshot: Option<String>,
    /// S3 is an object in a bucket, uploaded by an EtcdBackup with `storageType: S3`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3Source>,
}

/// RestoreStatus reports the snapshot a restored cluster started from.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RestoreStatus {
    /// BackupName is the EtcdBackup, when the restore named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_name: Option<String>,
    /// ClaimName is the claim the snapshot is in, when it is in a claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_name: Option<String>,
    /// S3 is the object the snapshot is, when it is in a bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3Source>,
    /// Snapshot is the file, or the object's `<bucket>/<key>`.
    pub snapshot: String,
    /// EtcdRevision of the snapshot (at least), when its EtcdBackup recorded it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etcd_revision: Option<i64>,
}

fn default_version() -> String {
    DEFAULT_VERSION.to_owned()
}

fn default_repository() -> String {
    DEFAULT_REPOSITORY.to_owned()
}

/// PodPolicy defines how the members' Pods are made.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PodPolicy {
    /// Labels added to the members' Pods; `app` and `etcd_*` are the operator's own.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[x_kube(validation = Rule::new(RESERVED_LABELS_RULE).message("pod.labels must not set 'app' or labels starting with 'etcd_': the operator selects its Pods by them"))]
    pub labels: BTreeMap<String, String>,

    /// Annotations added to the members' Pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,

    /// NodeSelector constrains the nodes the members run on.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,

    /// Tolerations of the members' Pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,

    /// Affinity of the members' Pods, e.g. to spread them over nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,

    /// Resources of the etcd container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,

    /// EtcdEnv is extra environment for the etcd container (e.g. `ETCD_QUOTA_BACKEND_BYTES`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub etcd_env: Vec<EnvVar>,

    /// SecurityContext of the members' Pods. Unset, they meet the `restricted` Pod Security
    /// Standard: UID, GID and fsGroup 65532, `runAsNonRoot`, the RuntimeDefault seccomp profile.
    /// Set, it replaces that whole (a choice that breaks `restricted`, such as UID 0, is then
    /// refused in namespaces that enforce it); the containers stay without privilege
    /// escalation or capabilities, on a read-only root filesystem.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<PodSecurityContext>,

    /// PersistentVolumeClaimSpec, when set, gives each member its own PersistentVolumeClaim for
    /// its data, deleted with the member when the member is removed. A member whose process dies
    /// is started again on its claim with its ID and data (after a node restart too). Unset,
    /// members keep their data on emptyDir, which ends with their Pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim_spec: Option<PersistentVolumeClaimSpec>,
}

/// Phase is the cluster's life stage, as the coreos operator reported it.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub enum EtcdClusterPhase {
    /// The first member is not serving yet.
    #[default]
    Creating,
    /// The cluster has served; it may be scaling, healing or upgrading.
    Running,
    /// The cluster lost every member and its data: it cannot be recovered without a backup.
    Failed,
}

/// Members lists the members by health, as etcd reports it (not as Pod readiness does).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct MembersStatus {
    /// Ready are the members that answer and are part of the quorum.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ready: Vec<String>,
    /// Unready are the members that do not answer, have not started, or are still learners.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unready: Vec<String>,
}

/// EtcdClusterStatus defines the observed state of an etcd cluster.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EtcdClusterStatus {
    /// Phase is Creating, Running or Failed.
    #[serde(default)]
    pub phase: EtcdClusterPhase,
    /// Size is the number of members in the cluster (voting and learners).
    #[serde(default)]
    pub size: i32,
    /// ReadyMembers is the number of healthy voting members.
    #[serde(default)]
    pub ready_members: i32,
    /// Members are the members' names by health.
    #[serde(default)]
    pub members: MembersStatus,
    /// CurrentVersion is the version every member runs (the oldest one during an upgrade).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_version: Option<String>,
    /// TargetVersion is the version being rolled out, while an upgrade is in progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_version: Option<String>,
    /// Conditions: Ready (available, settled and not degraded: what `kubectl wait` reads),
    /// Available (healthy members hold a quorum), Progressing, Degraded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// ObservedGeneration is the most recent generation observed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Selector is the label selector of the members' Pods (for the scale subresource).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// Restore is the snapshot the cluster started from, when it was restored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore: Option<RestoreStatus>,
}
