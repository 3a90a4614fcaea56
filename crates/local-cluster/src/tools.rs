//! The upstream binaries, built from the pinned Go modules under `hack/k8s-tools/` into a
//! versioned cache directory outside git, and rebuilt only when the pins (or Go) change.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::error::Error;

/// Bumped when the way binaries are built changes, so caches built the old way are not reused.
const RECIPE: &str = "4";

/// One upstream command: the Go module directory (under `hack/k8s-tools/`) that pins it, and its package.
struct Binary {
    name: &'static str,
    module: &'static str,
    package: &'static str,
}

const BINARIES: &[Binary] = &[
    Binary {
        name: "etcd",
        module: "etcd",
        package: "go.etcd.io/etcd/server/v3",
    },
    // The client tools of the same release, which the etcd image ships: backup Jobs run
    // `etcdctl snapshot save`, a restored cluster's first member `etcdutl snapshot restore`.
    Binary {
        name: "etcdctl",
        module: "etcd",
        package: "go.etcd.io/etcd/etcdctl/v3",
    },
    Binary {
        name: "etcdutl",
        module: "etcd",
        package: "go.etcd.io/etcd/etcdutl/v3",
    },
    // The release before the pinned one, for the EtcdCluster upgrade test (3.5 → 3.6), with the
    // client tools its image ships.
    Binary {
        name: "etcd-3.5",
        module: "etcd-3.5",
        package: "go.etcd.io/etcd/server/v3",
    },
    Binary {
        name: "etcdctl-3.5",
        module: "etcd-3.5",
        package: "go.etcd.io/etcd/etcdctl/v3",
    },
    Binary {
        name: "etcdutl-3.5",
        module: "etcd-3.5",
        package: "go.etcd.io/etcd/etcdutl/v3",
    },
    Binary {
        name: "kube-apiserver",
        module: "kubernetes",
        package: "k8s.io/kubernetes/cmd/kube-apiserver",
    },
    Binary {
        name: "kube-controller-manager",
        module: "kubernetes",
        package: "k8s.io/kubernetes/cmd/kube-controller-manager",
    },
    Binary {
        name: "kube-scheduler",
        module: "kubernetes",
        package: "k8s.io/kubernetes/cmd/kube-scheduler",
    },
    Binary {
        name: "kubectl",
        module: "kubernetes",
        package: "k8s.io/kubernetes/cmd/kubectl",
    },
    // The real node: the kubelet and kube-proxy of the same release, and its cluster DNS.
    Binary {
        name: "kubelet",
        module: "kubernetes",
        package: "k8s.io/kubernetes/cmd/kubelet",
    },
    Binary {
        name: "kube-proxy",
        module: "kubernetes",
        package: "k8s.io/kubernetes/cmd/kube-proxy",
    },
    // The control plane of the oldest supported minor (see `cluster::Kubernetes::Oldest`).
    Binary {
        name: "kube-apiserver-1.34",
        module: "kubernetes-1.34",
        package: "k8s.io/kubernetes/cmd/kube-apiserver",
    },
    Binary {
        name: "kube-controller-manager-1.34",
        module: "kubernetes-1.34",
        package: "k8s.io/kubernetes/cmd/kube-controller-manager",
    },
    Binary {
        name: "kube-scheduler-1.34",
        module: "kubernetes-1.34",
        package: "k8s.io/kubernetes/cmd/kube-scheduler",
    },
    // Removes the real node's Pods through the CRI at cluster-down.
    Binary {
        name: "crictl",
        module: "cri-tools",
        package: "sigs.k8s.io/cri-tools/cmd/crictl",
    },
    Binary {
        name: "coredns",
        module: "coredns",
        package: "github.com/coredns/coredns",
    },
    // The real node's default StorageClass, as kind has it.
    Binary {
        name: "local-path-provisioner",
        module: "local-path-provisioner",
        package: "github.com/rancher/local-path-provisioner",
    },
    Binary {
        name: "kwok",
        module: "kwok",
        package: "sigs.k8s.io/kwok/cmd/kwok",
    },
    Binary {
        name: "helm",
        module: "helm",
        package: "helm.sh/helm/v3/cmd/helm",
    },
    // For the GitOps health test: kstatus's verdict on objects (Flux's rules), and an Argo CD
    // Lua health check's, run by gopher-lua as Argo CD runs it.
    Binary {
        name: "gitops-health",
        module: "gitops-health",
        package: "github.com/app-operator/app-operator/hack/k8s-tools/gitops-health",
    },
    // The real node's S3-compatible object store, for backups to a bucket (versitygw's POSIX
    // gateway: it checks SigV4 signatures, keeps multipart uploads and user metadata).
    Binary {
        name: "versitygw",
        module: "versitygw",
        package: "github.com/versity/versitygw/cmd/versitygw",
    },
    // For the monitoring tests: `promtool check rules` and `promtool test rules` on the alerts.
    Binary {
        name: "promtool",
        module: "prometheus",
        package: "github.com/prometheus/prometheus/cmd/promtool",
    },
];

/// kwok's stock stages: nodes become Ready (with lease heartbeats), Pods become Ready at once, Job
/// Pods complete after 1–6 s, or after the annotation `pod-complete.stage.kwok.x-k8s.io/delay`
/// (how tests make a Job hang), except those that run the etcd image (see
/// [`LEAVE_ETCD_PODS_RUNNING`]); deleted Pods go away; and a running Pod labelled
/// `pod-container-running-failed.stage.kwok.x-k8s.io=true` fails (its container exits 1), which
/// is how tests make a Pod crash. Taken from the pinned kwok module itself.
const KWOK_STAGES: &[&str] = &[
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "kustomize/stage/pod/fast/pod-ready.yaml",
    POD_COMPLETE,
    "kustomize/stage/pod/fast/pod-delete.yaml",
    "kustomize/stage/pod/chaos/pod-container-running-failed.yaml",
];

/// The stage that completes Job Pods.
const POD_COMPLETE: &str = "kustomize/stage/pod/general/pod-complete.yaml";

/// Added to [`POD_COMPLETE`]'s selector: Pods with a container (or init container) on the etcd
/// image are not completed. The test suite's member runner runs their commands for real (a
/// backup's `etcdctl snapshot save`) and sets their phase from the exit codes; kwok would mark
/// them Succeeded after a few seconds whatever the commands did. A gojq expression, whose result
/// kwok compares as a string; `.image // ""` because `test` fails on null, and a failing query
/// would match `NotIn`.
const LEAVE_ETCD_PODS_RUNNING: &str = r#"    - key: '[(.spec.containers // [])[], (.spec.initContainers // [])[] | .image // "" | test("(^|/)etcd:v?[0-9]")] | any'
      operator: 'NotIn'
      values:
      - 'true'
"#;

/// The built tools: `bin/` with every binary, and kwok's stage configuration.
#[derive(Debug, Clone)]
pub struct Tools {
    pub dir: PathBuf,
    /// The Go modules that pin them (`hack/k8s-tools`); the real node's images read them too.
    pub sources: PathBuf,
}

impl Tools {
    pub fn bin(&self, name: &str) -> PathBuf {
        self.dir.join("bin").join(name)
    }

    /// Named after the stage list and the change made to it, so changing either writes a new
    /// file instead of rebuilding every binary.
    pub fn kwok_stages(&self) -> PathBuf {
        let mut hash = Sha256::new();
        hash.update(KWOK_STAGES.join("\n"));
        hash.update(LEAVE_ETCD_PODS_RUNNING);
        let digest = hash.finalize();
        let id: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
        self.dir.join(format!("kwok-stages-{id}.yaml"))
    }

    /// The Kubernetes release the binaries are built from, e.g. `v1.35.4`.
    pub fn kubernetes_version(sources: &Path) -> Result<String, Error> {
        module_version(&sources.join("kubernetes/go.mod"), "k8s.io/kubernetes")
    }

    /// Returns the cached tools, building them first when missing or when the pins changed.
    pub fn ensure(sources: &Path) -> Result<Tools, Error> {
        check_go(GO, sources)?;
        let dir = cache_root().join(format!(
            "k8s-tools-{}-{}",
            Self::kubernetes_version(sources)?,
            fingerprint(sources)?
        ));
        let tools = Tools {
            dir,
            sources: sources.to_owned(),
        };
        if !tools.dir.join("complete").exists() {
            build(sources, &tools.dir)?;
        }
        if !tools.kwok_stages().exists() {
            write_kwok_stages(sources, &tools.kwok_stages())?;
        }
        Ok(tools)
    }
}

/// `$APP_OPERATOR_CACHE_DIR`, else `$XDG_CACHE_HOME/app-operator`, else `~/.cache/app-operator`.
pub fn cache_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("APP_OPERATOR_CACHE_DIR") {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(dir).join("app-operator");
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
    home.join(".cache/app-operator")
}

pub(crate) fn module_version(go_mod: &Path, module: &str) -> Result<String, Error> {
    let text = fs::read_to_string(go_mod).map_err(Error::io("reading", go_mod))?;
    text.lines()
        .map(|line| line.trim().trim_start_matches("require").trim())
        .find_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some(module))
                .then(|| words.next().map(str::to_owned))
                .flatten()
        })
        .ok_or_else(|| Error::Invalid(format!("{} does not require {module}", go_mod.display())))
}

/// Go must be on PATH and at least as new as every tools module asks (`GOTOOLCHAIN=local`: no
/// toolchain is downloaded behind the user's back), else one line says what to install.
fn check_go(program: &str, sources: &Path) -> Result<(), Error> {
    let mut needed = Vec::new();
    for binary in BINARIES {
        let go_mod = sources.join(binary.module).join("go.mod");
        let text = fs::read_to_string(&go_mod).map_err(Error::io("reading", &go_mod))?;
        if let Some(version) = text.lines().find_map(|line| line.strip_prefix("go ")) {
            needed.push(version_numbers(version.trim()));
        }
    }
    let needed = needed.into_iter().max().unwrap_or_default();
    let needed_text = needed
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(".");
    let found = match run_go(program, sources, &["env", "GOVERSION"]) {
        Ok(found) => found.trim().to_owned(),
        Err(Error::Spawn { .. }) => {
            return Err(Error::Prerequisite(format!(
                "Go {needed_text} or newer is needed to build the upstream binaries (etcd, \
                 kube-apiserver, kwok, …) and `go` is not on PATH: install it from \
                 https://go.dev/dl/ and put its bin directory on PATH"
            )));
        }
        Err(error) => return Err(error),
    };
    if version_numbers(found.trim_start_matches("go")) < needed {
        return Err(Error::Prerequisite(format!(
            "Go {needed_text} or newer is needed to build the upstream binaries, and `go` on PATH \
             is {found}: install a newer one from https://go.dev/dl/ (GOTOOLCHAIN=local is set, \
             so Go will not download one itself)"
        )));
    }
    Ok(())
}

/// `1.26.7` → `[1, 26, 7]`, for comparing versions; a suffix (`1.27rc1`) ends a number.
fn version_numbers(version: &str) -> Vec<u32> {
    version
        .split('.')
        .map(|part| {
            let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().unwrap_or(0)
        })
        .collect()
}

/// A hash of everything that decides what gets built: the pins, the Go version, the recipe.
fn fingerprint(sources: &Path) -> Result<String, Error> {
    let mut hash = Sha256::new();
    hash.update(RECIPE);
    hash.update(go(sources, &["env", "GOVERSION"])?);
    let mut modules: Vec<&str> = BINARIES.iter().map(|b| b.module).collect();
    modules.dedup();
    for module in modules {
        for file in ["go.mod", "go.sum"] {
            let path = sources.join(module).join(file);
            hash.update(fs::read(&path).map_err(Error::io("reading", &path))?);
        }
    }
    let digest = hash.finalize();
    Ok(digest.iter().take(6).map(|b| format!("{b:02x}")).collect())
}

fn build(sources: &Path, dir: &Path) -> Result<(), Error> {
    // `<dir>.partial`: `with_extension` would cut the name at the version's last dot, giving
    // every pin the same partial directory.
    let mut partial = dir.as_os_str().to_owned();
    partial.push(".partial");
    let partial = PathBuf::from(partial);
    if partial.exists() {
        fs::remove_dir_all(&partial).map_err(Error::io("removing", &partial))?;
    }
    let bin = partial.join("bin");
    fs::create_dir_all(&bin).map_err(Error::io("creating", &bin))?;
    let ldflags = kubernetes_ldflags(&Tools::kubernetes_version(sources)?);
    let oldest_ldflags = kubernetes_ldflags(&module_version(
        &sources.join("kubernetes-1.34/go.mod"),
        "k8s.io/kubernetes",
    )?);
    let prometheus_flags = prometheus_ldflags(&module_version(
        &sources.join("prometheus/go.mod"),
        "github.com/prometheus/prometheus",
    )?);
    let helm_flags = helm_ldflags(&module_version(
        &sources.join("helm/go.mod"),
        "k8s.io/client-go",
    )?);
    let groups = invocations();
    let total = groups.len();
    eprintln!(
        "building {} upstream binaries in {total} go builds into {} (the first time takes about \
         15 minutes on 2 cores; later builds reuse Go's cache)",
        BINARIES.len(),
        dir.display()
    );
    for (index, group) in groups.iter().enumerate() {
        let number = index + 1;
        let names: Vec<&str> = group.iter().map(|binary| binary.name).collect();
        let names = names.join(", ");
        let module_name = group.first().map_or("", |binary| binary.module);
        eprintln!("building {names} from {module_name} ({number}/{total})");
        let started = Instant::now();
        let module = sources.join(module_name);
        let flags = match module_name {
            "kubernetes" => ldflags.as_str(),
            "kubernetes-1.34" => oldest_ldflags.as_str(),
            "prometheus" => prometheus_flags.as_str(),
            "helm" => helm_flags.as_str(),
            _ => "-s -w",
        };
        // promtool checks and tests rule files: without the service discoveries (every cloud's
        // SDK, client-go) it is the same tool at a fraction of the build (Prometheus's own tag).
        let tags = if module_name == "prometheus" {
            "remove_all_sd"
        } else {
            ""
        };
        // One binary goes to its own name; several (each named after its package) into `bin/`.
        let out = match group.as_slice() {
            [single] => bin.join(single.name).to_string_lossy().into_owned(),
            _ => format!("{}/", bin.display()),
        };
        let mut args = vec![
            "build",
            "-trimpath",
            "-tags",
            tags,
            "-ldflags",
            flags,
            "-o",
            &out,
        ];
        args.extend(group.iter().map(|binary| binary.package));
        go(&module, &args)?;
        eprintln!(
            "built {names} in {} ({number}/{total})",
            elapsed(started.elapsed())
        );
    }
    let complete = partial.join("complete");
    fs::write(&complete, "").map_err(Error::io("writing", &complete))?;
    if dir.exists() {
        fs::remove_dir_all(dir).map_err(Error::io("removing", dir))?;
    }
    fs::rename(&partial, dir).map_err(Error::io("moving into place", dir))
}

/// The `go build` invocations: binaries of one module that are named after their packages
/// (the Kubernetes commands) go in one, so Go compiles the packages they share once and links
/// them side by side on both cores; the others one each.
fn invocations() -> Vec<Vec<&'static Binary>> {
    let named_after_package =
        |binary: &Binary| binary.package.rsplit('/').next() == Some(binary.name);
    let mut groups: Vec<Vec<&'static Binary>> = Vec::new();
    for binary in BINARIES {
        match groups.last_mut() {
            Some(group)
                if named_after_package(binary)
                    && group.iter().all(|other| {
                        other.module == binary.module && named_after_package(other)
                    }) =>
            {
                group.push(binary);
            }
            _ => groups.push(vec![binary]),
        }
    }
    groups
}

/// A build's duration the way people say it: `3m12s`, `45s`.
pub(crate) fn elapsed(duration: Duration) -> String {
    let seconds = duration.as_secs();
    let (minutes, seconds) = (seconds / 60, seconds % 60);
    if minutes == 0 {
        format!("{seconds}s")
    } else {
        format!("{minutes}m{seconds:02}s")
    }
}

/// Copies [`KWOK_STAGES`] from the pinned kwok module into one file (written aside and renamed,
/// so a cluster never reads half of it); [`POD_COMPLETE`] gets [`LEAVE_ETCD_PODS_RUNNING`].
fn write_kwok_stages(sources: &Path, out: &Path) -> Result<(), Error> {
    let kwok_dir = go(
        &sources.join("kwok"),
        &["list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kwok"],
    )?;
    let mut stages = String::from(
        "# kwok's stock stages, copied from the pinned kwok module; pod-complete leaves Pods on the\n\
         # etcd image to the test suite's member runner.\n",
    );
    for stage in KWOK_STAGES {
        let path = Path::new(kwok_dir.trim()).join(stage);
        let text = fs::read_to_string(&path).map_err(Error::io("reading", &path))?;
        stages.push_str("---\n");
        if *stage == POD_COMPLETE {
            stages.push_str(&leave_etcd_pods_running(&text).ok_or_else(|| {
                Error::Invalid(format!(
                    "{} has no selector.matchExpressions to add to",
                    path.display()
                ))
            })?);
        } else {
            stages.push_str(&text);
        }
    }
    let partial = out.with_extension("partial");
    fs::write(&partial, stages).map_err(Error::io("writing", &partial))?;
    fs::rename(&partial, out).map_err(Error::io("moving into place", out))
}

/// The pod-complete stage with [`LEAVE_ETCD_PODS_RUNNING`] first in its selector; `None` when the
/// stage has no `matchExpressions` where kwok's own have them.
fn leave_etcd_pods_running(stage: &str) -> Option<String> {
    const LIST: &str = "\n  selector:\n    matchExpressions:\n";
    let at = stage.find(LIST)? + LIST.len();
    let (before, after) = stage.split_at_checked(at)?;
    Some(format!("{before}{LEAVE_ETCD_PODS_RUNNING}{after}"))
}

/// `-s -w` and `-X package.variable=value` for each variable in each package: what a project's
/// release build stamps into its binaries.
fn stamped(packages: &[&str], variables: &[(&str, &str)]) -> String {
    let mut flags = String::from("-s -w");
    for package in packages {
        for (variable, value) in variables {
            flags.push_str(&format!(" -X {package}.{variable}={value}"));
        }
    }
    flags
}

/// What `make release` stamps into the Kubernetes binaries, so `kubectl version` and the API
/// server's `/version` tell the truth instead of `v0.0.0-master`.
fn kubernetes_ldflags(version: &str) -> String {
    let minor = version.split('.').nth(1).unwrap_or_default();
    stamped(
        &[
            "k8s.io/component-base/version",
            "k8s.io/client-go/pkg/version",
        ],
        &[
            ("gitVersion", version),
            ("gitMajor", "1"),
            ("gitMinor", minor),
            ("gitTreeState", "clean"),
        ],
    )
}

/// What Helm's release build stamps into helm: the Kubernetes version of its client-go (`v0.35.1`
/// → 1.35), which `helm template` and `helm lint` assume when no cluster says (unstamped: 1.20,
/// older than any chart's `kubeVersion` here allows).
fn helm_ldflags(client_go_version: &str) -> String {
    let minor = client_go_version.split('.').nth(1).unwrap_or_default();
    stamped(
        &[
            "helm.sh/helm/v3/pkg/lint/rules",
            "helm.sh/helm/v3/pkg/chartutil",
        ],
        &[("k8sVersionMajor", "1"), ("k8sVersionMinor", minor)],
    )
}

/// What Prometheus's release build stamps into promtool, so `promtool --version` names the
/// release. Its Go module is versioned `v0.3XX.Y` for release `3.XX.Y`.
fn prometheus_ldflags(module_version: &str) -> String {
    let release = module_version
        .strip_prefix("v0.")
        .and_then(|rest| {
            let (minor, patch) = rest.split_once('.')?;
            let minor: u32 = minor.parse().ok()?;
            Some(format!("{}.{}.{patch}", minor / 100, minor % 100))
        })
        .unwrap_or_else(|| module_version.trim_start_matches('v').to_owned());
    format!("-s -w -X github.com/prometheus/common/version.Version={release}")
}

/// Where the Go module `path` that the tools module `module` pins is in the module cache.
pub fn module_dir(module: &Path, path: &str) -> Result<PathBuf, Error> {
    let mut dir = go(module, &["list", "-m", "-f", "{{.Dir}}", path])?;
    if dir.trim().is_empty() {
        // `go list -m` names only modules in the module cache; the tools build put it there,
        // unless the cache was cleaned since.
        go(module, &["mod", "download", path])?;
        dir = go(module, &["list", "-m", "-f", "{{.Dir}}", path])?;
    }
    Ok(PathBuf::from(dir.trim()))
}

/// The Go command, found on PATH.
const GO: &str = "go";

/// Runs `go` in `dir` with the machine's own toolchain (never a downloaded one), static
/// (`CGO_ENABLED=0`), and the module's `go.sum` as it is (`-mod=readonly`); its output.
pub fn go(dir: &Path, args: &[&str]) -> Result<String, Error> {
    run_go(GO, dir, args)
}

fn run_go(program: &str, dir: &Path, args: &[&str]) -> Result<String, Error> {
    let command = format!("{program} {}", args.join(" "));
    let output = Command::new(program)
        .args(args)
        .current_dir(dir)
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "-mod=readonly")
        // Static binaries: etcd, its tools and CoreDNS go into images with no libc.
        .env("CGO_ENABLED", "0")
        .output()
        .map_err(|source| Error::Spawn {
            command: command.clone(),
            source,
        })?;
    if !output.status.success() {
        return Err(Error::Command {
            command: format!("{command} (in {})", dir.display()),
            status: output.status,
            output: String::from_utf8_lossy(&output.stderr).into_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_pinned_kubernetes_version() {
        let version =
            Tools::kubernetes_version(&crate::repo_root().join("hack/k8s-tools")).unwrap();
        assert!(version.starts_with("v1.3"), "{version}");
    }

    #[test]
    fn pod_complete_leaves_etcd_pods_running() {
        let stage = "spec:\n  selector:\n    matchExpressions:\n    - key: '.metadata.deletionTimestamp'\n      operator: 'DoesNotExist'\n  weight: 1\n";
        let changed = leave_etcd_pods_running(stage).unwrap();
        assert_eq!(
            changed,
            format!(
                "spec:\n  selector:\n    matchExpressions:\n{LEAVE_ETCD_PODS_RUNNING}    - key: '.metadata.deletionTimestamp'\n      operator: 'DoesNotExist'\n  weight: 1\n"
            )
        );
        assert_eq!(leave_etcd_pods_running("spec:\n  weight: 1\n"), None);
    }

    #[test]
    fn compares_go_versions_by_number() {
        assert!(version_numbers("1.26.7") > version_numbers("1.26"));
        assert!(version_numbers("1.100.0") > version_numbers("1.26.7"));
        assert!(version_numbers("1.27rc1") > version_numbers("1.26.7"));
        assert!(version_numbers("1.25.0") < version_numbers("1.26.0"));
    }

    /// A `go` that is too old, or none at all, is named in one clear line before any build.
    #[test]
    fn an_old_or_missing_go_is_refused_with_what_to_install() {
        let sources = crate::repo_root().join("hack/k8s-tools");
        let fake = std::env::temp_dir().join(format!("fake-go-{}", std::process::id()));
        fs::create_dir_all(&fake).unwrap();
        let script = fake.join("go");
        fs::write(&script, "#!/bin/sh\necho go1.20.3\n").unwrap();
        fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let old = check_go(&script.to_string_lossy(), &sources);
        let missing = check_go(&fake.join("absent/go").to_string_lossy(), &sources);
        fs::remove_dir_all(&fake).unwrap();
        let old = old.unwrap_err().to_string();
        assert!(
            old.contains("or newer is needed") && old.contains("is go1.20.3"),
            "{old}"
        );
        let missing = missing.unwrap_err().to_string();
        assert!(missing.contains("`go` is not on PATH"), "{missing}");
    }

    #[test]
    fn the_kubernetes_commands_build_in_one_go_build_and_the_rest_one_each() {
        let groups: Vec<Vec<&str>> = invocations()
            .iter()
            .map(|group| group.iter().map(|binary| binary.name).collect())
            .collect();
        assert!(groups.contains(&vec![
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "kubectl",
            "kubelet",
            "kube-proxy",
        ]));
        assert!(groups.contains(&vec!["etcd-3.5"]), "{groups:?}");
        assert_eq!(groups.iter().map(Vec::len).sum::<usize>(), BINARIES.len());
    }

    #[test]
    fn says_how_long_a_build_took() {
        assert_eq!(elapsed(Duration::from_millis(45_900)), "45s");
        assert_eq!(elapsed(Duration::from_secs(192)), "3m12s");
        assert_eq!(elapsed(Duration::from_secs(3605)), "60m05s");
    }

    #[test]
    fn stamps_the_prometheus_release() {
        assert!(
            prometheus_ldflags("v0.316.0")
                .ends_with(" -X github.com/prometheus/common/version.Version=3.16.0")
        );
        assert!(prometheus_ldflags("v0.305.2").ends_with("Version=3.5.2"));
    }

    #[test]
    fn reads_the_pinned_prometheus_version() {
        let sources = crate::repo_root().join("hack/k8s-tools");
        let version = module_version(
            &sources.join("prometheus/go.mod"),
            "github.com/prometheus/prometheus",
        )
        .unwrap();
        assert!(version.starts_with("v0.3"), "{version}");
    }

    #[test]
    fn stamps_major_and_minor() {
        let flags = kubernetes_ldflags("v1.35.4");
        assert!(flags.contains("k8s.io/component-base/version.gitMinor=35"));
        assert!(flags.contains("k8s.io/client-go/pkg/version.gitVersion=v1.35.4"));
        let helm = helm_ldflags("v0.35.1");
        assert!(helm.contains("helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=35"));
        assert!(helm.contains("helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1"));
    }
}
