//! The benchmark task's results suite (`scripts/results/quality.sh`) end to end at its smoke size:
//! it generates the regions task, trains the quick grid and SLE for one epoch each, writes one
//! JSON per run the moment the run ends (its test captions beside it), renders the tables from
//! those files with the machine they ran on, and a second invocation skips every finished run.

mod support;

use std::path::Path;
use std::process::Command;

use support::text;

fn suite(out: &Path) -> std::process::Output {
    Command::new("bash")
        .args(["scripts/results/quality.sh", "smoke"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("CAPRL", env!("CARGO_BIN_EXE_caprl"))
        .env("OUT", out)
        .output()
        .expect("bash runs")
}

fn json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn modified(dir: &Path) -> Vec<(String, std::time::SystemTime)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            (name, e.metadata().unwrap().modified().unwrap())
        })
        .collect();
    files.sort();
    files
}

#[test]
fn smoke_grid_writes_a_json_per_run_renders_the_tables_and_skips_finished_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("quality");
    let first = suite(&out);
    assert!(first.status.success(), "{}", text(&first));

    let runs = modified(&out.join("runs"));
    let names: Vec<&str> = runs.iter().map(|r| r.0.as_str()).collect();
    // SLE runs on whichever model the models table found best.
    let sle = [
        "objectives-fc-gru-sle-s1.json",
        "objectives-transformer-sle-s1.json",
    ];
    assert_eq!(names.len(), 5, "{names:?}");
    assert_eq!(
        names[..4],
        [
            "models-fc-gru-scst-mean-s1.json",
            "models-fc-gru-xe-s1.json",
            "models-transformer-scst-mean-s1.json",
            "models-transformer-xe-s1.json",
        ]
    );
    assert!(sle.contains(&names[4]), "{names:?}");
    let data = json(&out.join("data/captions.json"));
    let images = data["images"].as_array().unwrap();
    let test_images = images.iter().filter(|i| i["split"] == "test").count();
    for (name, _) in &runs {
        let run = json(&out.join("runs").join(name));
        let metrics = &run["eval"]["metrics"];
        for key in [
            "cider_d",
            "cider_d_seen",
            "cider_d_unseen",
            "bleu4",
            "div2_sample",
            "mbleu4_sample",
            "r1_t2i",
            "mean_len",
        ] {
            assert!(metrics[key].is_number(), "{name}: no {key} in {metrics}");
        }
        assert!(run["params"].as_u64().unwrap() > 1000, "{name}: {run}");
        assert!(
            run["machine"]["cpu"].is_string() && run["machine"]["simd"].is_string(),
            "{name} names no machine: {run}"
        );
        // Its test captions are kept beside it, one per evaluated image, so a metric added
        // later needs no retraining.
        let captions = json(&out.join("captions").join(name));
        let captions = captions.as_array().unwrap();
        assert_eq!(
            captions.len(),
            test_images,
            "{name}: one caption per test image"
        );
        assert!(
            captions.iter().all(|c| c["caption"].is_string()),
            "{name}: {captions:?}"
        );
    }
    let suite_json = json(&out.join("suite.json"));
    assert!(suite_json["machine"]["cores"].as_u64().unwrap() >= 1);
    assert!(suite_json["ceilings"]["all"]["oracle"]["cider_d"].is_number());

    let table = std::fs::read_to_string(out.join("table.md")).unwrap();
    for wanted in [
        "Machine:",
        "Scoring signature:",
        "fc-gru",
        "transformer",
        "sle",
        "oracle",
    ] {
        assert!(
            table.contains(wanted),
            "no {wanted:?} in the table:\n{table}"
        );
    }

    // A second sitting: every run is done, none trains again or is rewritten.
    let second = suite(&out);
    assert!(second.status.success(), "{}", text(&second));
    assert_eq!(
        modified(&out.join("runs")),
        runs,
        "finished runs were rewritten"
    );
    assert!(!text(&second).contains("== models"), "{}", text(&second));
}
