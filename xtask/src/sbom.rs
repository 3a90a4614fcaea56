//! The image's software bill of materials: a CycloneDX 1.5 document of every crate compiled into
//! the `app-operator` binary (normal dependencies, for the image's platform, from `cargo
//! metadata`), with its version, licence and package URL.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

/// The SBOM of `package` as built for `triple` in the workspace at `repo`.
pub fn cyclonedx(repo: &Path, package: &str, triple: &str) -> Result<Value> {
    let output = Command::new(env!("CARGO"))
        .current_dir(repo)
        .args([
            "metadata",
            "--locked",
            "--format-version",
            "1",
            "--filter-platform",
            triple,
        ])
        .output()
        .context("running cargo metadata")?;
    if !output.status.success() {
        bail!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let metadata: Value =
        serde_json::from_slice(&output.stdout).context("reading cargo metadata's output")?;
    from_metadata(&metadata, package)
}

/// The document, from `cargo metadata`'s JSON: the root package and what it links, reached
/// through normal (not dev, not build) dependencies.
fn from_metadata(metadata: &Value, package: &str) -> Result<Value> {
    let packages: BTreeMap<&str, &Value> = metadata["packages"]
        .as_array()
        .context("cargo metadata has no packages")?
        .iter()
        .filter_map(|p| Some((p["id"].as_str()?, p)))
        .collect();
    let nodes: BTreeMap<&str, &Value> = metadata["resolve"]["nodes"]
        .as_array()
        .context("cargo metadata has no resolve graph")?
        .iter()
        .filter_map(|n| Some((n["id"].as_str()?, n)))
        .collect();
    let root = packages
        .iter()
        .find(|(_, p)| p["name"] == package && p["source"].is_null())
        .map(|(id, _)| *id)
        .with_context(|| format!("no workspace package {package}"))?;

    let mut linked = BTreeMap::<&str, Vec<&str>>::new();
    let mut queue = VecDeque::from([root]);
    while let Some(id) = queue.pop_front() {
        if linked.contains_key(id) {
            continue;
        }
        let deps: Vec<&str> = nodes
            .get(id)
            .and_then(|n| n["deps"].as_array())
            .into_iter()
            .flatten()
            .filter(|dep| {
                dep["dep_kinds"]
                    .as_array()
                    .is_some_and(|kinds| kinds.iter().any(|k| k["kind"].is_null()))
            })
            .filter_map(|dep| dep["pkg"].as_str())
            .collect();
        queue.extend(deps.iter().copied());
        linked.insert(id, deps);
    }

    let component = |id: &str, kind: &str| -> Result<Value> {
        let p = packages
            .get(id)
            .with_context(|| format!("{id} is not a package"))?;
        let name = p["name"].as_str().unwrap_or_default();
        let version = p["version"].as_str().unwrap_or_default();
        let purl = format!("pkg:cargo/{name}@{version}");
        let mut component = json!({
            "type": kind,
            "bom-ref": purl,
            "name": name,
            "version": version,
            "purl": purl,
        });
        if let Some(license) = p["license"].as_str() {
            component["licenses"] = json!([{ "expression": license }]);
        }
        Ok(component)
    };
    let reference = |id: &str| component(id, "library").map(|c| c["bom-ref"].clone());
    let components = linked
        .keys()
        .filter(|id| **id != root)
        .map(|id| component(id, "library"))
        .collect::<Result<Vec<_>>>()?;
    let dependencies = linked
        .iter()
        .map(|(id, deps)| {
            let unique: BTreeSet<&str> = deps.iter().copied().collect();
            Ok(json!({
                "ref": reference(id)?,
                "dependsOn": unique.into_iter().map(reference).collect::<Result<Vec<_>>>()?,
            }))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(json!({
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "version": 1,
        "metadata": { "component": component(root, "application")? },
        "components": components,
        "dependencies": dependencies,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn package(name: &str, source: Option<&str>) -> Value {
        json!({
            "id": format!("{name}-id"), "name": name, "version": "1.0.0",
            "license": "MIT", "source": source,
        })
    }

    fn dep(name: &str, kind: Option<&str>) -> Value {
        json!({ "pkg": format!("{name}-id"), "dep_kinds": [{ "kind": kind }] })
    }

    /// What the binary links is in it; a test-only or build-only dependency, or a crate only
    /// those reach, is not.
    #[test]
    fn only_what_the_binary_links_is_listed() {
        let registry = Some("registry+https://github.com/rust-lang/crates.io-index");
        let metadata = json!({
            "packages": [
                package("app", None), package("serde", registry), package("insta", registry),
                package("cc", registry), package("only-insta", registry), package("itoa", registry),
            ],
            "resolve": { "nodes": [
                { "id": "app-id", "deps": [dep("serde", None), dep("insta", Some("dev")), dep("cc", Some("build"))] },
                { "id": "serde-id", "deps": [dep("itoa", None)] },
                { "id": "insta-id", "deps": [dep("only-insta", None)] },
                { "id": "itoa-id", "deps": [] },
            ] },
        });
        let bom = from_metadata(&metadata, "app").unwrap();
        let names: Vec<_> = bom["components"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["purl"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["pkg:cargo/itoa@1.0.0", "pkg:cargo/serde@1.0.0"]);
        assert_eq!(bom["metadata"]["component"]["name"], "app");
        assert_eq!(
            bom["components"][0]["licenses"][0]["expression"], "MIT",
            "{bom}"
        );
    }
}
