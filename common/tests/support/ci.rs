//! The one rule for tests that need an outside tool (kubectl, promtool, openssl, mount, ...):
//! on a developer's machine a missing tool skips the check with a line saying so; in CI
//! (`CI` set, as every CI service does) it fails the test, because `.ci/run` installs every
//! such tool and a skip there would hide a check that never ran.
//!
//! Included with `#[path]` by the test files of every crate that has such a test.
#![allow(dead_code)]

use std::path::PathBuf;

/// True in CI: `CI` is set to anything but empty, `0` or `false`.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false"))
}

/// A check cannot run because `reason`: panics in CI, else prints why it is skipped.
/// Callers return right after it.
pub fn unavailable(reason: &str) {
    assert!(
        !in_ci(),
        "{reason}; CI must run this check (bash .ci/run installs what it needs)"
    );
    println!("SKIPPED: {reason} (bash .ci/run installs it; with CI=true this fails)");
}

/// `name` on `PATH`; None (after [`unavailable`]) when it is not there.
pub fn tool(name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        unavailable(&format!("`{name}` is not installed"));
    }
    found
}
