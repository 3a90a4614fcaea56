//! OCI image archives without a container engine: uncompressed layer tarballs and a container
//! configuration in, one tar out (`oci-layout`, `index.json`, the blobs, and docker's
//! `manifest.json`), which `ctr images import`, `docker load`, `podman load` and
//! `kind load image-archive` read.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};

use oci_spec::image::{
    ConfigBuilder, Descriptor, DescriptorBuilder, ImageConfigurationBuilder, ImageIndexBuilder,
    ImageManifestBuilder, MediaType, RootFsBuilder, SCHEMA_VERSION, Sha256Digest,
};
use sha2::{Digest, Sha256};

use crate::error::Error;

/// What a container of the image runs, and as whom: the fields of the OCI image config that our
/// images use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageConfig {
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    /// `NAME=value`.
    pub env: Vec<String>,
    /// `uid:gid` or a name from the image's `/etc/passwd`.
    pub user: Option<String>,
    pub working_dir: Option<String>,
    pub labels: BTreeMap<String, String>,
    /// `80/tcp`, `53/udp`.
    pub exposed_ports: Vec<String>,
    /// The signal that stops the container gracefully, e.g. `SIGQUIT`; the runtime's default
    /// (SIGTERM) when `None`.
    pub stop_signal: Option<String>,
}

/// A fully qualified image name, split the ways the archive's consumers want it.
struct Name<'a> {
    full: &'a str,
    tag: &'a str,
}

impl<'a> Name<'a> {
    /// `registry/repository:tag`; digests and names without a registry or tag are refused, since
    /// each consumer would complete them differently.
    fn parse(full: &'a str) -> Result<Name<'a>, Error> {
        let invalid = |why: &str| {
            Error::Invalid(format!(
                "image name {full:?} {why} (expected registry/repository:tag)"
            ))
        };
        let (registry, rest) = full
            .split_once('/')
            .ok_or_else(|| invalid("has no registry"))?;
        if !(registry.contains('.') || registry.contains(':') || registry == "localhost") {
            return Err(invalid("has no registry"));
        }
        if full.contains('@') {
            return Err(invalid("has a digest"));
        }
        let (repository, tag) = rest.rsplit_once(':').ok_or_else(|| invalid("has no tag"))?;
        if repository.is_empty() || tag.is_empty() || tag.contains('/') {
            return Err(invalid("is malformed"));
        }
        Ok(Name { full, tag })
    }

    /// What `docker images` shows: Docker Hub's prefix dropped, as `docker load` expects in
    /// `RepoTags`.
    fn docker(&self) -> &'a str {
        self.full
            .strip_prefix("docker.io/library/")
            .or_else(|| self.full.strip_prefix("docker.io/"))
            .unwrap_or(self.full)
    }
}

fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// A blob's digest (hex) and size.
#[derive(Debug, Clone)]
struct Blob {
    hex: String,
    size: u64,
}

impl Blob {
    fn of(bytes: &[u8]) -> Result<Blob, Error> {
        Ok(Blob {
            hex: hex(&Sha256::digest(bytes)),
            size: u64::try_from(bytes.len())
                .map_err(|_| Error::Invalid("a blob larger than 2^64 bytes".to_owned()))?,
        })
    }

    /// Hashes a file as it streams by: layers can be hundreds of megabytes.
    fn of_file(path: &Path) -> Result<Blob, Error> {
        let mut file = BufReader::with_capacity(
            1 << 20,
            File::open(path).map_err(Error::io("opening", path))?,
        );
        let mut hash = Sha256::new();
        let size = std::io::copy(&mut file, &mut hash).map_err(Error::io("reading", path))?;
        Ok(Blob {
            hex: hex(&hash.finalize()),
            size,
        })
    }

    fn digest(&self) -> String {
        format!("sha256:{}", self.hex)
    }

    fn path(&self) -> String {
        format!("blobs/sha256/{}", self.hex)
    }

    fn descriptor(&self, media_type: MediaType) -> Result<Descriptor, Error> {
        let digest: Sha256Digest = self.hex.parse().map_err(oci("digest"))?;
        DescriptorBuilder::default()
            .media_type(media_type)
            .digest(digest)
            .size(self.size)
            .build()
            .map_err(oci("descriptor"))
    }
}

fn oci(what: &'static str) -> impl FnOnce(oci_spec::OciSpecError) -> Error {
    move |source| Error::OciSpec { what, source }
}

fn json(what: &'static str) -> impl FnOnce(serde_json::Error) -> Error {
    move |source| Error::Json { what, source }
}

/// The platform the images' binaries were built for: this machine's.
fn architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

/// Writes an image of `layers` (uncompressed tarballs, lowest first) run as `config` says, under
/// every one of `names` (fully qualified: `docker.io/library/nginx:1.22`), to `output`.
///
/// Each name is one entry of `index.json` (all the same manifest) annotated the way containerd
/// exports images: `io.containerd.image.name` the full name, `org.opencontainers.image.ref.name`
/// its tag. Layers are read twice, to hash and to copy, never held in memory.
pub fn write_archive(
    layers: &[PathBuf],
    config: &ImageConfig,
    names: &[String],
    output: &Path,
) -> Result<(), Error> {
    let names = names
        .iter()
        .map(|name| Name::parse(name))
        .collect::<Result<Vec<_>, _>>()?;
    if names.is_empty() {
        return Err(Error::Invalid(format!(
            "{}: an image archive needs at least one name",
            output.display()
        )));
    }
    let layer_blobs = layers
        .iter()
        .map(|layer| Blob::of_file(layer))
        .collect::<Result<Vec<_>, _>>()?;

    let config = serde_json::to_vec(&image_configuration(config, &layer_blobs)?)
        .map_err(json("configuration"))?;
    let config_blob = Blob::of(&config)?;
    let manifest = ImageManifestBuilder::default()
        .schema_version(SCHEMA_VERSION)
        .media_type(MediaType::ImageManifest)
        .config(config_blob.descriptor(MediaType::ImageConfig)?)
        .layers(
            layer_blobs
                .iter()
                .map(|blob| blob.descriptor(MediaType::ImageLayer))
                .collect::<Result<Vec<_>, _>>()?,
        )
        .build()
        .map_err(oci("manifest"))?;
    let manifest = serde_json::to_vec(&manifest).map_err(json("manifest"))?;
    let manifest_blob = Blob::of(&manifest)?;
    let index = ImageIndexBuilder::default()
        .schema_version(SCHEMA_VERSION)
        .media_type(MediaType::ImageIndex)
        .manifests(
            names
                .iter()
                .map(|name| {
                    let mut descriptor = manifest_blob.descriptor(MediaType::ImageManifest)?;
                    descriptor.set_annotations(Some(HashMap::from([
                        ("io.containerd.image.name".to_owned(), name.full.to_owned()),
                        (
                            "org.opencontainers.image.ref.name".to_owned(),
                            name.tag.to_owned(),
                        ),
                    ])));
                    Ok(descriptor)
                })
                .collect::<Result<Vec<_>, Error>>()?,
        )
        .build()
        .map_err(oci("index"))?;
    let index = serde_json::to_vec(&index).map_err(json("index"))?;
    // docker load (before its OCI support) reads this file; it names the same blobs.
    let docker_manifest = serde_json::to_vec(&serde_json::json!([{
        "Config": config_blob.path(),
        "RepoTags": names.iter().map(Name::docker).collect::<Vec<_>>(),
        "Layers": layer_blobs.iter().map(Blob::path).collect::<Vec<_>>(),
    }]))
    .map_err(json("manifest.json"))?;

    let file = File::create(output).map_err(Error::io("creating", output))?;
    let mut archive = tar::Builder::new(std::io::BufWriter::with_capacity(1 << 20, file));
    let write_error = Error::io("writing", output);
    let result = (|| -> std::io::Result<()> {
        let mut add = |path: &str, size: u64, data: &mut dyn Read| {
            let mut header = tar::Header::new_gnu();
            header.set_size(size);
            header.set_mode(0o644);
            header.set_mtime(0);
            header.set_cksum();
            archive.append_data(&mut header, path, data)
        };
        let mut small = |path: &str, bytes: &[u8]| add(path, bytes.len() as u64, &mut &*bytes);
        small("oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#)?;
        small("index.json", &index)?;
        small("manifest.json", &docker_manifest)?;
        small(&config_blob.path(), &config)?;
        small(&manifest_blob.path(), &manifest)?;
        // The same layer twice (or an empty layer shared) is one blob.
        let mut written = BTreeSet::new();
        for (layer, blob) in layers.iter().zip(&layer_blobs) {
            if written.insert(&blob.hex) {
                // `take`: a layer that grew since it was hashed must not overrun its header.
                let mut data = File::open(layer)?.take(blob.size);
                add(&blob.path(), blob.size, &mut data)?;
            }
        }
        archive.into_inner()?.flush()
    })();
    result.map_err(write_error)
}

fn image_configuration(
    config: &ImageConfig,
    layers: &[Blob],
) -> Result<oci_spec::image::ImageConfiguration, Error> {
    let mut builder = ConfigBuilder::default();
    if !config.entrypoint.is_empty() {
        builder = builder.entrypoint(config.entrypoint.clone());
    }
    if !config.cmd.is_empty() {
        builder = builder.cmd(config.cmd.clone());
    }
    if !config.env.is_empty() {
        builder = builder.env(config.env.clone());
    }
    if let Some(user) = &config.user {
        builder = builder.user(user.clone());
    }
    if let Some(dir) = &config.working_dir {
        builder = builder.working_dir(dir.clone());
    }
    if !config.labels.is_empty() {
        builder = builder.labels(
            config
                .labels
                .iter()
                .map(|(key, value)| (key.clone(), value.clone()))
                .collect::<HashMap<_, _>>(),
        );
    }
    if !config.exposed_ports.is_empty() {
        builder = builder.exposed_ports(config.exposed_ports.clone());
    }
    if let Some(signal) = &config.stop_signal {
        builder = builder.stop_signal(signal.clone());
    }
    ImageConfigurationBuilder::default()
        .architecture(architecture())
        .os("linux")
        .config(builder.build().map_err(oci("container configuration"))?)
        .rootfs(
            RootFsBuilder::default()
                .typ("layers")
                .diff_ids(layers.iter().map(Blob::digest).collect::<Vec<_>>())
                .build()
                .map_err(oci("rootfs"))?,
        )
        .build()
        .map_err(oci("configuration"))
}

/// A layer tarball being written: entries owned by root unless said otherwise, mtime 0 (so the
/// same content gives the same digest), parents before children.
pub struct Layer {
    builder: tar::Builder<std::io::BufWriter<File>>,
    path: PathBuf,
}

impl Layer {
    pub fn create(path: &Path) -> Result<Layer, Error> {
        let file = File::create(path).map_err(Error::io("creating", path))?;
        Ok(Layer {
            builder: tar::Builder::new(std::io::BufWriter::with_capacity(1 << 20, file)),
            path: path.to_owned(),
        })
    }

    fn header(kind: tar::EntryType, mode: u32, owner: (u64, u64), size: u64) -> tar::Header {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(kind);
        header.set_mode(mode);
        header.set_uid(owner.0);
        header.set_gid(owner.1);
        header.set_size(size);
        header.set_mtime(0);
        header.set_cksum();
        header
    }

    /// A directory (`var/lib/etcd`, no leading slash).
    pub fn dir(&mut self, path: &str, mode: u32, owner: (u64, u64)) -> Result<(), Error> {
        let mut header = Self::header(tar::EntryType::Directory, mode, owner, 0);
        self.builder
            .append_data(
                &mut header,
                format!("{}/", path.trim_end_matches('/')),
                std::io::empty(),
            )
            .map_err(Error::io("writing", &self.path))
    }

    /// The file at `source` as `path`, with `mode`, owned by root; streamed, not read whole.
    pub fn file(&mut self, path: &str, source: &Path, mode: u32) -> Result<(), Error> {
        let file = File::open(source).map_err(Error::io("opening", source))?;
        let size = file
            .metadata()
            .map_err(Error::io("reading the size of", source))?
            .len();
        let mut header = Self::header(tar::EntryType::Regular, mode, (0, 0), size);
        self.builder
            .append_data(&mut header, path, file.take(size))
            .map_err(Error::io("writing", &self.path))
    }

    /// [`Layer::file`] after its parent directories (0755, root's), none of which the layer
    /// has yet.
    pub fn file_in_new_dirs(&mut self, path: &str, source: &Path, mode: u32) -> Result<(), Error> {
        let mut parent = String::new();
        if let Some((dirs, _)) = path.rsplit_once('/') {
            for dir in dirs.split('/') {
                parent.push_str(dir);
                self.dir(&parent, 0o755, (0, 0))?;
                parent.push('/');
            }
        }
        self.file(path, source, mode)
    }

    /// A symbolic link `path` → `target` (as `ln -s target path` would make it).
    pub fn symlink(&mut self, path: &str, target: &str) -> Result<(), Error> {
        let mut header = Self::header(tar::EntryType::Symlink, 0o777, (0, 0), 0);
        self.builder
            .append_link(&mut header, path, target)
            .map_err(Error::io("writing", &self.path))
    }

    pub fn finish(self) -> Result<(), Error> {
        let path = self.path;
        self.builder
            .into_inner()
            .and_then(|mut file| file.flush())
            .map_err(Error::io("writing", &path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(archive: &Path) -> BTreeMap<String, Vec<u8>> {
        let mut tar = tar::Archive::new(File::open(archive).unwrap());
        tar.entries()
            .unwrap()
            .map(|entry| {
                let mut entry = entry.unwrap();
                let path = entry.path().unwrap().to_string_lossy().into_owned();
                let mut bytes = Vec::new();
                entry.read_to_end(&mut bytes).unwrap();
                (path, bytes)
            })
            .collect()
    }

    #[test]
    fn splits_names_for_each_consumer() {
        let name = Name::parse("docker.io/library/nginx:1.22").unwrap();
        assert_eq!((name.tag, name.docker()), ("1.22", "nginx:1.22"));
        let name = Name::parse("docker.io/app-operator/toolbox:1").unwrap();
        assert_eq!(name.docker(), "app-operator/toolbox:1");
        let name = Name::parse("localhost:5000/pause:3.10.1").unwrap();
        assert_eq!(
            (name.tag, name.docker()),
            ("3.10.1", "localhost:5000/pause:3.10.1")
        );
        for bad in [
            "nginx:1.22",
            "library/nginx:1.22",
            "docker.io/library/nginx",
            "quay.io/x@sha256:00",
        ] {
            assert!(Name::parse(bad).is_err(), "{bad}");
        }
    }

    /// Two layers, two names: one manifest listed twice, every digest and size matching its blob.
    #[test]
    fn writes_every_name_and_layer() {
        let dir = std::env::temp_dir().join(format!("oci-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let source = dir.join("hello");
        std::fs::write(&source, b"#!/bin/sh\necho hello\n").unwrap();
        let (first, second) = (dir.join("1.tar"), dir.join("2.tar"));
        let mut layer = Layer::create(&first).unwrap();
        layer.dir("usr/local/bin", 0o755, (0, 0)).unwrap();
        layer.file("usr/local/bin/hello", &source, 0o755).unwrap();
        layer.finish().unwrap();
        let mut layer = Layer::create(&second).unwrap();
        layer.dir("tmp", 0o1777, (0, 0)).unwrap();
        layer.finish().unwrap();
        let config = ImageConfig {
            cmd: vec!["hello".to_owned()],
            env: vec!["PATH=/usr/local/bin".to_owned()],
            exposed_ports: vec!["80/tcp".to_owned()],
            stop_signal: Some("SIGQUIT".to_owned()),
            ..ImageConfig::default()
        };
        let names = ["quay.io/example/hello:v1", "docker.io/library/hello:1"].map(str::to_owned);
        let output = dir.join("image.tar");
        write_archive(&[first.clone(), second.clone()], &config, &names, &output).unwrap();

        let files = entries(&output);
        let blob = |descriptor: &serde_json::Value| {
            let digest = descriptor["digest"].as_str().unwrap();
            let bytes = &files[&format!("blobs/{}", digest.replace(':', "/"))];
            assert_eq!(format!("sha256:{}", hex(&Sha256::digest(bytes))), digest);
            assert_eq!(descriptor["size"].as_u64().unwrap(), bytes.len() as u64);
            bytes.clone()
        };
        let index: serde_json::Value = serde_json::from_slice(&files["index.json"]).unwrap();
        let manifests = index["manifests"].as_array().unwrap();
        let annotations: Vec<_> = manifests
            .iter()
            .map(|m| {
                (
                    m["annotations"]["io.containerd.image.name"]
                        .as_str()
                        .unwrap(),
                    m["annotations"]["org.opencontainers.image.ref.name"]
                        .as_str()
                        .unwrap(),
                )
            })
            .collect();
        assert_eq!(
            annotations,
            [
                ("quay.io/example/hello:v1", "v1"),
                ("docker.io/library/hello:1", "1")
            ]
        );
        assert_eq!(manifests[0]["digest"], manifests[1]["digest"]);
        let manifest: serde_json::Value = serde_json::from_slice(&blob(&manifests[0])).unwrap();
        let config: serde_json::Value = serde_json::from_slice(&blob(&manifest["config"])).unwrap();
        let layers: Vec<_> = manifest["layers"]
            .as_array()
            .unwrap()
            .iter()
            .map(blob)
            .collect();
        assert_eq!(
            layers,
            [
                std::fs::read(&first).unwrap(),
                std::fs::read(&second).unwrap()
            ]
        );
        assert_eq!(config["config"]["Cmd"], serde_json::json!(["hello"]));
        assert_eq!(
            config["config"]["ExposedPorts"],
            serde_json::json!({"80/tcp": {}})
        );
        assert_eq!(config["config"]["StopSignal"], "SIGQUIT");
        assert_eq!(config["rootfs"]["diff_ids"].as_array().unwrap().len(), 2);
        let docker: serde_json::Value = serde_json::from_slice(&files["manifest.json"]).unwrap();
        assert_eq!(
            docker[0]["RepoTags"],
            serde_json::json!(["quay.io/example/hello:v1", "hello:1"])
        );

        let mut tar = tar::Archive::new(File::open(&first).unwrap());
        let layer: Vec<_> = tar
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let header = e.header();
                (
                    e.path().unwrap().to_string_lossy().into_owned(),
                    header.mode().unwrap(),
                    header.uid().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            layer,
            [
                ("usr/local/bin/".to_owned(), 0o755, 0),
                ("usr/local/bin/hello".to_owned(), 0o755, 0)
            ]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn writes_a_symlink_as_ln_s_would() {
        let dir = std::env::temp_dir().join(format!("oci-link-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("layer.tar");
        let mut layer = Layer::create(&path).unwrap();
        layer.symlink("manager", "operator/manager_amd64").unwrap();
        layer.finish().unwrap();
        let mut tar = tar::Archive::new(File::open(&path).unwrap());
        let links: Vec<_> = tar
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.header().entry_type(),
                    e.path().unwrap().to_string_lossy().into_owned(),
                    e.link_name()
                        .unwrap()
                        .unwrap()
                        .to_string_lossy()
                        .into_owned(),
                )
            })
            .collect();
        assert_eq!(
            links,
            [(
                tar::EntryType::Symlink,
                "manager".to_owned(),
                "operator/manager_amd64".to_owned()
            )]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
