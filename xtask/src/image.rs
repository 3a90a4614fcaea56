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

/// Writes the image archive of `binary` (installed as `/app-operator`) to `output`, named
/// [`NAME`].
pub fn write_archive(binary: &Path, version: &str, output: &Path) -> Result<()> {
    write_archive_named(binary, version, &[NAME.to_owned()], output)
}

/// [`write_archive`] under other fully qualified names (`registry.example:5000/app-operator:v1`).
pub fn write_archive_named(
    binary: &Path,
    version: &str,
    names: &[String],
    output: &Path,
) -> Result<()> {
    // The one layer, beside the archive while it is written: the binary, owned by root,
    // executable by all.
    let mut layer_path = output.as_os_str().to_owned();
    layer_path.push(".layer");
    let layer_path = std::path::PathBuf::from(layer_path);
    let mut layer = Layer::create(&layer_path)?;
    layer.file("app-operator", binary, 0o755)?;
    layer.finish()?;
    let config = ImageConfig {
        entrypoint: vec!["/app-operator".to_owned()],
        cmd: vec!["run".to_owned()],
        user: Some(USER.to_owned()),
        labels: BTreeMap::from([(
            "org.opencontainers.image.version".to_owned(),
            version.to_owned(),
        )]),
        ..ImageConfig::default()
    };
    let written = oci::write_archive(std::slice::from_ref(&layer_path), &config, names, output);
    std::fs::remove_file(&layer_path)
        .with_context(|| format!("removing {}", layer_path.display()))?;
    Ok(written?)
}
