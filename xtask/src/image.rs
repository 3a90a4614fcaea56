//! `make image` without a Docker daemon: a static binary in a one-layer OCI image archive
//! (`docker load`, `podman load`, `kind load image-archive` read it).

use std::fs::File;
use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use oci_spec::image::{
    ConfigBuilder, Descriptor, DescriptorBuilder, ImageConfigurationBuilder, ImageIndexBuilder,
    ImageManifestBuilder, MediaType, RootFsBuilder, SCHEMA_VERSION, Sha256Digest,
};
use sha2::{Digest, Sha256};

/// The unprivileged user of distroless images; the manifests run the operator as it.
pub const USER: &str = "65532:65532";
pub const REFERENCE: &str = "app-operator:latest";

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn descriptor(media_type: MediaType, bytes: &[u8]) -> Result<Descriptor> {
    let digest: Sha256Digest = sha256(bytes).parse()?;
    Ok(DescriptorBuilder::default()
        .media_type(media_type)
        .digest(digest)
        .size(u64::try_from(bytes.len())?)
        .build()?)
}

/// Writes the image archive of `binary` (installed as `/app-operator`) to `output`.
pub fn write_archive(binary: &Path, version: &str, output: &Path) -> Result<()> {
    let contents =
        std::fs::read(binary).with_context(|| format!("reading {}", binary.display()))?;
    // The one layer: an uncompressed tar with the binary, owned by root, executable by all.
    let mut layer = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_size(u64::try_from(contents.len())?);
    header.set_mode(0o755);
    header.set_mtime(0);
    header.set_cksum();
    layer.append_data(&mut header, "app-operator", contents.as_slice())?;
    let layer = layer.into_inner()?;
    let layer_digest = format!("sha256:{}", sha256(&layer));

    let config = ImageConfigurationBuilder::default()
        .architecture("amd64")
        .os("linux")
        .config(
            ConfigBuilder::default()
                .user(USER)
                .entrypoint(vec!["/app-operator".to_owned()])
                .cmd(vec!["run".to_owned()])
                .labels(
                    [(
                        "org.opencontainers.image.version".to_owned(),
                        version.to_owned(),
                    )]
                    .into_iter()
                    .collect::<std::collections::HashMap<_, _>>(),
                )
                .build()?,
        )
        .rootfs(
            RootFsBuilder::default()
                .typ("layers")
                .diff_ids(vec![layer_digest])
                .build()?,
        )
        .build()?;
    let config = serde_json::to_vec(&config)?;
    let manifest = ImageManifestBuilder::default()
        .schema_version(SCHEMA_VERSION)
        .media_type(MediaType::ImageManifest)
        .config(descriptor(MediaType::ImageConfig, &config)?)
        .layers(vec![descriptor(MediaType::ImageLayer, &layer)?])
        .build()?;
    let manifest = serde_json::to_vec(&manifest)?;
    let mut manifest_descriptor = descriptor(MediaType::ImageManifest, &manifest)?;
    manifest_descriptor.set_annotations(Some(
        [
            (
                "org.opencontainers.image.ref.name".to_owned(),
                REFERENCE.to_owned(),
            ),
            (
                "io.containerd.image.name".to_owned(),
                format!("docker.io/library/{REFERENCE}"),
            ),
        ]
        .into_iter()
        .collect(),
    ));
    let index = ImageIndexBuilder::default()
        .schema_version(SCHEMA_VERSION)
        .media_type(MediaType::ImageIndex)
        .manifests(vec![manifest_descriptor])
        .build()?;
    let index = serde_json::to_vec(&index)?;
    // docker load (before OCI support) reads this file; it names the same blobs.
    let docker_manifest = serde_json::to_vec(&serde_json::json!([{
        "Config": format!("blobs/sha256/{}", sha256(&config)),
        "RepoTags": [REFERENCE],
        "Layers": [format!("blobs/sha256/{}", sha256(&layer))],
    }]))?;

    let mut archive = tar::Builder::new(
        File::create(output).with_context(|| format!("creating {}", output.display()))?,
    );
    let mut add = |path: &str, bytes: &[u8]| -> Result<()> {
        let mut header = tar::Header::new_gnu();
        header.set_size(u64::try_from(bytes.len())?);
        header.set_mode(0o644);
        header.set_mtime(0);
        header.set_cksum();
        archive.append_data(&mut header, path, bytes)?;
        Ok(())
    };
    add("oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#)?;
    add("index.json", &index)?;
    add("manifest.json", &docker_manifest)?;
    for blob in [&layer, &config, &manifest] {
        add(&format!("blobs/sha256/{}", sha256(blob)), blob)?;
    }
    archive.into_inner()?.flush()?;
    Ok(())
}
