//! The results pages in docs/ are rendered from the results files beside them, never by hand:
//! each page is what `scripts/results/render.py` prints for its directory today, every results
//! directory names the machine, commit, date and command of its measurement, and a directory
//! that names no machine is printed as nothing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `python3 scripts/results/render.py ARGS`.
fn render(args: &[&str]) -> Output {
    Command::new("python3")
        .arg(root().join("scripts/results/render.py"))
        .args(args)
        .output()
        .expect("python3 runs")
}

fn json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `docs/results/<dir>` names its machine in machine.json and its commit, date and command in
/// run.json, as scripts/results/record.sh writes them.
fn assert_names_its_measurement(dir: &str) {
    let dir = root().join("docs/results").join(dir);
    let (machine, run) = (json(&dir.join("machine.json")), json(&dir.join("run.json")));
    for key in ["cpu", "cores", "simd"] {
        assert!(
            !machine[key].is_null(),
            "{}: machine.json names no {key}",
            dir.display()
        );
    }
    for key in ["commit", "date", "command"] {
        assert!(
            !run[key].is_null(),
            "{}: run.json names no {key}",
            dir.display()
        );
    }
}

#[test]
fn every_results_page_is_the_rendering_of_its_files() {
    let out = render(&["--check"]);
    assert!(
        out.status.success(),
        "{} (pages are rendered by python3 scripts/results/render.py)",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn every_results_directory_names_its_machine_commit_date_and_command() {
    for dir in [
        "bench-all",
        "python-score",
        "reward-cost",
        "roofline",
        "delta",
        "scale",
        "broadcast",
    ] {
        assert_names_its_measurement(dir);
    }
    // self-critical.pytorch's models are measured one by one, each with its own record.
    let peers = std::fs::read_dir(root().join("docs/results/sctorch")).unwrap();
    for model in peers.map(|entry| entry.unwrap().path()) {
        assert!(
            model.is_dir(),
            "{}: one directory per model",
            model.display()
        );
        let name = model.file_name().unwrap().to_str().unwrap();
        assert_names_its_measurement(&format!("sctorch/{name}"));
    }
    // The benchmark task's driver keeps its machine in suite.json, and each run its own.
    let suite = json(&root().join("docs/results/benchmark/suite.json"));
    for key in ["cpu", "cores", "simd"] {
        assert!(
            !suite["machine"][key].is_null(),
            "suite.json names no machine {key}"
        );
    }
}

#[test]
fn a_results_directory_without_its_machine_prints_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let copy = |name: &str| -> PathBuf {
        let to = dir.path().join(name);
        std::fs::copy(root().join("docs/results/bench-all").join(name), &to).unwrap();
        to
    };
    copy("rows.json");
    copy("run.json");
    let machine = copy("machine.json");
    let from = dir.path().to_str().unwrap();
    assert!(render(&["performance.md", "--from", from]).status.success());
    let mut named = json(&machine);
    named["cpu"] = serde_json::Value::Null;
    std::fs::write(&machine, named.to_string()).unwrap();
    let out = render(&["performance.md", "--from", from]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("names no machine"));
}

/// The README's first table is the one `scripts/results/first_run.sh` wrote, and the README names
/// the machine that printed it.
#[test]
fn the_readme_shows_the_first_run_table_its_results_file_holds() {
    let dir = root().join("docs/results/first-run");
    let table = std::fs::read_to_string(dir.join("table.txt")).unwrap();
    let machine = json(&dir.join("machine.json"));
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    assert!(
        readme.contains(&format!("```\n{}```", table)),
        "README.md does not show docs/results/first-run/table.txt as it is"
    );
    let cpu = machine["cpu"].as_str().unwrap();
    let simd = machine["simd"]
        .as_str()
        .unwrap()
        .replace("avx512", "AVX-512")
        .replace("avx2", "AVX2");
    let section = &readme[readme.find("## What `caprl run` prints").unwrap()..];
    let words = &section[..section.find("```").unwrap()];
    assert!(
        words.contains(cpu) && words.contains(&simd),
        "the README does not name the machine of the first-run table ({cpu}, {simd}): {words}"
    );
}
