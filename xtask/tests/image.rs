//! `make image`: the archive is a valid one-layer OCI image of the static binary, runnable as
//! uid 65532, with every digest and size matching its blob.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use sha2::{Digest, Sha256};

fn sha256(bytes: &[u8]) -> String {
    format!(
        "sha256:{}",
        Sha256::digest(bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    )
}

fn entries(archive: &[u8]) -> BTreeMap<String, Vec<u8>> {
    let mut tar = tar::Archive::new(archive);
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

/// The blob a descriptor names, after checking its size.
fn blob<'a>(files: &'a BTreeMap<String, Vec<u8>>, descriptor: &serde_json::Value) -> &'a [u8] {
    let digest = descriptor["digest"].as_str().unwrap();
    let bytes = &files[&format!("blobs/{}", digest.replace(':', "/"))];
    assert_eq!(
        sha256(bytes),
        digest,
        "blob content does not match its digest"
    );
    assert_eq!(descriptor["size"].as_u64().unwrap(), bytes.len() as u64);
    bytes
}

#[test]
fn make_image_writes_a_valid_oci_archive_of_the_static_binary() {
    let dir = std::env::temp_dir().join(format!("app-operator-image-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let archive = dir.join("image.tar");
    let status = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["image", "--output"])
        .arg(&archive)
        .env_remove("IMG")
        .status()
        .unwrap();
    assert!(status.success());
    let files = entries(&std::fs::read(&archive).unwrap());

    assert_eq!(files["oci-layout"], br#"{"imageLayoutVersion":"1.0.0"}"#);
    let index: serde_json::Value = serde_json::from_slice(&files["index.json"]).unwrap();
    assert_eq!(
        index["mediaType"],
        "application/vnd.oci.image.index.v1+json"
    );
    let manifests = index["manifests"].as_array().unwrap();
    assert_eq!(manifests.len(), 1);
    assert_eq!(
        manifests[0]["mediaType"],
        "application/vnd.oci.image.manifest.v1+json"
    );
    // Named as containerd exports images: the full name, and the tag alone as the OCI ref name.
    assert_eq!(
        manifests[0]["annotations"]["io.containerd.image.name"],
        "docker.io/library/app-operator:latest"
    );
    assert_eq!(
        manifests[0]["annotations"]["org.opencontainers.image.ref.name"],
        "latest"
    );
    let manifest: serde_json::Value = serde_json::from_slice(blob(&files, &manifests[0])).unwrap();
    assert_eq!(manifest["schemaVersion"], 2);
    assert_eq!(
        manifest["config"]["mediaType"],
        "application/vnd.oci.image.config.v1+json"
    );
    let config: serde_json::Value =
        serde_json::from_slice(blob(&files, &manifest["config"])).unwrap();
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1, "one layer");
    assert_eq!(
        layers[0]["mediaType"],
        "application/vnd.oci.image.layer.v1.tar"
    );
    let layer = blob(&files, &layers[0]);

    assert_eq!(
        (config["os"].as_str(), config["architecture"].as_str()),
        (Some("linux"), Some("amd64"))
    );
    assert_eq!(config["config"]["User"], "65532:65532");
    assert_eq!(
        config["config"]["Entrypoint"],
        serde_json::json!(["/app-operator"])
    );
    assert_eq!(
        config["rootfs"]["diff_ids"],
        serde_json::json!([sha256(layer)])
    );
    let docker: serde_json::Value = serde_json::from_slice(&files["manifest.json"]).unwrap();
    assert_eq!(
        docker[0]["RepoTags"],
        serde_json::json!(["app-operator:latest"])
    );

    // What it says of itself: OCI labels and an SBOM of what the binary links.
    let labels = &config["config"]["Labels"];
    assert_eq!(labels["org.opencontainers.image.licenses"], "Apache-2.0");
    assert_eq!(
        labels["org.opencontainers.image.version"],
        env!("CARGO_PKG_VERSION")
    );
    let revision = labels["org.opencontainers.image.revision"]
        .as_str()
        .unwrap();
    assert!(
        revision.len() >= 40 && revision[..40].chars().all(|c| c.is_ascii_hexdigit()),
        "{revision}"
    );

    // The layer holds the binary and the SBOM, nothing else; the binary is static and it runs.
    let contents = entries(layer);
    assert_eq!(
        contents.keys().collect::<Vec<_>>(),
        [
            "app-operator",
            "usr/",
            "usr/share/",
            "usr/share/sbom/",
            "usr/share/sbom/app-operator.cdx.json"
        ]
    );
    let sbom: serde_json::Value =
        serde_json::from_slice(&contents["usr/share/sbom/app-operator.cdx.json"]).unwrap();
    assert_eq!(sbom["bomFormat"], "CycloneDX");
    let purls: Vec<_> = sbom["components"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["purl"].as_str())
        .collect();
    for linked in [
        "pkg:cargo/kube-runtime@",
        "pkg:cargo/tokio@",
        "pkg:cargo/app-operator-api@",
    ] {
        assert!(
            purls.iter().any(|p| p.starts_with(linked)),
            "{linked}: {purls:?}"
        );
    }
    assert!(
        !purls.iter().any(|p| p.starts_with("pkg:cargo/insta@")),
        "a test-only crate is not in the binary"
    );
    let binary = &contents["app-operator"];
    assert!(
        !binary.windows(12).any(|w| w == b"/lib64/ld-li"),
        "the binary is dynamically linked"
    );
    let path = dir.join("app-operator");
    std::fs::write(&path, binary).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    let version = Command::new(&path).arg("version").output().unwrap();
    assert!(version.status.success());
    assert!(
        String::from_utf8_lossy(&version.stdout).starts_with("app-operator "),
        "{version:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `make image IMG=…` names the image what it is told (as containerd and the kubelet name it).
#[test]
fn make_image_names_the_image_img() {
    let dir = std::env::temp_dir().join(format!("app-operator-image-img-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let archive = dir.join("image.tar");
    for (img, name, tag) in [
        (
            "registry.example:5000/team/app-operator:v1",
            "registry.example:5000/team/app-operator:v1",
            "v1",
        ),
        (
            "app-operator:v0.2.0",
            "docker.io/library/app-operator:v0.2.0",
            "v0.2.0",
        ),
    ] {
        let status = Command::new(env!("CARGO_BIN_EXE_xtask"))
            .args(["image", "--output"])
            .arg(&archive)
            .env("IMG", img)
            .status()
            .unwrap();
        assert!(status.success());
        let files = entries(&std::fs::read(&archive).unwrap());
        let index: serde_json::Value = serde_json::from_slice(&files["index.json"]).unwrap();
        let annotations = &index["manifests"][0]["annotations"];
        assert_eq!(annotations["io.containerd.image.name"], name, "{img}");
        assert_eq!(
            annotations["org.opencontainers.image.ref.name"], tag,
            "{img}"
        );
    }
}
