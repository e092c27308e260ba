//! The results pages in docs/ are rendered from the results files beside them, never by hand:
//! each page is what its renderer prints for its directory today, and every results directory
//! names the machine it ran on.

use std::path::Path;
use std::process::Command;

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
    let out = Command::new("python3")
        .arg(root.join("scripts/results/quality_table.py"))
        .arg(&dir)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let page = std::fs::read_to_string(root.join("docs/results/benchmark.md")).unwrap();
    assert_eq!(
        page,
        String::from_utf8_lossy(&out.stdout),
        "docs/results/benchmark.md is stale: python3 scripts/results/quality_table.py \
         docs/results/benchmark --out docs/results/benchmark.md"
    );
}
