//! `caprl score --meteor` and `caprl eval --meteor`: METEOR beside the other metrics with
//! pycocoevalcap's numbers when Java and the jar are there, and a clear error saying how to
//! install them when not.

#[path = "../common/tests/support/ci.rs"]
mod ci;
mod support;

use std::path::Path;

use serde_json::Value;
use support::{caprl, text, train_tiny_xe};

fn fixture() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/common/score/tests/fixtures/meteor_reference.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// REFS and CANDS files (`{"<id>": [...]}` / `{"<id>": "..."}`) of the METEOR fixture in `dir`.
fn write_files(dir: &Path, fx: &Value) -> (std::path::PathBuf, std::path::PathBuf) {
    let mut refs = serde_json::Map::new();
    let mut cands = serde_json::Map::new();
    for im in fx["images"].as_array().unwrap() {
        let id = im["id"].as_str().unwrap().to_string();
        refs.insert(id.clone(), im["refs"].clone());
        cands.insert(id, im["cand"].clone());
    }
    let (r, c) = (dir.join("refs.json"), dir.join("cands.json"));
    std::fs::write(&r, Value::Object(refs).to_string()).unwrap();
    std::fs::write(&c, Value::Object(cands).to_string()).unwrap();
    (r, c)
}

#[test]
fn score_meteor_without_the_jar_says_how_to_install_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (refs, cands) = write_files(tmp.path(), &fixture());
    let missing = tmp.path().join("no-such-dir/meteor-1.5.jar");
    let out = caprl()
        .args(["score", "--meteor", "--refs"])
        .arg(&refs)
        .arg("--cands")
        .arg(&cands)
        .env("CAPRL_METEOR_JAR", &missing)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "must fail without the jar: {stderr}");
    assert!(stderr.contains("pip install pycocoevalcap"), "{stderr}");
    assert!(stderr.contains(&missing.display().to_string()), "{stderr}");
    assert!(
        out.stdout.is_empty(),
        "nothing is printed before the error: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn score_meteor_prints_pycocoevalcap_numbers() {
    if ci::tool("java").is_none() {
        return;
    }
    if let Err(e) = caprl_score::locate_jar() {
        ci::unavailable(&format!("no METEOR jar: {e}"));
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let fx = fixture();
    let (refs, cands) = write_files(tmp.path(), &fx);
    let out = caprl()
        .args(["score", "--meteor", "--json", "--refs"])
        .arg(&refs)
        .arg("--cands")
        .arg(&cands)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    let got = json["corpus"]["meteor"].as_f64().expect("corpus METEOR");
    let want = fx["corpus"]["meteor"].as_f64().unwrap();
    assert!(
        (got - want).abs() <= 1e-4,
        "METEOR {got}, pycocoevalcap {want}"
    );
    assert!(
        json["corpus"]["cider_d"].as_f64().is_some(),
        "other metrics kept"
    );
    let per: std::collections::BTreeMap<String, f64> = json["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|im| {
            let id = im["image_id"].as_str().unwrap().to_string();
            (id, im["meteor"].as_f64().expect("per-image METEOR"))
        })
        .collect();
    for im in fx["images"].as_array().unwrap() {
        let want = im["meteor"].as_f64().unwrap();
        let got = per[im["id"].as_str().unwrap()];
        assert!((got - want).abs() <= 1e-4, "{}: {got} vs {want}", im["id"]);
    }

    let table = caprl()
        .args(["score", "--meteor", "--refs"])
        .arg(&refs)
        .arg("--cands")
        .arg(&cands)
        .output()
        .unwrap();
    assert!(table.status.success());
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.contains("METEOR"), "{text}");
}

#[test]
fn eval_meteor_adds_meteor_and_without_the_jar_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let run = train_tiny_xe(tmp.path());
    let eval = || {
        let mut cmd = caprl();
        cmd.args([
            "eval", "--split", "test", "--beam", "1", "--meteor", "--json",
        ])
        .arg("--checkpoint")
        .arg(run.join("best-xe"));
        cmd
    };

    let missing = tmp.path().join("nowhere/meteor-1.5.jar");
    let out = eval().env("CAPRL_METEOR_JAR", &missing).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(stderr.contains("pip install pycocoevalcap"), "{stderr}");
    assert!(
        out.stdout.is_empty(),
        "no metrics without METEOR: {}",
        text(&out)
    );

    if ci::tool("java").is_none() {
        return;
    }
    if let Err(e) = caprl_score::locate_jar() {
        ci::unavailable(&format!("no METEOR jar: {e}"));
        return;
    }
    let out = eval().output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    let m = json["metrics"]["meteor"]
        .as_f64()
        .expect("meteor in the metrics");
    assert!((0.0..=1.0).contains(&m), "{m}");
    assert!(json["metrics"]["cider_d"].as_f64().is_some());
}
