//! `caprl bench all --json` runs every benchmark of the set at a tiny size and
//! prints one JSON row per benchmark, with a reference and a ratio where
//! there is one (figures only; speed is not asserted).

mod support;

use support::{caprl, text};

#[test]
fn bench_all_json_has_every_row_with_positive_figures() {
    let out = caprl()
        .args([
            "bench",
            "all",
            "--json",
            "--snapshot-mb",
            "1",
            "--rollouts",
            "200",
            "--score-images",
            "500",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let rows: Vec<serde_json::Value> =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}\n{}", text(&out)));
    let names: Vec<&str> = rows.iter().map(|r| r["name"].as_str().unwrap()).collect();
    for want in [
        "CIDEr-D",
        "decoding",
        "XE learner step",
        "SCST iteration",
        "snapshot",
        "rollouts",
    ] {
        assert!(
            names.iter().any(|n| n.starts_with(want)),
            "no `{want}` row in {names:?}"
        );
    }
    for r in &rows {
        assert!(r["ours"].as_f64().unwrap() > 0.0, "{r}");
        if let Some(ratio) = r["ratio"].as_f64() {
            assert!(ratio > 0.0 && r["reference"].as_f64().unwrap() > 0.0, "{r}");
        }
    }
    let with_reference = rows.iter().filter(|r| r["ratio"].is_number()).count();
    assert!(with_reference >= 2, "{rows:?}");
}

#[test]
fn bench_clip_prints_every_reward_row_with_positive_figures() {
    let out = caprl()
        .args([
            "bench",
            "clip",
            "--images",
            "200",
            "--batch",
            "4",
            "--rollouts",
            "10",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.starts_with("SIMD level "), "{table}");
    assert!(
        table
            .lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("10 rollouts of 4 images (120 captions")),
        "{table}"
    );
    for want in [
        "cider (CIDEr-D reward",
        "CIDEr-D scorer alone",
        "clip alone, text embeddings cached",
        "clip + disc, text embeddings cached",
        "clip + disc, embedding the captions too",
        "text encoder alone",
    ] {
        let row = table
            .lines()
            .find(|l| l.starts_with(&format!("| {want}")))
            .unwrap_or_else(|| panic!("no `{want}` row in\n{table}"));
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let micros: f64 = cells[2].parse().unwrap_or_else(|e| panic!("{e}: {row}"));
        assert!(micros > 0.0 && micros.is_finite(), "{row}");
    }
}
