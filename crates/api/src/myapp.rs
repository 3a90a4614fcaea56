//! `MyApp` (`example.com/v1`): one resource that becomes a Deployment, a Service and, when asked,
//! a HorizontalPodAutoscaler.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::conditions::{Condition, conditions_schema};
use crate::quantity::{Quantity, quantity_schema};
use crate::requests_within_limits;
use crate::validation::{DNS_1035_NAME_RULE, ENV_NAME_PATTERN, IMAGE_PATTERN};

/// MyAppSpec defines the desired state of MyApp.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "example.com",
    version = "v1",
    kind = "MyApp",
    namespaced,
    status = "MyAppStatus",
    shortname = "mya",
    category = "all",
    category = "app-operator",
    doc = "MyApp runs a container image as a Deployment, exposed by a Service and, when autoscaling is enabled, scaled by a HorizontalPodAutoscaler. The operator owns those children: edit the MyApp, not them.",
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".spec.replicas"),
    printcolumn(
        name = "Ready Replicas",
        type_ = "integer",
        json_path = ".status.readyReplicas"
    ),
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
        name = "Image",
        type_ = "string",
        priority = 1,
        json_path = ".spec.image"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.readyReplicas",
        label_selector_path = ".status.selector"
    ),
    validation = Rule::new(DNS_1035_NAME_RULE).message(
        "metadata.name must be at most 63 characters of lowercase letters, digits and '-', start with a letter and end with a letter or digit (a DNS-1035 label): it names the MyApp's Service"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MyAppSpec {
    /// Replicas is the desired number of replicas (ignored while autoscaling is enabled).
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 1, max = 100))]
    pub replicas: i32,

    /// Image is the container image to use, e.g. `nginx:1.27` or `nginx@sha256:…`.
    #[schemars(regex(pattern = IMAGE_PATTERN), length(max = 512))]
    pub image: String,

    /// Port is the container port to expose.
    #[serde(default = "default_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,

    /// Resources defines the compute resources for the application.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,

    /// Env defines environment variables for the application, each name once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    // A list keyed by name, as a Pod's env is: a duplicate name is refused at apply time, instead
    // of being accepted here and refused in the Deployment.
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub env: Vec<EnvVar>,

    /// ServiceType defines the type of Service to create.
    #[serde(default)]
    pub service_type: ServiceType,

    /// AutoScaling defines the autoscaling configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_scaling: Option<AutoScalingSpec>,
}

fn default_replicas() -> i32 {
    1
}

fn default_port() -> i32 {
    8080
}

/// ResourceRequirements defines the compute resources.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[x_kube(
    validation = Rule::new(requests_within_limits!("cpu")).message("resources.requests.cpu must be less than or equal to resources.limits.cpu"),
    validation = Rule::new(requests_within_limits!("memory")).message("resources.requests.memory must be less than or equal to resources.limits.memory")
)]
pub struct ResourceRequirements {
    /// Limits describes the maximum amount of compute resources allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<ResourceList>,
    /// Requests describes the minimum amount of compute resources required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<ResourceList>,
}

/// ResourceList is a set of (resource name, quantity) pairs.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct ResourceList {
    /// CPU quantity (e.g., "100m", "1" or 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "quantity_schema")]
    pub cpu: Option<Quantity>,
    /// Memory quantity (e.g., "128Mi", "1Gi").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "quantity_schema")]
    pub memory: Option<Quantity>,
}

/// EnvVar represents an environment variable: a literal value or a reference, exactly one.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.value) != has(self.valueFrom)").message("exactly one of value or valueFrom must be set"))]
pub struct EnvVar {
    /// Name of the environment variable.
    #[schemars(regex(pattern = ENV_NAME_PATTERN), length(min = 1, max = 256))]
    pub name: String,
    /// Value of the environment variable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// ValueFrom is a source for the environment variable's value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_from: Option<EnvVarSource>,
}

/// EnvVarSource represents a source for the value of an EnvVar: a Secret key or a ConfigMap key.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.secretKeyRef) != has(self.configMapKeyRef)").message("exactly one of secretKeyRef or configMapKeyRef must be set"))]
pub struct EnvVarSource {
    /// SecretKeyRef selects a key of a secret in the pod's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_key_ref: Option<KeySelector>,
    /// ConfigMapKeyRef selects a key of a ConfigMap in the pod's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_key_ref: Option<KeySelector>,
}

/// Selects a key of a Secret or ConfigMap.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct KeySelector {
    /// Name of the Secret or ConfigMap.
    #[schemars(length(min = 1))]
    pub name: String,
    /// Key to select.
    #[schemars(length(min = 1))]
    pub key: String,
}

/// ServiceType defines the type of Service to create.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub enum ServiceType {
    #[default]
    ClusterIP,
    NodePort,
    LoadBalancer,
}

/// AutoScalingSpec defines the autoscaling configuration.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.minReplicas <= self.maxReplicas").message("minReplicas must be less than or equal to maxReplicas"))]
pub struct AutoScalingSpec {
    /// Enabled indicates whether autoscaling is enabled.
    #[serde(default)]
    pub enabled: bool,
    /// MinReplicas is the minimum number of replicas.
    #[serde(default = "default_min_replicas")]
    #[schemars(range(min = 1, max = 100))]
    pub min_replicas: i32,
    /// MaxReplicas is the maximum number of replicas.
    #[schemars(range(min = 1, max = 100))]
    pub max_replicas: i32,
    /// TargetCPUUtilizationPercentage is the target average CPU utilization.
    #[serde(default = "default_target_cpu")]
    #[schemars(range(min = 1, max = 100))]
    #[serde(rename = "targetCPUUtilizationPercentage")]
    pub target_cpu_utilization_percentage: i32,
}

fn default_min_replicas() -> i32 {
    1
}

fn default_target_cpu() -> i32 {
    80
}

impl MyAppSpec {
    /// The autoscaling configuration while autoscaling is enabled.
    pub fn enabled_auto_scaling(&self) -> Option<&AutoScalingSpec> {
        self.auto_scaling.as_ref().filter(|a| a.enabled)
    }
}

/// MyAppStatus defines the observed state of MyApp.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MyAppStatus {
    /// Conditions: Ready (every replica of the current spec ready), Progressing (a rollout under
    /// way), Degraded (the last reconcile failed: its reason and message).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// ReadyReplicas is the number of ready replicas.
    #[serde(default)]
    pub ready_replicas: i32,
    /// AvailableReplicas is the number of available replicas.
    #[serde(default)]
    pub available_replicas: i32,
    /// ObservedGeneration is the most recent generation observed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// LastUpdateTime is when the status last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,
    /// Selector is the label selector of the MyApp's Pods (for the scale subresource).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
}
