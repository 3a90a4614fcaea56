//! The operator as users get it: `make image`, `make load`, `make manifests`, `make install`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use anyhow::{Context, Result, bail};
use local_cluster::install::{Target, UserEnv};
use local_cluster::{Layout, Tools};

use crate::{image, path, repo, sbom, tool_sources};

/// The user's kubectl and cluster (`KUBECTL`, `KUBECONFIG`, `IMG`), as kubebuilder's targets.
pub(crate) fn user_target() -> Result<Target> {
    Ok(Target::resolve(
        &UserEnv::from_process(),
        &Layout::default(),
        || Tools::ensure(&tool_sources()),
    )?)
}

/// Says which cluster `target` acts on (and fails clearly when there is none).
pub(crate) fn acting_on_cluster(target: Target) -> Result<Target> {
    println!("acting on {}", target.describe()?);
    Ok(target)
}

/// Where deploy, undeploy and build-installer write their overlay of config/default.
pub(crate) fn overlay_dir() -> PathBuf {
    repo().join("target/deploy")
}

/// The image's platform.
const TRIPLE: &str = "x86_64-unknown-linux-gnu";

/// A fully static release binary (glibc with `crt-static`: the machine has no musl Rust target)
/// in its own target directory, so it can be built while another cargo holds the workspace's.
/// The image and the benchmark both use it.
pub(crate) fn build_static_binary() -> Result<PathBuf> {
    StaticBinaryBuild::start()?.finish()
}

/// [`build_static_binary`] under way: [`StaticBinaryBuild::finish`] waits for it; dropped
/// unfinished (a suite failed first), it stops cargo.
pub(crate) struct StaticBinaryBuild {
    cargo: Child,
}

impl StaticBinaryBuild {
    pub(crate) fn start() -> Result<StaticBinaryBuild> {
        let cargo = Command::new(env!("CARGO"))
            .args([
                "build",
                "--release",
                "--locked",
                "-p",
                "app-operator",
                "--target",
                TRIPLE,
            ])
            .env("CARGO_TARGET_DIR", static_target_dir())
            .env("RUSTFLAGS", "-C target-feature=+crt-static")
            .spawn()
            .context("running cargo build")?;
        Ok(StaticBinaryBuild { cargo })
    }

    pub(crate) fn finish(mut self) -> Result<PathBuf> {
        let built = self.cargo.wait()?;
        if !built.success() {
            bail!("building the static binary failed ({built})");
        }
        Ok(static_target_dir()
            .join(TRIPLE)
            .join("release/app-operator"))
    }
}

impl Drop for StaticBinaryBuild {
    fn drop(&mut self) {
        // Still running: a suite failed first. The rustc it runs finishes its crate alone.
        if matches!(self.cargo.try_wait(), Ok(None)) {
            let _ = self.cargo.kill();
            let _ = self.cargo.wait();
        }
    }
}

fn static_target_dir() -> PathBuf {
    repo().join("target/image")
}

/// `make image`: the archive at `output`, naming the image `reference` (`IMG`).
pub(crate) fn build_image(output: &Path, reference: &str) -> Result<()> {
    let binary = build_static_binary()?;
    let output = if output.is_relative() {
        repo().join(output)
    } else {
        output.to_owned()
    };
    let provenance = image::Provenance {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        revision: git(&["describe", "--always", "--dirty", "--abbrev=40"])?,
        source: git(&["remote", "get-url", "origin"])
            .ok()
            .filter(|url| url.contains("://") || url.starts_with("git@")),
        licenses: env!("CARGO_PKG_LICENSE").to_owned(),
        sbom: serde_json::to_vec_pretty(&sbom::cyclonedx(&repo(), "app-operator", TRIPLE)?)?,
    };
    image::write_archive(&binary, &provenance, &output, reference)?;
    println!(
        "wrote {} ({}, entrypoint /app-operator, user {}, revision {}, SBOM at /{})",
        output.display(),
        image::full_name(reference),
        image::USER,
        provenance.revision,
        image::SBOM_PATH
    );
    Ok(())
}

/// `git <args>` in the repository: its output, trimmed.
fn git(args: &[&str]) -> Result<String> {
    let output = Command::new("git")
        .current_dir(repo())
        .args(args)
        .output()
        .context("running git")?;
    if !output.status.success() {
        bail!(
            "git {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// `make load`: the archive's images into the local cluster's registry and onto its real node
/// (replacing what a tag named there before, as `kind load` does).
pub(crate) fn load(archive: &Path) -> Result<()> {
    let layout = Layout::default();
    let node = local_cluster::node::NodeLayout::of(&layout);
    if layout.running().is_empty() || !node.exists() {
        bail!(
            "no local cluster with a real node runs (state in {}): start one with `make cluster-up NODE=real` or `make run`",
            layout.state_dir.display()
        );
    }
    let archive = if archive.is_relative() {
        repo().join(archive)
    } else {
        archive.to_owned()
    };
    let registry = node.registry_address()?;
    let images = local_cluster::registry::push_archive(&archive, &registry)
        .with_context(|| format!("pushing {}", archive.display()))?;
    local_cluster::node::pull(&layout, &images).context("pulling onto the node")?;
    println!(
        "loaded {} into the local cluster's registry ({registry}) and onto its node: {}",
        archive.display(),
        images.join(", ")
    );
    Ok(())
}

pub(crate) fn manifests() -> Result<()> {
    for (file, content) in app_operator_manifests::generated_files(&repo())? {
        let path = repo().join(&file);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, content)?;
        println!("wrote {file}");
    }
    Ok(())
}

/// Applies the CRDs and waits until the API server serves them.
pub(crate) fn install(target: &Target) -> Result<()> {
    let crds = repo().join("config/crd");
    print!(
        "{}",
        target.run(&["apply", "--server-side", "-k", path(&crds)?])?
    );
    target.run(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "-f",
        path(&crds.join("bases"))?,
    ])?;
    Ok(())
}
