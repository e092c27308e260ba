//! The Dockerfiles build the one `caprl` binary from workspace paths that exist, run it
//! as a non-root user, and pass hadolint (installed by `.ci/run`; a developer's machine
//! without it skips that check, CI fails it).

#[path = "../common/tests/support/ci.rs"]
mod ci;

use std::path::{Path, PathBuf};
use std::process::Command;

const DOCKERFILES: [&str; 2] = ["Dockerfile", "Dockerfile.cuda"];

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
}

/// Instructions with line continuations joined.
fn instructions(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let line = line.trim();
        if current.is_empty() && (line.is_empty() || line.starts_with('#')) {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(part) => current.push_str(part),
            None => {
                current.push_str(line);
                out.push(std::mem::take(&mut current));
            }
        }
    }
    out
}

/// Workspace members plus the root package's own directories.
fn workspace_paths() -> Vec<String> {
    let manifest = read("Cargo.toml");
    let members = manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("members = "))
        .expect("workspace members line");
    let mut paths: Vec<String> = members
        .trim_matches(|c| c == '[' || c == ']')
        .split(',')
        .map(|m| m.trim().trim_matches('"').to_string())
        .filter(|m| !m.is_empty())
        .collect();
    paths.extend(["src", "benches", "Cargo.toml", "Cargo.lock"].map(String::from));
    paths
}

#[test]
fn dockerfiles_copy_every_workspace_path_that_exists_and_build_the_caprl_binary() {
    let needed = workspace_paths();
    for file in DOCKERFILES {
        let steps = instructions(&read(file));
        let mut copied = Vec::new();
        for step in &steps {
            let Some(rest) = step.strip_prefix("COPY ") else {
                continue;
            };
            if rest.contains("--from=") {
                continue;
            }
            let parts: Vec<&str> = rest.split_whitespace().collect();
            for src in &parts[..parts.len() - 1] {
                assert!(repo(src).exists(), "{file}: COPY {src}: no such path");
                copied.push(src.to_string());
            }
        }
        for path in &needed {
            // A member inside a copied directory (common/score in common) comes with it.
            let covered = copied
                .iter()
                .any(|c| c == path || path.starts_with(&format!("{c}/")));
            assert!(covered, "{file} does not COPY {path}");
        }
        let build = steps
            .iter()
            .find(|s| s.contains("cargo build"))
            .unwrap_or_else(|| panic!("{file}: no cargo build step"));
        assert!(
            build.contains("--release") && build.contains("--locked"),
            "{file}: {build}"
        );
        assert!(
            build.contains("--bin caprl"),
            "{file}: builds something else: {build}"
        );
        if file.ends_with(".cuda") {
            assert!(build.contains("--features cuda"), "{file}: no CUDA feature");
        }
        let runtime = steps
            .iter()
            .rposition(|s| s.starts_with("FROM "))
            .expect("FROM");
        let last_stage = &steps[runtime..];
        let user = last_stage
            .iter()
            .find_map(|s| s.strip_prefix("USER "))
            .unwrap_or_else(|| panic!("{file}: runtime stage sets no USER"));
        let uid: u32 = user
            .split(':')
            .next()
            .unwrap_or("")
            .parse()
            .expect("numeric uid");
        assert!(
            uid >= 1000,
            "{file}: runtime user {uid} should be unprivileged"
        );
        assert!(
            last_stage
                .iter()
                .any(|s| s.starts_with("ENTRYPOINT") && s.contains("caprl")),
            "{file}: entrypoint is not caprl"
        );
        assert!(
            last_stage.iter().all(|s| !s.contains("cargo ")),
            "{file}: runtime stage must not carry the toolchain"
        );
    }
}

#[test]
fn dockerignore_keeps_build_outputs_out_and_sources_in() {
    let ignore = read(".dockerignore");
    let rules: Vec<&str> = ignore
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert!(
        rules.contains(&"**/target"),
        "target dirs must stay out of the context"
    );
    assert!(rules.contains(&".git"));
    for path in workspace_paths() {
        assert!(
            !rules
                .iter()
                .any(|r| r.trim_start_matches('/') == path || *r == format!("{path}/")),
            ".dockerignore drops {path}, which the build copies"
        );
    }
}

#[test]
fn dockerfiles_pass_hadolint() {
    let Some(hadolint) = ci::tool("hadolint") else {
        return;
    };
    for file in DOCKERFILES {
        let out = Command::new(&hadolint)
            .arg(repo(file))
            .output()
            .expect("run hadolint");
        assert!(
            out.status.success(),
            "hadolint {file}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
