//! `make image` without a Docker daemon: the static binary in a one-layer OCI image archive
//! (`docker load`, `podman load`, `kind load image-archive` read it), written by
//! [`local_cluster::oci`].

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use local_cluster::oci::{self, ImageConfig, Layer};

/// The unprivileged user of distroless images; the manifests run the operator as it.
pub const USER: &str = "65532:65532";
pub const REFERENCE: &str = "app-operator:latest";
/// [`REFERENCE`] as containerd and the kubelet name it.
pub const NAME: &str = "docker.io/library/app-operator:latest";

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
/// [`NAME`].
pub fn write_archive(binary: &Path, provenance: &Provenance, output: &Path) -> Result<()> {
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
        &[NAME.to_owned()],
        output,
    );
    std::fs::remove_file(&layer_path)
        .with_context(|| format!("removing {}", layer_path.display()))?;
    Ok(written?)
}
