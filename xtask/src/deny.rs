//! `cargo xtask deny` (in `make lint`): `cargo deny --frozen check` over the workspace's dependencies —
//! advisories, licences, bans, sources — with `deny.toml`. cargo-deny is installed from crates.io
//! into the cache at a pinned version; its advisory database is the snapshot committed under
//! `hack/advisory-db` (this machine does not reach GitHub), laid out where cargo-deny looks for a
//! database it may not fetch.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result, bail};

/// The cargo-deny release `make lint` runs.
const VERSION: &str = "0.20.2";

/// The advisory database's URL as `deny.toml` names it: cargo-deny keeps a database under a
/// directory named after it (`<last path segment>-<xxhash64 of the URL>`).
const DB_URL: &str = "https://github.com/rustsec/advisory-db";
const DB_DIR: &str = "advisory-db-3157b0e258782691";

/// When the committed snapshot was taken (its commit's date), so that `maximum-db-staleness`
/// measures the snapshot's age, not the checkout's.
const SNAPSHOT_TAKEN: u64 = 1_787_293_720; // 2026-08-21T06:28:40Z, commit bf5c0d24

pub fn deny(repo: &Path) -> Result<()> {
    let binary = ensure_cargo_deny()?;
    advisory_db(repo)?;
    // cargo-deny reads every platform's dependencies (`cargo metadata`): fetch them from
    // crates.io first, so that `--frozen` (which keeps it from fetching the database) finds them.
    let fetched = Command::new(env!("CARGO"))
        .current_dir(repo)
        .args(["fetch", "--locked", "--quiet"])
        .status()
        .context("running cargo fetch")?;
    if !fetched.success() {
        bail!("cargo fetch --locked failed");
    }
    let status = Command::new(&binary)
        .current_dir(repo)
        // `deny.toml` is found in the current directory.
        .args(["deny", "--frozen", "check"])
        .status()
        .with_context(|| format!("running {}", binary.display()))?;
    if !status.success() {
        bail!("cargo deny check failed (see above)");
    }
    Ok(())
}

/// `cargo-deny` of [`VERSION`], installed into the cache the first time.
fn ensure_cargo_deny() -> Result<PathBuf> {
    let root = local_cluster::tools::cache_root().join(format!("cargo-deny-{VERSION}"));
    let binary = root.join("bin/cargo-deny");
    if binary.exists() {
        return Ok(binary);
    }
    eprintln!(
        "installing cargo-deny {VERSION} into {} (once)",
        root.display()
    );
    let status = Command::new(env!("CARGO"))
        .args([
            "install",
            "cargo-deny",
            "--locked",
            "--version",
            VERSION,
            "--root",
        ])
        .arg(&root)
        // Its release profile links in one fat-LTO unit, three minutes on 2 cores on a fresh
        // machine; a linter run once a lint needs no such optimization.
        .env("CARGO_PROFILE_RELEASE_LTO", "off")
        .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "16")
        .status()
        .context("running cargo install")?;
    if !status.success() || !binary.exists() {
        bail!("cargo install cargo-deny {VERSION} failed");
    }
    Ok(binary)
}

/// A database directory under `target/advisory-dbs` (`deny.toml`'s `db-path`), as cargo-deny reads one: `crates/` from the snapshot,
/// and a `.git/FETCH_HEAD` whose time is the snapshot's (cargo-deny's measure of freshness).
fn advisory_db(repo: &Path) -> Result<()> {
    let snapshot = repo.join("hack/advisory-db/crates");
    let root = repo.join("target/advisory-dbs");
    let db = root.join(DB_DIR);
    if db.exists() {
        fs::remove_dir_all(&db).with_context(|| format!("removing {}", db.display()))?;
    }
    local_cluster::copy_dir(&snapshot, &db.join("crates"))?;
    let git = db.join(".git");
    fs::create_dir_all(&git)?;
    let fetch_head = git.join("FETCH_HEAD");
    fs::write(&fetch_head, format!("snapshot of {DB_URL}\n"))?;
    let taken = SystemTime::UNIX_EPOCH + Duration::from_secs(SNAPSHOT_TAKEN);
    fs::File::options()
        .write(true)
        .open(&fetch_head)?
        .set_modified(taken)
        .with_context(|| format!("dating {}", fetch_head.display()))
}
