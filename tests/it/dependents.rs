//! A project outside this workspace that depends on the library by path (the README's install
//! line) builds the vendored, patched redb (vendor/redb/PATCHED.md: a read past the end of the
//! file is refused before its buffer is allocated), not crates.io's: the library names it as a
//! path dependency, which Cargo follows in every dependent, where a `[patch.crates-io]` applies
//! only in the workspace that declares it.

use std::process::Command;

use serde_json::Value;

#[test]
fn a_project_depending_on_the_library_by_path_builds_the_patched_redb() {
    let root = crate::support::repo_root().canonicalize().expect("repository root");
    let dir = tempfile::tempdir().expect("tempdir");
    let project = dir.path().join("dependent");
    std::fs::create_dir_all(project.join("src")).expect("mkdir");
    // Its own workspace (`[workspace]`), as a separate project has; the library by path and
    // default features, as `cargo add manifestdb --path ...` writes it.
    let manifest = format!(
        "[package]\nname = \"dependent\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n[workspace]\n\n\
         [dependencies]\nmanifestdb = {{ path = {:?} }}\n",
        root.display().to_string()
    );
    std::fs::write(project.join("Cargo.toml"), manifest).expect("write Cargo.toml");
    std::fs::write(project.join("src/main.rs"), "fn main() {}\n").expect("write main.rs");
    // The workspace's lock file, so the resolution needs no registry (offline) and picks the
    // versions this workspace built.
    std::fs::copy(root.join("Cargo.lock"), project.join("Cargo.lock")).expect("copy Cargo.lock");

    let output = Command::new(env!("CARGO"))
        .current_dir(&project)
        .args(["metadata", "--format-version", "1", "--offline"])
        .output()
        .expect("run cargo metadata");
    assert!(output.status.success(), "cargo metadata failed: {}", String::from_utf8_lossy(&output.stderr));
    let metadata: Value = serde_json::from_slice(&output.stdout).expect("cargo metadata prints JSON");
    let redbs: Vec<&Value> = metadata["packages"].as_array().expect("packages").iter().filter(|p| p["name"] == "redb").collect();
    assert_eq!(redbs.len(), 1, "one redb in the dependent's graph: {redbs:#?}");
    let redb = redbs[0];
    assert!(redb["source"].is_null(), "redb comes from {} (crates.io's is unpatched), not vendor/redb", redb["source"]);
    let expected = root.join("vendor/redb/Cargo.toml");
    assert_eq!(redb["manifest_path"].as_str(), Some(expected.to_str().expect("UTF-8 path")), "the dependent's redb");
}
