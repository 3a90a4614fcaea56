//! The container images of the real node, built on this machine instead of pulled: the pause
//! image from the pinned Kubernetes source, etcd and CoreDNS from the binaries the tools build,
//! nginx (as root, and unprivileged), PostgreSQL and a test toolbox from Debian's packages
//! (mmdebstrap). Each is an OCI
//! archive named as the manifests name it, built once into a cache directory.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use sha2::{Digest, Sha256};

use crate::error::Error;
use crate::host::install_debian_packages;
use crate::oci::{self, ImageConfig, Layer};
use crate::process::run;
use crate::tools::{Tools, cache_root, elapsed, module_dir, module_version};

/// Bumped when the way images are built changes (code, not the data hashed below), and to take
/// newer Debian packages: the mirror's content is not part of the fingerprint.
const RECIPE: &str = "2";

/// Lists what a finished cache directory holds; written last, so its presence means complete.
const LIST: &str = "images.json";

/// `/usr/local/bin/docker-entrypoint.sh` of the postgres images.
const POSTGRES_ENTRYPOINT: &str = include_str!("postgres-entrypoint.sh");

const PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Where Debian's packages come from: the release, its point updates and its security updates.
const MIRROR: &str = "http://deb.debian.org/debian";
const SECURITY_MIRROR: &str = "http://deb.debian.org/debian-security";

/// Left out of every Debian image: documentation (but not the licences), manuals, translations.
const DPKG_EXCLUDES: &[&str] = &[
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/locale/*",
    "path-exclude=/usr/share/lintian/*",
];

/// An image built from Debian packages.
#[derive(Debug)]
struct Debian {
    /// The archive's file name, without `.tar`.
    key: &'static str,
    suite: &'static str,
    packages: &'static [&'static str],
    kind: DebianKind,
}

#[derive(Debug, Clone, Copy)]
enum DebianKind {
    /// As `nginx` is on Docker Hub: the master process runs as root and serves on 80.
    Nginx,
    /// As `nginxinc/nginx-unprivileged` is: UID 101, port 8080, its pid file and temporary files
    /// in `/tmp`; runs in a Pod that meets the `restricted` Pod Security Standard.
    NginxUnprivileged,
    /// The official image's layout (`docker-entrypoint.sh`, uid 999, PGDATA), named
    /// `<repository>:<major>` and `:<version>`.
    Postgres {
        major: u32,
        repository: &'static str,
    },
    Toolbox,
}

const OFFICIAL_POSTGRES: &str = "docker.io/library/postgres";
/// Where CloudNativePG's PostgreSQL images are named (`imageName` of its Clusters).
pub const CLOUDNATIVE_PG_POSTGRES: &str = "ghcr.io/cloudnative-pg/postgresql";

const DEBIAN: &[Debian] = &[
    Debian {
        key: "nginx",
        suite: "bookworm",
        packages: &["nginx"],
        kind: DebianKind::Nginx,
    },
    Debian {
        key: "nginx-unprivileged",
        suite: "bookworm",
        packages: &["nginx"],
        kind: DebianKind::NginxUnprivileged,
    },
    Debian {
        key: "postgres-15",
        suite: "bookworm",
        packages: &["postgresql-15"],
        kind: DebianKind::Postgres {
            major: 15,
            repository: OFFICIAL_POSTGRES,
        },
    },
    // CloudNativePG's operand image, for the bench beside SampleDB: the same PostgreSQL with
    // barman-cloud (its backups and WAL archive to object storage), as its own images carry.
    Debian {
        key: "cloudnative-pg-postgres-15",
        suite: "bookworm",
        packages: &["postgresql-15", "barman-cli-cloud", "python3-boto3"],
        kind: DebianKind::Postgres {
            major: 15,
            repository: CLOUDNATIVE_PG_POSTGRES,
        },
    },
    Debian {
        key: "postgres-17",
        suite: "trixie",
        packages: &["postgresql-17"],
        kind: DebianKind::Postgres {
            major: 17,
            repository: OFFICIAL_POSTGRES,
        },
    },
    Debian {
        key: "toolbox",
        suite: "bookworm",
        packages: &[
            "curl",
            "wget",
            "dnsutils",
            "netcat-openbsd",
            "postgresql-client",
            "iproute2",
            "ca-certificates",
        ],
        kind: DebianKind::Toolbox,
    },
];

/// An etcd release the images ship: its Go module directory under `hack/k8s-tools/` and the
/// names its binaries have in the tools' `bin/`.
#[derive(Debug)]
struct Etcd {
    module: &'static str,
    suffix: &'static str,
}

const ETCD: &[Etcd] = &[
    Etcd {
        module: "etcd",
        suffix: "",
    },
    // The release before, for the upgrade test.
    Etcd {
        module: "etcd-3.5",
        suffix: "-3.5",
    },
];

/// The cached images.
#[derive(Debug, Clone)]
pub struct Images {
    pub dir: PathBuf,
    pub images: Vec<Image>,
}

/// One image archive and every name it holds (fully qualified: `docker.io/library/nginx:1.22`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    pub names: Vec<String>,
    pub archive: PathBuf,
}

impl Images {
    /// Returns the cached images, building them first when missing or when what decides their
    /// content changed. `tools` must be built (etcd, CoreDNS); `sources` is `hack/k8s-tools`.
    pub fn ensure(tools: &Tools, sources: &Path) -> Result<Images, Error> {
        let dir = cache_root().join(format!("images-{}", fingerprint(sources)?));
        if !dir.join(LIST).exists() {
            build(tools, sources, &dir)?;
        }
        read_list(&dir)
    }

    /// The image that has `name`.
    pub fn find(&self, name: &str) -> Option<&Image> {
        self.images
            .iter()
            .find(|image| image.names.iter().any(|n| n == name))
    }
}

/// The tools modules whose binaries (or, for `kubernetes`, whose pause source) go into images.
const MODULES: &[&str] = &[
    "kubernetes",
    "etcd",
    "etcd-3.5",
    "coredns",
    "local-path-provisioner",
];

/// A hash of what decides the images' content besides Debian's mirror: the recipe, the pins of
/// the modules whose binaries they hold (not the whole tools build: a new kwok or helm pin
/// rebuilds no image), the entrypoint script and the package lists.
fn fingerprint(sources: &Path) -> Result<String, Error> {
    let mut hash = Sha256::new();
    hash.update(RECIPE);
    for module in MODULES {
        for file in ["go.mod", "go.sum"] {
            let path = sources.join(module).join(file);
            hash.update(fs::read(&path).map_err(Error::io("reading", &path))?);
        }
    }
    hash.update(POSTGRES_ENTRYPOINT);
    hash.update(format!("{DEBIAN:?}{ETCD:?}{DPKG_EXCLUDES:?}"));
    let digest = hash.finalize();
    Ok(digest.iter().take(6).map(|b| format!("{b:02x}")).collect())
}

fn read_list(dir: &Path) -> Result<Images, Error> {
    let path = dir.join(LIST);
    let text = fs::read(&path).map_err(Error::io("reading", &path))?;
    let invalid = || Error::Invalid(format!("{} is not a list of images", path.display()));
    let list: serde_json::Value = serde_json::from_slice(&text).map_err(|_| invalid())?;
    let images = list
        .as_array()
        .ok_or_else(invalid)?
        .iter()
        .map(|image| {
            let names = image["names"]
                .as_array()
                .ok_or_else(invalid)?
                .iter()
                .map(|name| name.as_str().map(str::to_owned).ok_or_else(invalid))
                .collect::<Result<Vec<_>, _>>()?;
            let archive = dir.join(image["archive"].as_str().ok_or_else(invalid)?);
            Ok(Image { names, archive })
        })
        .collect::<Result<Vec<_>, Error>>()?;
    Ok(Images {
        dir: dir.to_owned(),
        images,
    })
}

/// What a build step shares: where to put archives and scratch files.
struct Build<'a> {
    tools: &'a Tools,
    sources: &'a Path,
    /// The partial cache directory: archives go here.
    out: PathBuf,
    /// Scratch space inside it (layers, mmdebstrap's temporary root), removed at the end.
    work: PathBuf,
}

impl Build<'_> {
    /// Writes `<key>.tar` and returns its image.
    fn archive(
        &self,
        key: &str,
        layers: &[PathBuf],
        config: &ImageConfig,
        names: Vec<String>,
    ) -> Result<Image, Error> {
        let archive = self.out.join(format!("{key}.tar"));
        oci::write_archive(layers, config, &names, &archive)?;
        for layer in layers {
            fs::remove_file(layer).map_err(Error::io("removing", layer))?;
        }
        Ok(Image { names, archive })
    }
}

fn build(tools: &Tools, sources: &Path, dir: &Path) -> Result<(), Error> {
    // `<dir>.partial`, as tools.rs does: a build that stops half-way is never taken for done.
    let mut partial = dir.as_os_str().to_owned();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    if partial.exists() {
        fs::remove_dir_all(&partial).map_err(Error::io("removing", &partial))?;
    }
    let built = build_into(tools, sources, dir, &partial);
    if built.is_err() {
        // Half an image set is a gigabyte of nothing; the error says what failed.
        let _ = fs::remove_dir_all(&partial);
    }
    built
}

fn build_into(tools: &Tools, sources: &Path, dir: &Path, partial: &Path) -> Result<(), Error> {
    let work = partial.join("work");
    fs::create_dir_all(&work).map_err(Error::io("creating", &work))?;
    ensure_mmdebstrap()?;
    let build = Build {
        tools,
        sources,
        out: partial.to_owned(),
        work,
    };

    let total = 1 + ETCD.len() + PROGRAMS.len() + DEBIAN.len();
    eprintln!(
        "building {total} container images into {} (the first time takes a few minutes: \
         Debian's packages are downloaded)",
        dir.display()
    );
    let finished = AtomicUsize::new(0);
    // Prints one line per image as it finishes.
    let timed = |step: &dyn Fn() -> Result<Image, Error>| {
        let started = Instant::now();
        let image = step()?;
        eprintln!(
            "built image {} in {} ({}/{total})",
            image.names.join(", "),
            elapsed(started.elapsed()),
            finished.fetch_add(1, Ordering::Relaxed) + 1
        );
        Ok::<_, Error>(image)
    };
    // The Debian images wait on the mirror and on dpkg's fsyncs as much as on the CPU: built
    // side by side they take about half as long as one after another, even on 2 cores.
    let (local, debian) = std::thread::scope(|scope| {
        let threads: Vec<_> = DEBIAN
            .iter()
            .map(|image| scope.spawn(|| timed(&|| debian(&build, image))))
            .collect();
        let mut local = vec![timed(&|| pause(&build))];
        local.extend(ETCD.iter().map(|release| timed(&|| etcd(&build, release))));
        local.extend(PROGRAMS.iter().map(|p| timed(&|| program(&build, p))));
        let debian: Vec<_> = threads
            .into_iter()
            .map(|thread| {
                thread
                    .join()
                    .unwrap_or_else(|_| Err(Error::Invalid("an image build panicked".to_owned())))
            })
            .collect();
        (local, debian)
    });
    let images = local
        .into_iter()
        .chain(debian)
        .collect::<Result<Vec<_>, _>>()?;

    fs::remove_dir_all(&build.work).map_err(Error::io("removing", &build.work))?;
    let list = serde_json::Value::Array(
        images
            .iter()
            .map(|image| {
                serde_json::json!({
                    "names": image.names,
                    "archive": image.archive.file_name().map(|name| name.to_string_lossy()),
                })
            })
            .collect(),
    );
    let list_path = partial.join(LIST);
    let text = serde_json::to_vec_pretty(&list).map_err(|source| Error::Json {
        what: "list",
        source,
    })?;
    fs::write(&list_path, text).map_err(Error::io("writing", &list_path))?;
    if dir.exists() {
        fs::remove_dir_all(dir).map_err(Error::io("removing", dir))?;
    }
    fs::rename(partial, dir).map_err(Error::io("moving into place", dir))
}

/// The pause image from the pinned Kubernetes release's own source and Makefile: a static C
/// program that sleeps until signalled, run as 65535 as upstream does.
fn pause(build: &Build) -> Result<Image, Error> {
    let pause_dir =
        module_dir(&build.sources.join("kubernetes"), "k8s.io/kubernetes")?.join("build/pause");
    let makefile = pause_dir.join("Makefile");
    let text = fs::read_to_string(&makefile).map_err(Error::io("reading", &makefile))?;
    let tag = makefile_tag(&text)
        .ok_or_else(|| Error::Invalid(format!("{} sets no `TAG ?=`", makefile.display())))?;
    // The Makefile's CFLAGS; its REV (`git describe` of the Kubernetes tree) is the release.
    let version = format!(
        "-DVERSION=v{tag}-{}",
        Tools::kubernetes_version(build.sources)?
    );
    let binary = build.work.join("pause");
    let source = pause_dir.join("linux/pause.c");
    let mut gcc = Command::new("gcc");
    gcc.args(["-Os", "-Wall", "-Werror", "-static", "-s", &version, "-o"])
        .arg(&binary)
        .arg(&source);
    run(&mut gcc).map_err(|error| match error {
        Error::Spawn { .. } => Error::Prerequisite(
            "a C compiler with static glibc is needed to build the pause image: install gcc \
             and libc6-dev (Debian) or glibc-static (Fedora)"
                .to_owned(),
        ),
        other => other,
    })?;
    let layer_path = build.work.join("pause.layer.tar");
    let mut layer = Layer::create(&layer_path)?;
    layer.file("pause", &binary, 0o755)?;
    layer.finish()?;
    let config = ImageConfig {
        entrypoint: vec!["/pause".to_owned()],
        env: vec![PATH.to_owned()],
        user: Some("65535:65535".to_owned()),
        ..ImageConfig::default()
    };
    build.archive(
        "pause",
        &[layer_path],
        &config,
        vec![format!("registry.k8s.io/pause:{tag}")],
    )
}

/// `TAG ?= 3.10.1` → `3.10.1`.
fn makefile_tag(makefile: &str) -> Option<String> {
    makefile.lines().find_map(|line| {
        let value = line
            .trim()
            .strip_prefix("TAG")?
            .trim_start()
            .strip_prefix("?=")?;
        Some(value.trim().to_owned()).filter(|tag| !tag.is_empty())
    })
}

/// etcd, etcdctl and etcdutl of one release in `/usr/local/bin`, with the directories the
/// official image has (`/var/etcd`, `/var/lib/etcd`) and a `/tmp`; no libc, like upstream's.
fn etcd(build: &Build, release: &Etcd) -> Result<Image, Error> {
    let go_mod = build.sources.join(release.module).join("go.mod");
    let version = module_version(&go_mod, "go.etcd.io/etcd/server/v3")?;
    let layer_path = build.work.join(format!("{}.layer.tar", release.module));
    let mut layer = Layer::create(&layer_path)?;
    for dir in ["usr", "usr/local", "usr/local/bin", "var", "var/lib"] {
        layer.dir(dir, 0o755, (0, 0))?;
    }
    // etcd warns about data directories anyone but their owner can read.
    layer.dir("var/etcd", 0o700, (0, 0))?;
    layer.dir("var/lib/etcd", 0o700, (0, 0))?;
    layer.dir("tmp", 0o1777, (0, 0))?;
    for name in ["etcd", "etcdctl", "etcdutl"] {
        let binary = build.tools.bin(&format!("{name}{}", release.suffix));
        require_static(&binary)?;
        layer.file(&format!("usr/local/bin/{name}"), &binary, 0o755)?;
    }
    layer.finish()?;
    let config = ImageConfig {
        cmd: vec!["/usr/local/bin/etcd".to_owned()],
        env: vec![PATH.to_owned()],
        exposed_ports: vec!["2379/tcp".to_owned(), "2380/tcp".to_owned()],
        ..ImageConfig::default()
    };
    build.archive(
        release.module,
        &[layer_path],
        &config,
        vec![
            format!("gcr.io/etcd-development/etcd:{version}"),
            format!("quay.io/coreos/etcd:{version}"),
        ],
    )
}

/// A Go program alone in its image: its module, the binary's name in the tools' `bin/` and
/// where the image has it, and the names of the image (`{version}`: the module's pinned version).
struct Program {
    key: &'static str,
    module: &'static str,
    module_path: &'static str,
    binary: &'static str,
    install_as: &'static str,
    entrypoint: bool,
    ports: &'static [&'static str],
    name: &'static str,
}

const PROGRAMS: &[Program] = &[
    // Run as root: upstream's image runs it as nonroot with a file capability to bind port 53,
    // which a layer of ours would have to carry as an xattr.
    Program {
        key: "coredns",
        module: "coredns",
        module_path: "github.com/coredns/coredns",
        binary: "coredns",
        install_as: "coredns",
        entrypoint: true,
        ports: &["53/tcp", "53/udp"],
        name: "registry.k8s.io/coredns/coredns:{version}",
    },
    // Its manifest runs `local-path-provisioner …` from PATH.
    Program {
        key: "local-path-provisioner",
        module: "local-path-provisioner",
        module_path: "github.com/rancher/local-path-provisioner",
        binary: "local-path-provisioner",
        install_as: "usr/local/bin/local-path-provisioner",
        entrypoint: false,
        ports: &[],
        name: "docker.io/rancher/local-path-provisioner:{version}",
    },
];

fn program(build: &Build, program: &Program) -> Result<Image, Error> {
    let version = module_version(
        &build.sources.join(program.module).join("go.mod"),
        program.module_path,
    )?;
    let binary = build.tools.bin(program.binary);
    require_static(&binary)?;
    let layer_path = build.work.join(format!("{}.layer.tar", program.key));
    let mut layer = Layer::create(&layer_path)?;
    layer.file_in_new_dirs(program.install_as, &binary, 0o755)?;
    layer.finish()?;
    let command = vec![format!("/{}", program.install_as)];
    let (entrypoint, cmd) = if program.entrypoint {
        (command, Vec::new())
    } else {
        (Vec::new(), command)
    };
    let config = ImageConfig {
        entrypoint,
        cmd,
        env: vec![PATH.to_owned()],
        exposed_ports: program.ports.iter().map(|p| (*p).to_owned()).collect(),
        ..ImageConfig::default()
    };
    build.archive(
        program.key,
        &[layer_path],
        &config,
        vec![program.name.replace("{version}", &version)],
    )
}

/// One of the Debian images: mmdebstrap's `essential` set (no apt, no init) plus the packages,
/// shaped by hooks like the official image of the same name, written straight to a layer tar.
fn debian(build: &Build, image: &Debian) -> Result<Image, Error> {
    let layer_path = build.work.join(format!("{}.layer.tar", image.key));
    let mut command = Command::new("mmdebstrap");
    command
        .arg("--variant=essential")
        .arg(format!("--include={}", image.packages.join(",")))
        .arg("--aptopt=Acquire::Retries \"3\"")
        // No /dev in the layer: the runtime mounts its own, and device nodes would need mknod
        // to unpack.
        .arg("--skip=output/dev")
        // mmdebstrap's temporary root goes into the partial directory, not /tmp.
        .env("TMPDIR", &build.work);
    for option in DPKG_EXCLUDES {
        command.arg(format!("--dpkgopt={option}"));
    }
    match image.kind {
        DebianKind::Nginx | DebianKind::NginxUnprivileged => {
            // As in the official image: logs go to the container's output.
            command.arg(
                "--customize-hook=ln -sf /dev/stdout \"$1/var/log/nginx/access.log\" && \
                 ln -sf /dev/stderr \"$1/var/log/nginx/error.log\"",
            );
            if let DebianKind::NginxUnprivileged = image.kind {
                // What nginxinc's image changes: no `user` switch, the pid file and the temporary
                // files where any user may write, port 8080 (checked: a sed that matched nothing
                // would leave a root nginx behind this name).
                command.arg(
                "--customize-hook=set -e; conf=\"$1/etc/nginx/nginx.conf\"; \
                 site=\"$1/etc/nginx/sites-available/default\"; \
                 sed -i -e '/^user /d' -e 's,^pid .*,pid /tmp/nginx.pid;,' \
                   -e '/^http {/a\\    client_body_temp_path /tmp/client_temp;' \
                   -e '/^http {/a\\    proxy_temp_path /tmp/proxy_temp;' \
                   -e '/^http {/a\\    fastcgi_temp_path /tmp/fastcgi_temp;' \
                   -e '/^http {/a\\    uwsgi_temp_path /tmp/uwsgi_temp;' \
                   -e '/^http {/a\\    scgi_temp_path /tmp/scgi_temp;' \"$conf\"; \
                 sed -i -e 's/listen 80 default_server;/listen 8080 default_server;/' \
                   -e 's/listen \\[::\\]:80 default_server;/listen [::]:8080 default_server;/' \"$site\"; \
                 if grep -q '^user ' \"$conf\"; then exit 1; fi; grep -q '^pid /tmp/nginx.pid;' \"$conf\"; \
                 grep -q 'scgi_temp_path /tmp/scgi_temp;' \"$conf\"; \
                 grep -q 'listen 8080 default_server;' \"$site\"; \
                 if grep -q 'listen .*:80 ' \"$site\"; then exit 1; fi",
            );
            }
        }
        DebianKind::Postgres { .. } => {
            let script = build.work.join(format!("{}-entrypoint.sh", image.key));
            fs::write(&script, POSTGRES_ENTRYPOINT).map_err(Error::io("writing", &script))?;
            // Before the packages: the official image's uid/gid 999, which postgresql-common's
            // `adduser --system` then keeps, and no cluster created at install time (the
            // entrypoint creates it in PGDATA).
            command.arg(
                "--essential-hook=set -e; \
                 echo 'postgres:x:999:999:PostgreSQL administrator,,,:/var/lib/postgresql:/bin/bash' >> \"$1/etc/passwd\"; \
                 echo 'postgres:x:999:' >> \"$1/etc/group\"; \
                 mkdir -p \"$1/etc/postgresql-common/createcluster.d\"; \
                 echo 'create_main_cluster = false' > \"$1/etc/postgresql-common/createcluster.d/no-main-cluster.conf\"",
            );
            // After them: check the owner took, add the entrypoint and the directories the
            // official image has, keep only the socket directory in /run. The manuals go here,
            // not by a dpkg exclude (postgresql-client's postinst registers them as
            // alternatives and fails without them), and so does the snakeoil key ssl-cert made
            // for this build host (the server's SSL is off; no private key ships).
            command.arg(format!(
                "--customize-hook=set -e; \
                 grep -q '^postgres:x:999:999:' \"$1/etc/passwd\"; \
                 test \"$(stat -c %u:%g \"$1/var/lib/postgresql\")\" = 999:999; \
                 install -m 0755 {} \"$1/usr/local/bin/docker-entrypoint.sh\"; \
                 mkdir -p \"$1/docker-entrypoint-initdb.d\" \"$1/var/lib/postgresql/data\" \"$1/run/postgresql\"; \
                 chown 999:999 \"$1/var/lib/postgresql/data\" \"$1/run/postgresql\"; \
                 chmod 1777 \"$1/var/lib/postgresql/data\"; \
                 chmod 3777 \"$1/run/postgresql\"; \
                 find \"$1/run\" -mindepth 1 -maxdepth 1 ! -name postgresql ! -name lock -exec rm -rf {{}} +; \
                 rm -rf \"$1\"/usr/share/postgresql/*/man; \
                 rm -f \"$1/etc/ssl/private/ssl-cert-snakeoil.key\" \"$1/etc/ssl/certs/ssl-cert-snakeoil.pem\"",
                shell_quote(&script.to_string_lossy())
            ));
            // The socket directory lives in /run, which mmdebstrap would empty.
            command.arg("--skip=cleanup/run");
        }
        DebianKind::Toolbox => {}
    }
    command
        .arg(image.suite)
        .arg(&layer_path)
        .arg(format!("deb {MIRROR} {} main", image.suite))
        .arg(format!("deb {MIRROR} {}-updates main", image.suite))
        .arg(format!(
            "deb {SECURITY_MIRROR} {}-security main",
            image.suite
        ));
    run(&mut command)?;
    let status = dpkg_status(&layer_path)?;

    let (config, names) = match image.kind {
        DebianKind::Nginx | DebianKind::NginxUnprivileged => {
            let version = upstream_version(&status, "nginx")?;
            let (major_minor, _) = version
                .rsplit_once('.')
                .ok_or_else(|| Error::Invalid(format!("nginx version {version} is not x.y.z")))?;
            let (repository, user, port) = match image.kind {
                DebianKind::NginxUnprivileged => {
                    ("nginxinc/nginx-unprivileged", Some("101:101"), "8080/tcp")
                }
                _ => ("library/nginx", None, "80/tcp"),
            };
            let config = ImageConfig {
                cmd: ["nginx", "-g", "daemon off;"].map(str::to_owned).to_vec(),
                env: vec![PATH.to_owned()],
                user: user.map(str::to_owned),
                exposed_ports: vec![port.to_owned()],
                stop_signal: Some("SIGQUIT".to_owned()),
                ..ImageConfig::default()
            };
            let names = ["latest", major_minor, &version]
                .map(|tag| format!("docker.io/{repository}:{tag}"))
                .to_vec();
            (config, names)
        }
        DebianKind::Postgres { major, repository } => {
            let package = format!("postgresql-{major}");
            let version = upstream_version(&status, &package)?;
            if version.split('.').next() != Some(&major.to_string()) {
                return Err(Error::Invalid(format!(
                    "{package} is version {version}, not {major}.x"
                )));
            }
            let debian_version = package_version(&status, &package)?;
            let config = ImageConfig {
                entrypoint: vec!["docker-entrypoint.sh".to_owned()],
                cmd: vec!["postgres".to_owned()],
                env: vec![
                    format!(
                        "PATH=/usr/lib/postgresql/{major}/bin:{}",
                        PATH.trim_start_matches("PATH=")
                    ),
                    // glibc's built-in UTF-8 locale: no locales to generate.
                    "LANG=C.UTF-8".to_owned(),
                    format!("PG_MAJOR={major}"),
                    format!("PG_VERSION={debian_version}"),
                    "PGDATA=/var/lib/postgresql/data".to_owned(),
                ],
                exposed_ports: vec!["5432/tcp".to_owned()],
                // A fast shutdown, as the official image: SIGTERM would wait for every client.
                stop_signal: Some("SIGINT".to_owned()),
                ..ImageConfig::default()
            };
            let names = [major.to_string(), version]
                .map(|tag| format!("{repository}:{tag}"))
                .to_vec();
            (config, names)
        }
        DebianKind::Toolbox => {
            let config = ImageConfig {
                cmd: ["sleep", "infinity"].map(str::to_owned).to_vec(),
                env: vec![PATH.to_owned()],
                ..ImageConfig::default()
            };
            (config, vec!["docker.io/app-operator/toolbox:1".to_owned()])
        }
    };
    build.archive(image.key, &[layer_path], &config, names)
}

/// The rootfs's `/var/lib/dpkg/status`, read from the layer tarball.
fn dpkg_status(layer: &Path) -> Result<String, Error> {
    let file = fs::File::open(layer).map_err(Error::io("opening", layer))?;
    let mut archive = tar::Archive::new(std::io::BufReader::new(file));
    for entry in archive.entries().map_err(Error::io("reading", layer))? {
        let mut entry = entry.map_err(Error::io("reading", layer))?;
        let path = entry.path().map_err(Error::io("reading", layer))?;
        if path.strip_prefix(".").unwrap_or(&path) == Path::new("var/lib/dpkg/status") {
            let mut status = String::new();
            std::io::Read::read_to_string(&mut entry, &mut status)
                .map_err(Error::io("reading var/lib/dpkg/status in", layer))?;
            return Ok(status);
        }
    }
    Err(Error::Invalid(format!(
        "{} has no var/lib/dpkg/status",
        layer.display()
    )))
}

/// The version of an installed package in a dpkg status file: `1.22.1-9+deb12u9`.
fn package_version(status: &str, package: &str) -> Result<String, Error> {
    status
        .split("\n\n")
        .find_map(|stanza| {
            let field = |name: &str| {
                stanza
                    .lines()
                    .find_map(|line| line.strip_prefix(name)?.strip_prefix(": "))
            };
            (field("Package") == Some(package)
                && field("Status").is_some_and(|status| status.ends_with(" installed")))
            .then(|| field("Version").map(str::to_owned))
            .flatten()
        })
        .ok_or_else(|| Error::Invalid(format!("{package} is not installed in the image")))
}

/// The upstream part of an installed package's version: `1:1.22.1-9+deb12u9` → `1.22.1`.
fn upstream_version(status: &str, package: &str) -> Result<String, Error> {
    let version = package_version(status, package)?;
    let version = version.split_once(':').map_or(version.as_str(), |(_, v)| v);
    let version = version.rsplit_once('-').map_or(version, |(v, _)| v);
    // Debian's repacks (`+dfsg`, `~rc1`) are not part of the release's name.
    let version = version.split(['+', '~']).next().unwrap_or(version);
    Ok(version.to_owned())
}

/// mmdebstrap builds the Debian images; installed from Debian's archive when missing, as the
/// SampleDB tests install PostgreSQL.
fn ensure_mmdebstrap() -> Result<(), Error> {
    let found = Command::new("mmdebstrap")
        .arg("--version")
        .output()
        .is_ok_and(|output| output.status.success());
    if found {
        return Ok(());
    }
    install_debian_packages(
        &["mmdebstrap"],
        "building the nginx, postgres and toolbox images",
    )
}

/// Refuses a dynamically linked binary: the etcd and CoreDNS images have no libc.
fn require_static(binary: &Path) -> Result<(), Error> {
    let bytes = read_prefix(binary, 64 * 1024)?;
    match elf_interpreter(&bytes) {
        Some(false) => Ok(()),
        Some(true) => Err(Error::Invalid(format!(
            "{} is dynamically linked; the images have no libc (the tools build sets \
             CGO_ENABLED=0: rebuild them)",
            binary.display()
        ))),
        None => Err(Error::Invalid(format!(
            "{} is not a 64-bit ELF executable",
            binary.display()
        ))),
    }
}

fn read_prefix(path: &Path, limit: u64) -> Result<Vec<u8>, Error> {
    let file = fs::File::open(path).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            Error::Prerequisite(format!(
                "{} is missing: build the tools first (`cargo xtask tools`)",
                path.display()
            ))
        } else {
            Error::Io {
                action: "opening",
                path: path.to_owned(),
                source,
            }
        }
    })?;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(file, limit), &mut bytes)
        .map_err(Error::io("reading", path))?;
    Ok(bytes)
}

/// Whether a little-endian ELF64 file asks for a program interpreter (`PT_INTERP`, i.e. it is
/// dynamically linked); `None` when it is not such a file.
fn elf_interpreter(elf: &[u8]) -> Option<bool> {
    const PT_INTERP: u32 = 3;
    // ELF magic, ELFCLASS64, ELFDATA2LSB.
    if elf.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let u16_at = |at: usize| Some(u16::from_le_bytes(elf.get(at..at + 2)?.try_into().ok()?));
    let u32_at = |at: usize| Some(u32::from_le_bytes(elf.get(at..at + 4)?.try_into().ok()?));
    let u64_at = |at: usize| Some(u64::from_le_bytes(elf.get(at..at + 8)?.try_into().ok()?));
    let program_headers = usize::try_from(u64_at(0x20)?).ok()?;
    let entry_size = usize::from(u16_at(0x36)?);
    let count = usize::from(u16_at(0x38)?);
    let mut interpreter = false;
    for index in 0..count {
        interpreter |= u32_at(program_headers + index * entry_size)? == PT_INTERP;
    }
    Some(interpreter)
}

/// `'…'` for sh, so a cache path with spaces or quotes stays one word in a hook.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Package: nginx-common\nStatus: install ok installed\nVersion: 1.22.1-9+deb12u9\n\n\
        Package: nginx\nStatus: install ok installed\nPriority: optional\nVersion: 1.22.1-9+deb12u9\n\n\
        Package: postgresql-15\nStatus: deinstall ok config-files\nVersion: 15.1-1\n\n\
        Package: tzdata\nStatus: install ok installed\nVersion: 2:2025b-0+deb12u1\n";

    #[test]
    fn reads_installed_versions_from_dpkg_status() {
        assert_eq!(
            package_version(STATUS, "nginx").unwrap(),
            "1.22.1-9+deb12u9"
        );
        assert_eq!(upstream_version(STATUS, "nginx").unwrap(), "1.22.1");
        assert_eq!(upstream_version(STATUS, "tzdata").unwrap(), "2025b");
        // Removed with its configuration kept is not installed.
        assert!(package_version(STATUS, "postgresql-15").is_err());
        assert!(package_version(STATUS, "nginx-extras").is_err());
    }

    #[test]
    fn reads_the_pause_tag_from_its_makefile() {
        let makefile = "IMAGE = $(REGISTRY)/pause\n\nTAG ?= 3.10.1\nREV = $(shell git describe)\n";
        assert_eq!(makefile_tag(makefile).as_deref(), Some("3.10.1"));
        assert_eq!(makefile_tag("TAGS ?= x\n"), None);
    }

    #[test]
    fn tells_static_from_dynamic_executables() {
        // This test binary is dynamically linked (Rust's default on glibc).
        let own = read_prefix(&std::env::current_exe().unwrap(), 64 * 1024).unwrap();
        assert_eq!(elf_interpreter(&own), Some(true));
        assert_eq!(elf_interpreter(b"#!/bin/sh\n"), None);
    }

    #[test]
    fn quotes_hook_paths_for_sh() {
        assert_eq!(shell_quote("/a b/it's"), r"'/a b/it'\''s'");
    }
}
