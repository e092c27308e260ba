//! The results pages in docs/ are rendered from the results files beside them, never by hand:
//! each page is what its renderer prints for its directory today, and every results directory
//! names the machine it ran on.

use std::path::Path;
use std::process::Command;

/// `docs/results/<page>` is what `scripts/results/<renderer>` prints for `docs/results/<dir>`.
fn assert_rendering(renderer: &str, dir: &str, page: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let results = root.join("docs/results");
    let out = Command::new("python3")
        .arg(root.join("scripts/results").join(renderer))
        .arg(results.join(dir))
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let written = std::fs::read_to_string(results.join(page)).unwrap();
    assert_eq!(
        written,
        String::from_utf8_lossy(&out.stdout),
        "docs/results/{page} is stale: python3 scripts/results/{renderer} docs/results/{dir} \
         --out docs/results/{page}"
    );
}

#[test]
fn the_benchmark_results_page_is_the_rendering_of_its_files() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join("docs/results/benchmark");
    let suite: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("suite.json")).unwrap()).unwrap();
    for key in ["cpu", "cores", "simd"] {
        assert!(
            !suite["machine"][key].is_null(),
            "suite.json names no machine {key}"
        );
    }
    assert_rendering("quality_table.py", "benchmark", "benchmark.md");
}

/// The README's first table is the one `scripts/results/first_run.sh` wrote, and the README names
/// the machine that printed it.
#[test]
fn the_readme_shows_the_first_run_table_its_results_file_holds() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join("docs/results/first-run");
    let table = std::fs::read_to_string(dir.join("table.txt")).unwrap();
    let machine: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("machine.json")).unwrap()).unwrap();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
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

/// docs/results/performance.md is the rendering of `caprl bench all`'s files beside it, and
/// they name the machine, commit and date of the measurement.
#[test]
fn the_performance_results_page_is_the_rendering_of_its_files() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join("docs/results/bench-all");
    let read = |name: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(dir.join(name)).unwrap()).unwrap()
    };
    let (machine, run) = (read("machine.json"), read("run.json"));
    for key in ["cpu", "cores", "simd"] {
        assert!(!machine[key].is_null(), "machine.json names no {key}");
    }
    for key in ["commit", "date", "command"] {
        assert!(!run[key].is_null(), "run.json names no {key}");
    }
    assert!(read("rows.json").as_array().is_some_and(|r| !r.is_empty()));
    assert_rendering("bench_table.py", "bench-all", "performance.md");
}
