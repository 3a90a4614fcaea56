//! `make release`: what a release ships, for the workspace's version: the image archive, the
//! installer (`install.yaml`) and the packaged chart, with their checksums. One version names them
//! all: the crate's, the chart's `version` and `appVersion`, the image tag and the CHANGELOG's
//! section; a release is refused while they disagree.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use local_cluster::install;
use sha2::{Digest, Sha256};

use crate::deliver::{build_image, overlay_dir, user_target};
use crate::{path, repo};

/// The version of the workspace (every crate, the image, the chart).
pub(crate) const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Where the version is written besides the crates and says something else (empty: all agree).
pub(crate) fn version_mismatches(version: &str, chart_yaml: &str, changelog: &str) -> Vec<String> {
    let mut mismatches = Vec::new();
    for key in ["version", "appVersion"] {
        let found = chart_yaml.lines().find_map(|line| {
            line.strip_prefix(&format!("{key}:"))
                .map(|value| value.trim().trim_matches('"').to_owned())
        });
        if found.as_deref() != Some(version) {
            mismatches.push(format!(
                "charts/app-operator/Chart.yaml: {key} is {}, not {version}",
                found.as_deref().unwrap_or("missing")
            ));
        }
    }
    let heading = format!("## [{version}]");
    if !changelog.lines().any(|line| line.starts_with(&heading)) {
        mismatches.push(format!("CHANGELOG.md has no `{heading}` section"));
    }
    mismatches
}

/// `reference` without its tag or digest: `registry:5000/team/app-operator:v1` →
/// `registry:5000/team/app-operator` (a `:` before the last `/` is a registry's port).
pub(crate) fn repository(reference: &str) -> &str {
    let reference = reference
        .split_once('@')
        .map_or(reference, |(name, _)| name);
    let last_slash = reference.rfind('/').map_or(0, |i| i + 1);
    match reference.rfind(':').filter(|&colon| colon > last_slash) {
        Some(colon) => reference.get(..colon).unwrap_or(reference),
        None => reference,
    }
}

/// Writes the release into `dist`: `app-operator-<version>-image.tar` (the image `<repository of
/// IMG>:<version>`) and its SBOM, `install.yaml` with that image, `app-operator-<version>.tgz` (the chart, its
/// default image that one) and `SHA256SUMS`.
pub(crate) fn release(dist: &Path) -> Result<()> {
    let read = |file: &str| {
        std::fs::read_to_string(repo().join(file)).with_context(|| format!("reading {file}"))
    };
    let mismatches = version_mismatches(
        VERSION,
        &read("charts/app-operator/Chart.yaml")?,
        &read("CHANGELOG.md")?,
    );
    if !mismatches.is_empty() {
        bail!(
            "the version is {VERSION} (Cargo.toml) but:\n  {}",
            mismatches.join("\n  ")
        );
    }
    let img = install::UserEnv::from_process()
        .img
        .unwrap_or_else(|| install::DEFAULT_IMG.to_owned());
    let repository = repository(&img);
    let image = format!("{repository}:{VERSION}");
    std::fs::create_dir_all(dist)?;

    let archive = dist.join(format!("app-operator-{VERSION}-image.tar"));
    build_image(&archive, &image)?;

    let mut target = user_target()?;
    target.img = image.clone();
    let installer = dist.join("install.yaml");
    std::fs::write(
        &installer,
        install::installer(&target, &repo(), &overlay_dir())?,
    )?;

    let chart = package_chart(dist, repository)?;
    let mut sums = String::new();
    // The image's SBOM, which `make image` writes beside the archive.
    let sbom = PathBuf::from(format!("{}.cdx.json", archive.display()));
    for file in [&archive, &sbom, &installer, &chart] {
        let digest = Sha256::digest(std::fs::read(file)?);
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default();
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        writeln!(sums, "{hex}  {name}")?;
    }
    std::fs::write(dist.join("SHA256SUMS"), sums)?;
    println!(
        "release {VERSION} in {}: {} (image {image}), install.yaml, {}, SHA256SUMS",
        dist.display(),
        archive
            .file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default(),
        chart
            .file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default(),
    );
    Ok(())
}

/// A fresh copy of `charts/app-operator` at `to` (anything there before is removed), for a
/// release or a test to change without touching the committed chart.
pub(crate) fn copy_chart(to: &Path) -> Result<()> {
    if to.exists() {
        std::fs::remove_dir_all(to)?;
    }
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let copied = Command::new("cp")
        .arg("-r")
        .arg(repo().join("charts/app-operator"))
        .arg(to)
        .status()?;
    if !copied.success() {
        bail!("copying the chart to {} failed", to.display());
    }
    Ok(())
}

/// `helm package` of a copy of the chart whose default image repository is `repository` (the
/// tag is the chart's appVersion already); returns the `.tgz`.
fn package_chart(dist: &Path, repository: &str) -> Result<PathBuf> {
    let copy = repo().join("target/release-chart/app-operator");
    copy_chart(&copy)?;
    let values_path = copy.join("values.yaml");
    let values = std::fs::read_to_string(&values_path)?;
    const DEFAULT: &str = "\n  repository: app-operator\n";
    if !values.contains(DEFAULT) {
        bail!(
            "charts/app-operator/values.yaml has no `{}` line",
            DEFAULT.trim()
        );
    }
    std::fs::write(
        &values_path,
        values.replacen(DEFAULT, &format!("\n  repository: {repository}\n"), 1),
    )?;
    let tools = local_cluster::Tools::ensure(&crate::tool_sources())?;
    let packaged = Command::new(tools.bin("helm"))
        .args(["package", path(&copy)?, "--destination", path(dist)?])
        .status()?;
    if !packaged.success() {
        bail!("helm package failed");
    }
    Ok(dist.join(format!("app-operator-{VERSION}.tgz")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reference_loses_its_tag_or_digest_but_not_its_registry_port() {
        assert_eq!(repository("app-operator:latest"), "app-operator");
        assert_eq!(repository("app-operator"), "app-operator");
        assert_eq!(
            repository("registry:5000/team/app-operator:v1"),
            "registry:5000/team/app-operator"
        );
        assert_eq!(
            repository("registry:5000/app-operator@sha256:abc"),
            "registry:5000/app-operator"
        );
    }

    #[test]
    fn a_release_needs_the_chart_and_changelog_at_the_crates_version() {
        let chart = "name: app-operator\nversion: 0.2.0\nappVersion: \"0.2.0\"\n";
        let changelog = "# Changelog\n\n## [0.2.0] - 2026-11-28\n";
        assert!(version_mismatches("0.2.0", chart, changelog).is_empty());
        assert_eq!(
            version_mismatches("0.3.0", chart, changelog),
            [
                "charts/app-operator/Chart.yaml: version is 0.2.0, not 0.3.0",
                "charts/app-operator/Chart.yaml: appVersion is 0.2.0, not 0.3.0",
                "CHANGELOG.md has no `## [0.3.0]` section",
            ]
        );
    }

    /// The committed chart and CHANGELOG are at the workspace's version: bumping one alone fails.
    #[test]
    fn the_repository_is_at_one_version() {
        let read = |file: &str| std::fs::read_to_string(repo().join(file)).unwrap_or_default();
        assert_eq!(
            version_mismatches(
                VERSION,
                &read("charts/app-operator/Chart.yaml"),
                &read("CHANGELOG.md")
            ),
            Vec::<String>::new()
        );
    }
}
