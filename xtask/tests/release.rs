//! `make release`: one version on everything it writes, the image named after `IMG`'s repository,
//! and checksums that match the files.

use std::process::Command;

use sha2::{Digest, Sha256};

const VERSION: &str = env!("CARGO_PKG_VERSION");

#[test]
fn make_release_writes_the_image_installer_and_chart_of_one_version() {
    let dist = std::env::temp_dir().join(format!("app-operator-release-{}", std::process::id()));
    let status = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .args(["release", "--output"])
        .arg(&dist)
        // The tag of IMG is replaced by the version; the registry's port stays.
        .env("IMG", "registry.example.com:5000/team/app-operator:ignored")
        .status()
        .unwrap();
    assert!(status.success());
    let image = format!("registry.example.com:5000/team/app-operator:{VERSION}");

    let sums = std::fs::read_to_string(dist.join("SHA256SUMS")).unwrap();
    let mut files = Vec::new();
    for line in sums.lines() {
        let (digest, file) = line.split_once("  ").unwrap();
        let bytes = std::fs::read(dist.join(file)).unwrap();
        let actual: String = Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(digest, actual, "{file}");
        files.push(file.to_owned());
    }
    assert_eq!(
        files,
        [
            format!("app-operator-{VERSION}-image.tar"),
            format!("app-operator-{VERSION}-image.tar.cdx.json"),
            "install.yaml".to_owned(),
            format!("app-operator-{VERSION}.tgz"),
        ]
    );

    let index = read_from_tar(&dist.join(&files[0]), "index.json");
    assert!(index.contains(&image), "{index}");
    let installer = std::fs::read_to_string(dist.join("install.yaml")).unwrap();
    assert!(
        installer.contains(&format!("image: {image}\n")),
        "install.yaml runs another image"
    );
    let chart = dist.join(&files[3]);
    let chart_yaml: serde_json::Value =
        serde_norway::from_str(&untar_gz(&chart, "app-operator/Chart.yaml")).unwrap();
    assert_eq!(chart_yaml["version"], VERSION);
    assert_eq!(chart_yaml["appVersion"], VERSION);
    let values = untar_gz(&chart, "app-operator/values.yaml");
    assert!(
        values.contains("\n  repository: registry.example.com:5000/team/app-operator\n"),
        "the packaged chart's default image is the release's"
    );
    std::fs::remove_dir_all(&dist).unwrap();
}

fn read_from_tar(archive: &std::path::Path, name: &str) -> String {
    let mut tar = tar::Archive::new(std::fs::File::open(archive).unwrap());
    for entry in tar.entries().unwrap() {
        let mut entry = entry.unwrap();
        if entry.path().unwrap().to_string_lossy() == name {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut entry, &mut text).unwrap();
            return text;
        }
    }
    panic!("no {name} in {}", archive.display());
}

/// A file of a `.tgz` (tar reads gzip through the system's tar, as Helm users would).
fn untar_gz(archive: &std::path::Path, name: &str) -> String {
    let output = Command::new("tar")
        .arg("-xzOf")
        .arg(archive)
        .arg(name)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "no {name} in {}",
        archive.display()
    );
    String::from_utf8(output.stdout).unwrap()
}
