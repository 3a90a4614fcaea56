//! `make run`/`make test` first run hack/preflight.sh: a missing or old Rust, or no C toolchain,
//! is named in one line each, before cargo builds anything.

// Test code: a failed expectation is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A PATH directory with the shell utilities the script uses and the given fake commands.
fn bin_dir(name: &str, fakes: &[(&str, &str)]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("preflight-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    for utility in ["dirname", "sed", "sort", "head", "cut"] {
        let found = ["/usr/bin", "/bin"]
            .iter()
            .map(|d| Path::new(d).join(utility))
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("no {utility}"));
        symlink(found, dir.join(utility)).unwrap();
    }
    for (command, output) in fakes {
        let path = dir.join(command);
        fs::write(&path, format!("#!/bin/sh\necho '{output}'\n")).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir
}

/// Runs the script with PATH = `dir` only: (exit code, stderr).
fn preflight(dir: &Path) -> (i32, String) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../hack/preflight.sh");
    let output = Command::new("/bin/sh")
        .arg(script)
        .env_clear()
        .env("PATH", dir)
        .output()
        .unwrap();
    fs::remove_dir_all(dir).unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn no_rust_and_no_c_compiler_are_each_named_once() {
    let (code, said) = preflight(&bin_dir("bare", &[]));
    assert_eq!(code, 1);
    let errors: Vec<&str> = said.lines().collect();
    assert_eq!(errors.len(), 2, "{said}");
    assert!(errors[0].contains("cargo/rustc are not on PATH") && errors[0].contains("rustup.rs"));
    assert!(errors[1].contains("a C toolchain is needed") && errors[1].contains("build-essential"));
}

#[test]
fn an_old_rust_is_named_with_the_version_needed() {
    let cargo_toml =
        fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../Cargo.toml")).unwrap();
    let needed = cargo_toml
        .lines()
        .find_map(|line| line.strip_prefix("rust-version = "))
        .unwrap()
        .trim_matches('"')
        .to_owned();
    let dir = bin_dir(
        "old",
        &[
            ("cargo", "cargo 1.70.0"),
            ("rustc", "rustc 1.70.0 (90c541806 2023-05-31)"),
            ("cc", "cc"),
        ],
    );
    let (code, said) = preflight(&dir);
    assert_eq!(code, 1);
    assert_eq!(
        said.trim(),
        format!(
            "error: Rust {needed} or newer is needed and rustc is 1.70.0: run 'rustup update' (or install a newer toolchain)"
        )
    );
}

#[test]
fn a_new_enough_rust_and_a_c_compiler_pass_silently() {
    let dir = bin_dir(
        "ok",
        &[
            ("cargo", "cargo 1.95.0"),
            ("rustc", "rustc 1.95.0 (59807616e 2026-01-01)"),
            ("cc", "cc"),
        ],
    );
    assert_eq!(preflight(&dir), (0, String::new()));
}
