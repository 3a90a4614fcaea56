//! Schema patterns shared by the resources (validated by the API server, never parsed here).

/// A container image reference: the tutorial's character set plus `@` and `_`, so digests
/// (`nginx@sha256:…`) and underscores in repository names are accepted.
pub const IMAGE_PATTERN: &str = r"^[a-zA-Z0-9\-\./:@_]+$";

/// A non-negative Kubernetes resource quantity (`100m`, `1`, `0.5`, `128Mi`, `1e3`), as
/// `k8s.io/apimachinery/pkg/api/resource` accepts it.
pub const QUANTITY_PATTERN: &str = r"^(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

/// A C-identifier-like environment variable name, as Kubernetes validates `env[].name`.
pub const ENV_NAME_PATTERN: &str = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$";

/// CEL: the object's name is a DNS-1035 label, as a Service name must be.
pub const DNS_1035_NAME_RULE: &str =
    "self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')";

/// CEL: the object's name fits in a label value (object names already use only its characters).
pub const LABEL_VALUE_NAME_RULE: &str = "self.metadata.name.size() <= 63";

/// CEL on a `resources` object: `requests.<resource>` is at most `limits.<resource>` (compared as
/// quantities, so `500m` <= `1`); unset or malformed values are left to the other checks. The
/// values are int-or-string (`2` or `"2"`), hence `string(…)`.
#[macro_export]
macro_rules! requests_within_limits {
    ($resource:literal) => {
        concat!(
            "!has(self.requests) || !has(self.limits) || !has(self.requests.",
            $resource,
            ") || !has(self.limits.",
            $resource,
            ") || !isQuantity(string(self.requests.",
            $resource,
            ")) || !isQuantity(string(self.limits.",
            $resource,
            ")) || quantity(string(self.requests.",
            $resource,
            ")).compareTo(quantity(string(self.limits.",
            $resource,
            "))) <= 0"
        )
    };
}
