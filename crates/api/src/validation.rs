//! Schema patterns shared by the resources (validated by the API server, never parsed here).

/// A container image reference: the tutorial's character set plus `@` and `_`, so digests
/// (`nginx@sha256:…`) and underscores in repository names are accepted.
pub const IMAGE_PATTERN: &str = r"^[a-zA-Z0-9\-\./:@_]+$";

/// A non-negative Kubernetes resource quantity (`100m`, `1`, `0.5`, `128Mi`, `1e3`), as
/// `k8s.io/apimachinery/pkg/api/resource` accepts it.
pub const QUANTITY_PATTERN: &str = r"^(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

/// A C-identifier-like environment variable name, as Kubernetes validates `env[].name`.
pub const ENV_NAME_PATTERN: &str = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$";
