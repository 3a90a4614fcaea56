//! `make install/uninstall/deploy/undeploy/build-installer`, as kubebuilder's Makefile has them:
//! the user's `kubectl` (`KUBECTL`) on the user's cluster (`KUBECONFIG`, else
//! `~/.kube/config`), with the image `IMG`. The local control plane is used only when nothing is
//! configured, and the pinned kubectl only when there is no `kubectl` on PATH, so a user with a
//! cluster builds nothing.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::Error;
use crate::{Layout, Tools};

/// The image `make deploy` sets when `IMG` is not given.
pub const DEFAULT_IMG: &str = "app-operator:latest";

/// What the user's environment says: the variables kubebuilder's Makefile reads.
#[derive(Debug, Clone, Default)]
pub struct UserEnv {
    /// `KUBECONFIG`, which may list several files (kubectl merges them).
    pub kubeconfig: Option<OsString>,
    /// `KUBECTL`: a command name or path.
    pub kubectl: Option<OsString>,
    /// `IMG`: the operator's image reference.
    pub img: Option<String>,
    pub home: Option<PathBuf>,
}

impl UserEnv {
    pub fn from_process() -> UserEnv {
        let non_empty = |name| std::env::var_os(name).filter(|v| !v.is_empty());
        UserEnv {
            kubeconfig: non_empty("KUBECONFIG"),
            kubectl: non_empty("KUBECTL"),
            img: non_empty("IMG").and_then(|v| v.into_string().ok()),
            home: non_empty("HOME").map(PathBuf::from),
        }
    }
}

/// The kubectl and cluster the targets act on.
#[derive(Debug, Clone)]
pub struct Target {
    pub kubectl: PathBuf,
    /// The kubeconfig to use; `None` leaves kubectl to its own rules (`KUBECONFIG`,
    /// `~/.kube/config`).
    pub kubeconfig: Option<OsString>,
    /// The image `deploy` and `build-installer` set.
    pub img: String,
}

impl Target {
    /// Resolves the target from `env`. `tools` is called only when no kubectl is found: it
    /// builds (or finds) the pinned one.
    pub fn resolve(
        env: &UserEnv,
        local: &Layout,
        tools: impl FnOnce() -> Result<Tools, Error>,
    ) -> Result<Target, Error> {
        let home_config = env.home.as_ref().map(|h| h.join(".kube/config"));
        let kubeconfig = match (&env.kubeconfig, home_config) {
            (Some(kubeconfig), _) => Some(kubeconfig.clone()),
            (None, Some(config)) if config.exists() => None,
            (None, _) if !local.running().is_empty() => Some(local.kubeconfig().into_os_string()),
            // Nothing configured: `describe` says so before any target acts on a cluster.
            (None, _) => None,
        };
        // The Makefile's default (`KUBECTL ?= kubectl`) falls back to the pinned one like an unset one.
        let kubectl = match env.kubectl.as_ref().filter(|k| k.as_os_str() != "kubectl") {
            Some(kubectl) => on_path(kubectl).ok_or_else(|| {
                Error::Invalid(format!(
                    "KUBECTL={} is not an executable file or a command on PATH",
                    kubectl.to_string_lossy()
                ))
            })?,
            None => match on_path("kubectl".as_ref()) {
                Some(kubectl) => kubectl,
                None => {
                    eprintln!("no kubectl on PATH: using the pinned one (built once)");
                    tools()?.bin("kubectl")
                }
            },
        };
        let img = env.img.clone().unwrap_or_else(|| DEFAULT_IMG.to_owned());
        Ok(Target {
            kubectl,
            kubeconfig,
            img,
        })
    }

    /// `kubectl` with the target's kubeconfig.
    pub fn kubectl(&self) -> Command {
        let mut command = Command::new(&self.kubectl);
        if let Some(kubeconfig) = &self.kubeconfig {
            command.env("KUBECONFIG", kubeconfig);
        }
        command
    }

    /// "context <name> (server <url>)", for saying where a target acts before it does.
    pub fn describe(&self) -> Result<String, Error> {
        let output = self
            .kubectl()
            .args([
                "config",
                "view",
                "--minify",
                "-o",
                "jsonpath={.contexts[0].name} {.clusters[0].cluster.server}",
            ])
            .output()
            .map_err(|source| Error::Spawn {
                command: "kubectl config view".into(),
                source,
            })?;
        let text = String::from_utf8_lossy(&output.stdout);
        match text.split_once(' ') {
            Some((context, server)) if output.status.success() => {
                Ok(format!("context {context} (server {server})"))
            }
            _ => Err(Error::Invalid(format!(
                "kubectl has no cluster to act on ({}): set KUBECONFIG (or create ~/.kube/config), or start the local control plane with `make cluster-up`",
                String::from_utf8_lossy(&output.stderr).trim()
            ))),
        }
    }

    /// Runs kubectl with `args`, failing with its output when it fails.
    pub fn run(&self, args: &[&str]) -> Result<String, Error> {
        let output = self
            .kubectl()
            .args(args)
            .output()
            .map_err(|source| Error::Spawn {
                command: format!("kubectl {}", args.join(" ")),
                source,
            })?;
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        if output.status.success() {
            return Ok(stdout);
        }
        Err(Error::Command {
            command: format!("kubectl {}", args.join(" ")),
            status: output.status,
            output: format!("{stdout}{}", String::from_utf8_lossy(&output.stderr)),
        })
    }
}

/// A command name looked up on PATH, or a path to an executable file.
fn on_path(command: &std::ffi::OsStr) -> Option<PathBuf> {
    let candidate = Path::new(command);
    if candidate.components().count() > 1 {
        return candidate.is_file().then(|| candidate.to_owned());
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(command))
        .find(|path| path.is_file())
}

/// An image reference split as kustomize's `images:` takes it: name, and tag or digest.
fn image_fields(img: &str) -> String {
    if let Some((name, digest)) = img.split_once('@') {
        return format!("  newName: {name}\n  digest: {digest}\n");
    }
    // A ':' after the last '/' starts the tag; one before it is a registry's port.
    let last_slash = img.rfind('/').map_or(0, |i| i + 1);
    match img.rfind(':').filter(|&colon| colon > last_slash) {
        Some(colon) => format!(
            "  newName: {}\n  newTag: {}\n",
            img.get(..colon).unwrap_or(img),
            img.get(colon + 1..).unwrap_or_default()
        ),
        None => format!("  newName: {img}\n  newTag: latest\n"),
    }
}

/// Writes a kustomization in `dir` that is `config/default` of `repo` with the image `img`, and
/// returns `dir`. The committed kustomizations are not edited (kubebuilder's `kustomize edit set
/// image` leaves them changed in git).
fn deploy_overlay(repo: &Path, img: &str, dir: &Path) -> Result<PathBuf, Error> {
    std::fs::create_dir_all(dir).map_err(Error::io("creating", dir))?;
    let canonical = |path: &Path| path.canonicalize().map_err(Error::io("resolving", path));
    // kustomize takes no absolute resource roots.
    let base = relative(&canonical(dir)?, &canonical(&repo.join("config/default"))?);
    let file = dir.join("kustomization.yaml");
    let text = format!(
        "# Written by `make deploy` / `make build-installer`: config/default with IMG={img}.\n\
         resources:\n- {}\nimages:\n- name: app-operator\n{}",
        base.display(),
        image_fields(img)
    );
    std::fs::write(&file, text).map_err(Error::io("writing", &file))?;
    Ok(dir.to_owned())
}

/// `to` as a path relative to the directory `from` (both absolute).
fn relative(from: &Path, to: &Path) -> PathBuf {
    let (from, to): (Vec<_>, Vec<_>) = (from.components().collect(), to.components().collect());
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let up = from.len().saturating_sub(common);
    std::iter::repeat_n(std::path::Component::ParentDir, up)
        .chain(to.into_iter().skip(common))
        .collect()
}

/// `make deploy`: config/default with the target's image, applied server-side (`work_dir` holds
/// the overlay). Returns kubectl's output.
pub fn deploy(target: &Target, repo: &Path, work_dir: &Path) -> Result<String, Error> {
    let overlay = deploy_overlay(repo, &target.img, work_dir)?;
    target.run(&["apply", "--server-side", "-k", &overlay.to_string_lossy()])
}

/// `make undeploy`: deletes what [`deploy`] applied.
pub fn undeploy(target: &Target, repo: &Path, work_dir: &Path) -> Result<String, Error> {
    let overlay = deploy_overlay(repo, &target.img, work_dir)?;
    target.run(&[
        "delete",
        "--ignore-not-found",
        "-k",
        &overlay.to_string_lossy(),
    ])
}

/// `make build-installer`: what [`deploy`] applies, as one YAML stream.
pub fn installer(target: &Target, repo: &Path, work_dir: &Path) -> Result<String, Error> {
    let overlay = deploy_overlay(repo, &target.img, work_dir)?;
    target.run(&["kustomize", &overlay.to_string_lossy()])
}

#[cfg(test)]
mod tests {
    use super::image_fields;

    #[test]
    fn a_path_is_made_relative_to_a_directory() {
        use std::path::Path;
        assert_eq!(
            super::relative(
                Path::new("/repo/target/deploy"),
                Path::new("/repo/config/default")
            ),
            Path::new("../../config/default")
        );
    }

    #[test]
    fn an_image_reference_splits_into_name_and_tag_or_digest() {
        assert_eq!(
            image_fields("registry:5000/team/app-operator:v1.2"),
            "  newName: registry:5000/team/app-operator\n  newTag: v1.2\n"
        );
        assert_eq!(
            image_fields("registry:5000/app-operator"),
            "  newName: registry:5000/app-operator\n  newTag: latest\n"
        );
        assert_eq!(
            image_fields("app-operator@sha256:abc"),
            "  newName: app-operator\n  digest: sha256:abc\n"
        );
    }
}
