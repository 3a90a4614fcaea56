//! `make image` without a Docker daemon: the static binary in a one-layer OCI image archive
//! (`docker load`, `podman load`, `kind load image-archive` read it), written by
//! [`local_cluster::oci`].

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use local_cluster::oci::{self, ImageConfig, Layer};

/// The unprivileged user of distroless images; the manifests run the operator as it.
pub const USER: &str = "65532:65532";

/// `reference` (`IMG`) as containerd and the kubelet name it: a registry host when the first
/// part looks like one (has a `.` or `:`, or is `localhost`), else `docker.io` (and `library/`
/// for one-part names), and `:latest` when it has neither tag nor digest.
pub fn full_name(reference: &str) -> String {
    let (first, _) = reference.split_once('/').unwrap_or(("", reference));
    let has_registry = first.contains(['.', ':']) || first == "localhost";
    let mut name = match (has_registry, reference.contains('/')) {
        (true, _) => reference.to_owned(),
        (false, true) => format!("docker.io/{reference}"),
        (false, false) => format!("docker.io/library/{reference}"),
    };
    let last = name.rsplit('/').next().unwrap_or_default();
    if !last.contains([':', '@']) {
        name.push_str(":latest");
    }
    name
}

/// What the image says of itself: OCI labels (`org.opencontainers.image.*`) and the SBOM it
/// carries at [`SBOM_PATH`].
pub struct Provenance {
    pub version: String,
    /// The commit it was built from (`-dirty` when the tree had changes).
    pub revision: String,
    /// Where the source is, when the checkout has a remote URL.
    pub source: Option<String>,
    pub licenses: String,
    /// A CycloneDX JSON document of the crates compiled in.
    pub sbom: Vec<u8>,
}

/// Where the image keeps its SBOM.
pub const SBOM_PATH: &str = "usr/share/sbom/app-operator.cdx.json";

/// Writes the image archive of `binary` (installed as `/app-operator`) to `output`, named
/// `reference` ([`full_name`]).
pub fn write_archive(
    binary: &Path,
    provenance: &Provenance,
    output: &Path,
    reference: &str,
) -> Result<()> {
    // The one layer, beside the archive while it is written: the binary, owned by root,
    // executable by all, and the SBOM, readable by all.
    let with_suffix = |suffix: &str| {
        let mut path = output.as_os_str().to_owned();
        path.push(suffix);
        std::path::PathBuf::from(path)
    };
    let layer_path = with_suffix(".layer");
    let sbom_path = with_suffix(".cdx.json");
    std::fs::write(&sbom_path, &provenance.sbom)
        .with_context(|| format!("writing {}", sbom_path.display()))?;
    let mut layer = Layer::create(&layer_path)?;
    layer.file("app-operator", binary, 0o755)?;
    layer.file_in_new_dirs(SBOM_PATH, &sbom_path, 0o644)?;
    layer.finish()?;
    let label =
        |key: &str, value: &str| (format!("org.opencontainers.image.{key}"), value.to_owned());
    let mut labels = BTreeMap::from([
        label("title", "app-operator"),
        label("version", &provenance.version),
        label("revision", &provenance.revision),
        label("licenses", &provenance.licenses),
    ]);
    if let Some(source) = &provenance.source {
        labels.extend([label("source", source)]);
    }
    let config = ImageConfig {
        entrypoint: vec!["/app-operator".to_owned()],
        cmd: vec!["run".to_owned()],
        user: Some(USER.to_owned()),
        labels,
        ..ImageConfig::default()
    };
    let written = oci::write_archive(
        std::slice::from_ref(&layer_path),
        &config,
        &[full_name(reference)],
        output,
    );
    std::fs::remove_file(&layer_path)
        .with_context(|| format!("removing {}", layer_path.display()))?;
    Ok(written?)
}

#[cfg(test)]
mod tests {
    use super::full_name;

    #[test]
    fn references_are_named_as_containerd_names_them() {
        for (reference, name) in [
            ("app-operator", "docker.io/library/app-operator:latest"),
            ("app-operator:v1", "docker.io/library/app-operator:v1"),
            ("team/app-operator:v1", "docker.io/team/app-operator:v1"),
            (
                "registry.example/app-operator:v0.1.0",
                "registry.example/app-operator:v0.1.0",
            ),
            (
                "localhost:5000/app-operator",
                "localhost:5000/app-operator:latest",
            ),
            ("localhost/x:1", "localhost/x:1"),
            ("r.io/a/b@sha256:00", "r.io/a/b@sha256:00"),
        ] {
            assert_eq!(full_name(reference), name, "{reference}");
        }
    }
}
