//! The images can build what the lock file pins: the Rust toolchain of both Dockerfiles (and
//! the workspace's `rust-version`) is at least the highest `rust-version` of the locked crates,
//! read from their sources in the cargo registry; and the CUDA image uses the CUDA release
//! `scripts/build-cuda.sh` builds with.

use std::path::{Path, PathBuf};

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// `1.89` or `1.88.0` as comparable numbers (missing parts are 0).
fn version(s: &str) -> Vec<u64> {
    let mut v: Vec<u64> = s
        .trim()
        .split('.')
        .map(|p| {
            p.parse()
                .unwrap_or_else(|_| panic!("`{s}` is not a version"))
        })
        .collect();
    v.resize(3, 0);
    v
}

/// `(name, version)` of every package the lock file takes from crates.io.
fn locked_registry_packages() -> Vec<(String, String)> {
    let lock = read(&repo("Cargo.lock"));
    let mut out = Vec::new();
    for block in lock.split("[[package]]").skip(1) {
        let field = |key: &str| {
            block.lines().find_map(|l| {
                l.strip_prefix(key)
                    .and_then(|r| r.trim().strip_prefix('='))
                    .map(|r| r.trim().trim_matches('"').to_string())
            })
        };
        let (Some(name), Some(ver), Some(source)) =
            (field("name"), field("version"), field("source"))
        else {
            continue;
        };
        if source.starts_with("registry+") {
            out.push((name, ver));
        }
    }
    out
}

/// The folders cargo unpacks registry crates into.
fn registry_dirs() -> Vec<PathBuf> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")))
        .expect("CARGO_HOME or HOME");
    let src = home.join("registry").join("src");
    std::fs::read_dir(&src)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default()
}

/// `rust-version` of a crate's (normalised, as published) manifest, if it declares one.
fn declared_rust_version(manifest: &str) -> Option<String> {
    let mut in_package = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package {
            if let Some(v) = line.strip_prefix("rust-version") {
                return v
                    .trim()
                    .strip_prefix('=')
                    .map(|v| v.trim().trim_matches('"').to_string());
            }
        }
    }
    None
}

/// The highest `rust-version` among the locked crates, and the crate declaring it.
fn highest_locked_rust_version() -> (Vec<u64>, String) {
    let packages = locked_registry_packages();
    let dirs = registry_dirs();
    let mut found = 0;
    let mut best: Option<(Vec<u64>, String)> = None;
    for (name, ver) in &packages {
        let Some(manifest) = dirs
            .iter()
            .map(|d| d.join(format!("{name}-{ver}")).join("Cargo.toml"))
            .find(|p| p.is_file())
        else {
            continue;
        };
        found += 1;
        if let Some(rv) = declared_rust_version(&read(&manifest)) {
            let v = version(&rv);
            if best.as_ref().is_none_or(|(b, _)| v > *b) {
                best = Some((v, format!("{name} {ver} (rust-version {rv})")));
            }
        }
    }
    // Platform-specific crates a build never fetches may be missing; most must be there, or the
    // answer would rest on a few crates.
    assert!(
        found * 4 >= packages.len() * 3,
        "only {found} of the {} locked crates' sources are in the cargo registry ({dirs:?}); \
         run `cargo fetch --locked` first",
        packages.len()
    );
    best.expect("no locked crate declares a rust-version")
}

/// The default of `ARG <name>=...` in a Dockerfile.
fn arg_default(dockerfile: &str, name: &str) -> String {
    read(&repo(dockerfile))
        .lines()
        .find_map(|l| l.trim().strip_prefix(&format!("ARG {name}=")))
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|| panic!("{dockerfile} has no `ARG {name}=<default>`"))
}

#[test]
fn dockerfiles_and_workspace_pin_at_least_the_rust_the_locked_crates_need() {
    let (needed, by) = highest_locked_rust_version();
    for file in ["Dockerfile", "Dockerfile.cuda"] {
        let pinned = arg_default(file, "RUST_VERSION");
        assert!(
            version(&pinned) >= needed,
            "{file} builds with Rust {pinned}, but {by} needs a newer one: raise ARG RUST_VERSION"
        );
    }
    let manifest = read(&repo("Cargo.toml"));
    let workspace = declared_rust_version(&manifest.replace("[workspace.package]", "[package]"))
        .expect("Cargo.toml's [workspace.package] sets rust-version");
    assert!(
        version(&workspace) >= needed,
        "the workspace claims rust-version {workspace}, but {by} needs a newer one"
    );
}

#[test]
fn the_cuda_image_uses_the_cuda_release_the_build_script_uses() {
    let image = arg_default("Dockerfile.cuda", "CUDA_VERSION");
    let script = read(&repo("scripts/build-cuda.sh"));
    let built = script
        .lines()
        .find_map(|l| l.trim().strip_prefix("cuda_version="))
        .map(|v| v.split_whitespace().next().unwrap_or("").to_string())
        .expect("scripts/build-cuda.sh sets cuda_version=<major.minor>");
    let major_minor = |v: &str| version(v)[..2].to_vec();
    assert_eq!(
        major_minor(&image),
        major_minor(&built),
        "Dockerfile.cuda builds on CUDA {image}, scripts/build-cuda.sh on CUDA {built}: use one release"
    );
}
