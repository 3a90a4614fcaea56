//! The real node's images: every archive holds the names the manifests use, and its container
//! config runs what the image is for. Builds the tools and images on the first run (minutes);
//! reads the cache afterwards (seconds).

// Test code: a failed expectation is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use local_cluster::Tools;
use local_cluster::images::{Image, Images};

/// An archive's index, and the config and layers of the manifest it names (every name of one
/// archive names the same manifest).
struct Archive {
    names: Vec<String>,
    ref_names: Vec<String>,
    config: serde_json::Value,
    layers: Vec<Vec<Entry>>,
}

/// A layer's entry: its path without `./`, mode, owner and link target.
struct Entry {
    path: String,
    mode: u32,
    uid: u64,
    gid: u64,
    link: Option<String>,
}

fn read_archive(image: &Image) -> Archive {
    // Blob name → (offset, size) in the archive, so layers are read in place.
    let mut blobs = BTreeMap::new();
    let mut small = BTreeMap::new();
    let mut tar = tar::Archive::new(File::open(&image.archive).unwrap());
    for entry in tar.entries_with_seek().unwrap() {
        let mut entry = entry.unwrap();
        let path = entry.path().unwrap().to_string_lossy().into_owned();
        blobs.insert(path.clone(), (entry.raw_file_position(), entry.size()));
        if entry.size() < 1 << 20 {
            let mut bytes = Vec::new();
            entry.read_to_end(&mut bytes).unwrap();
            small.insert(path, bytes);
        }
    }
    let json = |path: &str| -> serde_json::Value { serde_json::from_slice(&small[path]).unwrap() };
    let blob_path = |d: &serde_json::Value| {
        format!("blobs/{}", d["digest"].as_str().unwrap().replace(':', "/"))
    };
    let index = json("index.json");
    let manifests = index["manifests"].as_array().unwrap();
    let annotation = |key: &str| -> Vec<String> {
        manifests
            .iter()
            .map(|m| m["annotations"][key].as_str().unwrap().to_owned())
            .collect()
    };
    assert!(
        manifests
            .iter()
            .all(|m| m["digest"] == manifests[0]["digest"]),
        "{}: names with different manifests",
        image.archive.display()
    );
    let manifest = json(&blob_path(&manifests[0]));
    let config = json(&blob_path(&manifest["config"]));
    let layers = manifest["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|layer| {
            assert_eq!(layer["mediaType"], "application/vnd.oci.image.layer.v1.tar");
            let (offset, size) = blobs[&blob_path(layer)];
            let mut file = File::open(&image.archive).unwrap();
            file.seek(SeekFrom::Start(offset)).unwrap();
            let mut tar = tar::Archive::new(file.take(size));
            tar.entries()
                .unwrap()
                .map(|entry| {
                    let entry = entry.unwrap();
                    let header = entry.header();
                    let path = entry.path().unwrap().to_string_lossy().into_owned();
                    Entry {
                        path: path
                            .trim_start_matches("./")
                            .trim_end_matches('/')
                            .to_owned(),
                        mode: header.mode().unwrap(),
                        uid: header.uid().unwrap(),
                        gid: header.gid().unwrap(),
                        link: entry
                            .link_name()
                            .unwrap()
                            .map(|target| target.to_string_lossy().into_owned()),
                    }
                })
                .collect()
        })
        .collect();
    Archive {
        names: annotation("io.containerd.image.name"),
        ref_names: annotation("org.opencontainers.image.ref.name"),
        config,
        layers,
    }
}

fn strings(value: &serde_json::Value) -> Vec<String> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {value}"))
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect()
}

/// The pinned version a go.mod requires of `module`.
fn pinned(go_mod: &Path, module: &str) -> String {
    std::fs::read_to_string(go_mod)
        .unwrap()
        .lines()
        .find_map(|line| {
            let mut words = line.trim().trim_start_matches("require").split_whitespace();
            (words.next() == Some(module)).then(|| words.next().unwrap().to_owned())
        })
        .unwrap()
}

fn find<'a>(archives: &'a [Archive], name: &str) -> &'a Archive {
    archives
        .iter()
        .find(|a| a.names.iter().any(|n| n == name))
        .unwrap_or_else(|| panic!("no image named {name}"))
}

/// The entry at `path` in the image's only layer.
fn entry<'a>(archive: &'a Archive, path: &str) -> &'a Entry {
    archive.layers[0]
        .iter()
        .find(|e| e.path == path)
        .unwrap_or_else(|| panic!("no {path} in the layer"))
}

#[test]
fn every_image_is_named_as_the_manifests_name_it_and_runs_what_it_is_for() {
    let sources = local_cluster::repo_root().join("hack/k8s-tools");
    let tools = Tools::ensure(&sources).unwrap();
    let images = Images::ensure(&tools, &sources).unwrap();
    assert_eq!(images.images.len(), 11, "{:?}", images.images);
    let archives: Vec<Archive> = images.images.iter().map(read_archive).collect();
    for (image, archive) in images.images.iter().zip(&archives) {
        assert!(image.archive.starts_with(&images.dir));
        assert_eq!(archive.names, image.names, "{}", image.archive.display());
        // Each OCI ref name is the tag of the containerd name beside it.
        for (name, tag) in archive.names.iter().zip(&archive.ref_names) {
            assert!(name.ends_with(&format!(":{tag}")), "{name} vs {tag}");
        }
        assert_eq!(archive.layers.len(), 1);
        let env = strings(&archive.config["config"]["Env"]);
        assert!(env.iter().any(|e| e.starts_with("PATH=/")), "{env:?}");
        // No device nodes: the runtime provides /dev.
        assert!(
            archive.layers[0]
                .iter()
                .all(|e| !e.path.starts_with("dev/")),
            "{}",
            image.archive.display()
        );
    }

    let pause = find(&archives, "registry.k8s.io/pause:3.10.1");
    assert_eq!(strings(&pause.config["config"]["Entrypoint"]), ["/pause"]);
    assert_eq!(pause.config["config"]["User"], "65535:65535");

    for module in ["etcd", "etcd-3.5"] {
        let version = pinned(
            &sources.join(module).join("go.mod"),
            "go.etcd.io/etcd/server/v3",
        );
        let etcd = find(
            &archives,
            &format!("gcr.io/etcd-development/etcd:{version}"),
        );
        assert_eq!(
            etcd.names,
            [
                format!("gcr.io/etcd-development/etcd:{version}"),
                format!("quay.io/coreos/etcd:{version}")
            ]
        );
        assert_eq!(
            strings(&etcd.config["config"]["Cmd"]),
            ["/usr/local/bin/etcd"]
        );
        for binary in ["etcd", "etcdctl", "etcdutl"] {
            assert_eq!(entry(etcd, &format!("usr/local/bin/{binary}")).mode, 0o755);
        }
        assert_eq!(entry(etcd, "var/lib/etcd").mode, 0o700);
        assert_eq!(entry(etcd, "tmp").mode, 0o1777);
    }

    let coredns_version = pinned(
        &sources.join("coredns/go.mod"),
        "github.com/coredns/coredns",
    );
    let coredns = find(
        &archives,
        &format!("registry.k8s.io/coredns/coredns:{coredns_version}"),
    );
    assert_eq!(
        strings(&coredns.config["config"]["Entrypoint"]),
        ["/coredns"]
    );

    // Its manifest runs `local-path-provisioner …` from PATH.
    let provisioner_version = pinned(
        &sources.join("local-path-provisioner/go.mod"),
        "github.com/rancher/local-path-provisioner",
    );
    let provisioner = find(
        &archives,
        &format!("docker.io/rancher/local-path-provisioner:{provisioner_version}"),
    );
    assert_eq!(
        strings(&provisioner.config["config"]["Cmd"]),
        ["/usr/local/bin/local-path-provisioner"]
    );
    assert_eq!(
        entry(provisioner, "usr/local/bin/local-path-provisioner").mode,
        0o755
    );

    let nginx = find(&archives, "docker.io/library/nginx:latest");
    let [_, minor, patch] = &nginx.names[..] else {
        panic!("{:?}", nginx.names)
    };
    let patch = patch.strip_prefix("docker.io/library/nginx:").unwrap();
    let minor = minor.strip_prefix("docker.io/library/nginx:").unwrap();
    assert!(patch.starts_with(&format!("{minor}.")), "{minor} {patch}");
    assert_eq!(
        strings(&nginx.config["config"]["Cmd"]),
        ["nginx", "-g", "daemon off;"]
    );
    assert!(nginx.config["config"]["ExposedPorts"]["80/tcp"].is_object());
    assert_eq!(
        entry(nginx, "var/log/nginx/access.log").link.as_deref(),
        Some("/dev/stdout")
    );
    assert_eq!(
        entry(nginx, "var/log/nginx/error.log").link.as_deref(),
        Some("/dev/stderr")
    );
    assert_eq!(nginx.config["config"]["User"], serde_json::Value::Null);
    let unprivileged = find(&archives, "docker.io/nginxinc/nginx-unprivileged:latest");
    assert_eq!(
        unprivileged.names[2],
        format!("docker.io/nginxinc/nginx-unprivileged:{patch}")
    );
    assert_eq!(unprivileged.config["config"]["User"], "101:101");
    assert!(unprivileged.config["config"]["ExposedPorts"]["8080/tcp"].is_object());

    for major in ["15", "17"] {
        let postgres = find(&archives, &format!("docker.io/library/postgres:{major}"));
        let minor = postgres.names[1]
            .strip_prefix(&format!("docker.io/library/postgres:{major}."))
            .unwrap();
        assert!(minor.parse::<u32>().is_ok(), "{:?}", postgres.names);
        let config = &postgres.config["config"];
        assert_eq!(strings(&config["Entrypoint"]), ["docker-entrypoint.sh"]);
        assert_eq!(strings(&config["Cmd"]), ["postgres"]);
        let env = strings(&config["Env"]);
        assert!(
            env.contains(&format!(
                "PATH=/usr/lib/postgresql/{major}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
            )),
            "{env:?}"
        );
        assert!(
            env.contains(&"PGDATA=/var/lib/postgresql/data".to_owned()),
            "{env:?}"
        );
        let script = entry(postgres, "usr/local/bin/docker-entrypoint.sh");
        assert_eq!((script.mode, script.uid), (0o755, 0));
        // The official image's uid and gid own the data and socket directories.
        let socket = entry(postgres, "run/postgresql");
        assert_eq!(
            (socket.mode & 0o7777, socket.uid, socket.gid),
            (0o3777, 999, 999)
        );
        let home = entry(postgres, "var/lib/postgresql");
        assert_eq!((home.uid, home.gid), (999, 999));
        let data = entry(postgres, "var/lib/postgresql/data");
        assert_eq!((data.mode & 0o7777, data.uid), (0o1777, 999));
        for binary in [
            "postgres",
            "initdb",
            "pg_ctl",
            "pg_isready",
            "pg_dump",
            "pg_restore",
            "psql",
        ] {
            entry(
                postgres,
                &format!("usr/lib/postgresql/{major}/bin/{binary}"),
            );
        }
        // No main cluster created at install time: the entrypoint initialises PGDATA.
        assert!(
            postgres.layers[0]
                .iter()
                .all(|e| !e.path.starts_with(&format!("var/lib/postgresql/{major}"))),
            "a cluster was created in the image"
        );
    }

    // CloudNativePG's operand (the bench beside SampleDB): the same PostgreSQL, with barman-cloud
    // (its backups, WAL archive and restores run these commands from PATH).
    let cloudnative_pg = find(&archives, "ghcr.io/cloudnative-pg/postgresql:15");
    let env = strings(&cloudnative_pg.config["config"]["Env"]);
    assert!(
        env.iter()
            .any(|e| e.starts_with("PATH=/usr/lib/postgresql/15/bin:")),
        "{env:?}"
    );
    for binary in [
        "usr/lib/postgresql/15/bin/postgres",
        "usr/lib/postgresql/15/bin/pg_controldata",
        "usr/bin/barman-cloud-backup",
        "usr/bin/barman-cloud-wal-archive",
        "usr/bin/barman-cloud-restore",
        "usr/bin/barman-cloud-wal-restore",
    ] {
        entry(cloudnative_pg, binary);
    }

    let toolbox = find(&archives, "docker.io/app-operator/toolbox:1");
    assert_eq!(
        strings(&toolbox.config["config"]["Cmd"]),
        ["sleep", "infinity"]
    );
    for binary in ["curl", "dig", "nc.openbsd", "psql", "ip"] {
        assert!(
            toolbox.layers[0].iter().any(|e| ["usr/bin", "usr/sbin"]
                .iter()
                .any(|dir| e.path == format!("{dir}/{binary}"))),
            "no {binary} in the toolbox"
        );
    }
}
