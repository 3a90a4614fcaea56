//! The committed generated files are exactly what the Rust types generate (`make manifests`
//! regenerates them).

// Test code: a failed expectation is a failed test.
#![allow(clippy::unwrap_used, clippy::panic)]

#[test]
fn every_generated_file_is_current() {
    let repo = std::path::PathBuf::from(format!("{}/../..", env!("CARGO_MANIFEST_DIR")));
    for (file, generated) in app_operator_manifests::generated_files(&repo).unwrap() {
        let committed = std::fs::read_to_string(repo.join(&file)).unwrap_or_default();
        assert!(
            committed == generated,
            "{file} is stale: run `make manifests`"
        );
    }
}
