//! The shell commands of the README and the docs (every line of their `sh` blocks) are ones
//! this build accepts: each `caprl ...` (or `cargo run --release -- ...`) command line parses
//! with this build's CLI, the config files and `--set` keys it names resolve to a valid config
//! (`caprl config show`), the files it names in the repository exist, and every other command
//! is one of the tools the docs say to install. And every block runs: each page followed in
//! order in a fresh directory on the tiny generated data set, every block exits 0, except
//! those marked `<!-- not run in CI: why -->` on the line before them (a cluster, a GPU, hours
//! of training, an install as root), whose commands the tests of those commands cover.

mod support;

use std::path::{Path, PathBuf};

use support::caprl;

/// The pages whose commands are checked.
fn pages(root: &Path) -> Vec<PathBuf> {
    let mut pages = vec![root.join("README.md"), root.join("k8s/README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// The command lines of `text`'s `sh`/`bash` blocks ([`blocks`]), continuation lines joined.
fn command_lines(text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    for block in blocks(text) {
        let mut pending = String::new();
        for line in block.lines() {
            match line.trim_end().strip_suffix('\\') {
                Some(part) => pending.push_str(part),
                None => {
                    pending.push_str(line);
                    if !pending.trim().is_empty() && !pending.trim_start().starts_with('#') {
                        lines.push(std::mem::take(&mut pending));
                    }
                    pending.clear();
                }
            }
        }
    }
    lines
}

/// The simple commands of a command line: its words up to a comment, split at `&&`, `||`,
/// `|` and `;`.
fn simple_commands(line: &str) -> Vec<Vec<String>> {
    let words = shlex::split(line).unwrap_or_else(|| panic!("unbalanced quotes: {line}"));
    let mut commands = vec![Vec::new()];
    for w in words {
        if w.starts_with('#') {
            break;
        }
        if ["&&", "||", "|", ";"].contains(&w.as_str()) {
            commands.push(Vec::new());
        } else {
            commands.last_mut().unwrap().push(w);
        }
    }
    commands.retain(|c| !c.is_empty());
    commands
}

/// The tools the docs say to install, besides caprl itself.
const TOOLS: &[&str] = &[
    "cargo",
    "bash",
    "python3",
    "pip",
    "docker",
    "kind",
    "kubectl",
    "tensorboard",
    "apt-get",
    "mkdir",
    "cp",
    "head",
    "curl",
    "openssl",
    "rustup",
];

/// Why the caprl command `args` (after the binary) is wrong, if it is.
fn check_caprl(root: &Path, args: &[String]) -> Option<String> {
    // A word the shell expands (`$(...)`, `$VAR`) or a placeholder (`DIR`, `...`) is not checked
    // literally: the parse with --help still is.
    let out = caprl()
        .current_dir(root)
        .args(args)
        .arg("--help")
        .output()
        .unwrap();
    if !out.status.success() {
        return Some(format!(
            "does not parse: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let mut show = caprl();
    show.current_dir(root).args(["config", "show"]);
    let mut reads_config = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--set" => {
                let kv = it.next()?;
                show.args(["--set", kv]);
                reads_config = true;
            }
            "--config" => {
                let file = it.next()?;
                if !root.join(file).is_file() {
                    return Some(format!("--config {file}: no such file in the repository"));
                }
                show.args(["--config", file]);
                reads_config = true;
            }
            _ => {}
        }
    }
    if reads_config {
        let out = show.output().unwrap();
        if !out.status.success() {
            return Some(format!(
                "its config does not resolve: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    None
}

#[test]
fn every_documented_command_is_accepted_by_this_build() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut checked = 0;
    let mut failures = Vec::new();
    for page in pages(root) {
        let text = std::fs::read_to_string(&page).unwrap();
        let name = page.strip_prefix(root).unwrap().display().to_string();
        for line in command_lines(&text) {
            for command in simple_commands(&line) {
                let first = command[0].as_str();
                let caprl_args = match first {
                    "caprl" => Some(&command[1..]),
                    "cargo"
                        if command.get(1..4)
                            == Some(&["run".into(), "--release".into(), "--".into()][..]) =>
                    {
                        Some(&command[4..])
                    }
                    _ => None,
                };
                let problem = match caprl_args {
                    Some(args) => check_caprl(root, args),
                    None if first.starts_with("scripts/") || first.ends_with(".sh") => {
                        (!root.join(first).is_file()).then(|| "no such script".to_string())
                    }
                    None if first == "bash" || first == "python3" => command
                        .get(1)
                        .filter(|s| s.starts_with("scripts/") || s.starts_with(".ci/"))
                        .filter(|s| !root.join(s).is_file())
                        .map(|s| format!("{s}: no such script")),
                    None if first.contains('=') => None,
                    None => (!TOOLS.contains(&first) && first != ".")
                        .then(|| format!("`{first}` is not a tool the docs say to install")),
                };
                checked += 1;
                if let Some(p) = problem {
                    failures.push(format!("{name}: `{}`: {p}", command.join(" ")));
                }
            }
        }
    }
    assert!(checked > 40, "only {checked} commands found");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The `sh`/`bash` blocks of `page`, each as one script.
fn blocks(page: &str) -> Vec<String> {
    let mut out = Vec::new();
    // Inside a fenced block: its text, when it is a shell block.
    let mut open: Option<Option<String>> = None;
    for line in page.lines() {
        if let Some(lang) = line.strip_prefix("```") {
            open = match open.take() {
                Some(block) => {
                    out.extend(block);
                    None
                }
                None => Some(matches!(lang.trim(), "sh" | "bash" | "shell").then(String::new)),
            };
        } else if let Some(Some(block)) = open.as_mut() {
            block.push_str(line);
            block.push('\n');
        }
    }
    out
}

/// The marker a block carries on the line before its fence when CI cannot run it, with why
/// (a cluster, a GPU, hours of training, an install as root); docs/design.md explains it.
const NOT_RUN: &str = "<!-- not run in CI: ";

/// The `sh`/`bash` blocks of `page` with the reason CI does not run each, if it says one.
fn blocks_and_skips(page: &str) -> Vec<(String, Option<String>)> {
    let reasons: Vec<Option<String>> = {
        let lines: Vec<&str> = page.lines().collect();
        let mut out = Vec::new();
        let mut inside = false;
        for (i, line) in lines.iter().enumerate() {
            if let Some(lang) = line.strip_prefix("```") {
                if !inside && matches!(lang.trim(), "sh" | "bash" | "shell") {
                    let before = i.checked_sub(1).map(|j| lines[j].trim()).unwrap_or("");
                    out.push(
                        before
                            .strip_prefix(NOT_RUN)
                            .and_then(|r| r.strip_suffix("-->"))
                            .map(|r| r.trim().to_string()),
                    );
                }
                inside = !inside;
            }
        }
        out
    };
    let blocks = blocks(page);
    assert_eq!(blocks.len(), reasons.len());
    blocks.into_iter().zip(reasons).collect()
}

/// A fresh directory set up as a newcomer's checkout after the README's first command: the
/// tiny generated data set in `data/synth`, the repository's `examples/`, `configs/` and
/// `scripts/` beside it, and a PATH whose `caprl` is this build.
fn newcomer(tmp: &Path) -> (PathBuf, String) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let data = support::synth(tmp);
    let dir = tmp.join("newcomer");
    std::fs::create_dir_all(dir.join("data")).unwrap();
    std::fs::rename(&data, dir.join("data/synth")).unwrap();
    for shared in ["examples", "configs", "scripts"] {
        std::os::unix::fs::symlink(root.join(shared), dir.join(shared)).unwrap();
    }
    let bin = tmp.join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_caprl"), bin.join("caprl")).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    (dir, path)
}

/// Runs `script` with bash in `dir`; panics with its output, naming `page`, when it fails.
fn run_block(page: &str, script: &str, dir: &Path, path: &str) {
    let out = std::process::Command::new("bash")
        .args(["-euo", "pipefail", "-c", script])
        .current_dir(dir)
        .env("PATH", path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "this block of {page} fails:\n{script}\n{}",
        support::text(&out)
    );
}

/// docs/getting-started.md followed in order, as a newcomer would, in a fresh directory whose
/// `data/synth` is the tiny generated set (so that `caprl run` with its defaults takes seconds):
/// every block runs and exits 0, `caprl` being this build.
#[test]
fn the_getting_started_page_runs_in_order() {
    let _reaper = support::Reaper;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(root.join("docs/getting-started.md")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let (dir, path) = newcomer(tmp.path());
    let blocks = blocks_and_skips(&page);
    assert!(blocks.len() >= 4, "{blocks:?}");
    for (script, skip) in blocks {
        assert_eq!(skip, None, "every block of the getting-started page runs");
        run_block("docs/getting-started.md", &script, &dir, &path);
    }
    for made in [
        "runs/latest/best-rl",
        "results.json",
        "runs/xe/best-xe",
        "runs/sle/best-rl",
    ] {
        assert!(dir.join(made).exists(), "{made} is missing");
    }
}

/// Every other page's blocks, each page followed in order in a fresh newcomer's directory: a
/// block runs and exits 0, or says on the line before it why CI does not run it.
#[test]
fn every_other_block_runs_or_says_why_not() {
    let _reaper = support::Reaper;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (mut ran, mut skipped) = (0, 0);
    for page in pages(root) {
        let name = page.strip_prefix(root).unwrap().display().to_string();
        if name == "docs/getting-started.md" {
            continue;
        }
        let blocks = blocks_and_skips(&std::fs::read_to_string(&page).unwrap());
        if blocks.iter().all(|(_, skip)| skip.is_some()) {
            skipped += blocks.len();
            continue;
        }
        let tmp = tempfile::tempdir().unwrap();
        let (dir, path) = newcomer(tmp.path());
        for (script, skip) in blocks {
            match skip {
                Some(why) => {
                    assert!(why.len() > 10, "{name}: say why CI does not run:\n{script}");
                    skipped += 1;
                }
                None => {
                    run_block(&name, &script, &dir, &path);
                    ran += 1;
                }
            }
        }
    }
    println!("{ran} blocks ran, {skipped} are marked not run in CI");
    assert!(ran >= 4, "only {ran} blocks ran");
}
