//! The fuzz workspace (`fuzz/`, outside the default build) keeps its own `Cargo.lock`, which
//! `scripts/fuzz.sh` builds with `--locked`: when a crate of this workspace gains or loses a
//! dependency and that lock is not refreshed, the script stops before fuzzing anything. Each
//! crate of this workspace that lock holds must list the dependencies its manifest declares.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

type Deps = BTreeMap<String, BTreeSet<String>>;

/// Each path crate of the `Cargo.lock` at `lock` with the names of its dependencies.
fn locked_path_crates(lock: &Path) -> Deps {
    let text = std::fs::read_to_string(lock).unwrap_or_else(|e| panic!("{}: {e}", lock.display()));
    let doc: toml::Table =
        toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", lock.display()));
    let packages = doc["package"]
        .as_array()
        .expect("a lock's [[package]] list");
    packages
        .iter()
        .filter(|p| p.get("source").is_none())
        .map(|p| {
            let deps = p.get("dependencies").and_then(|d| d.as_array());
            // An entry is "name" or, where the lock holds two versions, "name version".
            let names = deps.into_iter().flatten().filter_map(|d| {
                d.as_str()
                    .and_then(|s| s.split(' ').next())
                    .map(String::from)
            });
            (
                p["name"].as_str().expect("a name").to_string(),
                names.collect(),
            )
        })
        .collect()
}

/// Each member of this workspace with the names of its normal and build dependencies (what
/// a lock lists for a crate used as a dependency), from `cargo metadata`.
fn workspace_crates(root: &Path) -> Deps {
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--offline",
            "--no-deps",
            "--format-version",
            "1",
        ])
        .current_dir(root)
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata JSON");
    let packages = meta["packages"].as_array().expect("metadata's packages");
    packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .expect("a package's dependencies");
            let names = deps
                .iter()
                .filter(|d| d["kind"].as_str() != Some("dev"))
                .map(|d| d["name"].as_str().expect("a dependency's name").to_string());
            (
                p["name"].as_str().expect("a name").to_string(),
                names.collect(),
            )
        })
        .collect()
}

#[test]
fn fuzz_lock_lists_what_each_workspace_crate_depends_on() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let members = workspace_crates(&root);
    let locked = locked_path_crates(&root.join("fuzz/Cargo.lock"));
    assert!(
        locked.contains_key("lse-runtime"),
        "fuzz/Cargo.lock should hold lse-runtime, the crate its targets fuzz"
    );
    for (name, deps) in locked.iter().filter(|(n, _)| members.contains_key(*n)) {
        assert_eq!(
            deps, &members[name],
            "fuzz/Cargo.lock is stale for {name} (refresh it: cd fuzz && cargo update --workspace)"
        );
    }
}
