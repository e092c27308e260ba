//! TensorBoard event files written alongside `run.jsonl`, read back by the
//! `tensorboard` package's own event reader (Python, `pip install tensorboard`).
//! A missing reader fails the test in CI and skips it elsewhere (`support/ci.rs`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use caprl_common::telemetry::{
    read_run_log, EvalRecord, RunLog, SampleCaption, SamplesRecord, StepRecord,
};
use serde_json::{json, Value};

#[path = "support/ci.rs"]
mod ci;

const CONFIG: &str = "seed = 7\n[train]\nobjective = \"scst\"\n";

/// Reads every event file under a directory with tensorboard's EventAccumulator and prints
/// `{"scalars": {tag: [[step, value]..]}, "text": {tag: [[step, text]..]}, "files": n}`.
const READER: &str = r#"
import glob, json, os, sys
from tensorboard.backend.event_processing import event_accumulator as ea
d = sys.argv[1]
acc = ea.EventAccumulator(d, size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
acc.Reload()
tags = acc.Tags()
out = {
    "scalars": {t: [[e.step, e.value] for e in acc.Scalars(t)] for t in tags["scalars"]},
    "text": {t: [[e.step, e.tensor_proto.string_val[0].decode()] for e in acc.Tensors(t)]
             for t in tags["tensors"]},
    "plugins": {t: acc.SummaryMetadata(t).plugin_data.plugin_name for t in tags["tensors"]},
    "files": len(glob.glob(os.path.join(d, "*tfevents*"))),
}
print(json.dumps(out))
"#;

fn python() -> String {
    std::env::var("PYTHON").unwrap_or_else(|_| "python3".into())
}

/// The reader's output for `dir`, or None (test skipped) when the `tensorboard`
/// package is missing outside CI.
fn read_with_tensorboard(dir: &Path) -> Option<Value> {
    let probe = Command::new(python())
        .args(["-c", "import tensorboard"])
        .output();
    if !probe.as_ref().is_ok_and(|o| o.status.success()) {
        let reason = format!(
            "the Python package `tensorboard` is not importable with `{}` (pip install tensorboard): {:?}",
            python(),
            probe.map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
        );
        ci::unavailable(&reason);
        return None;
    }
    let out = Command::new(python())
        .args(["-c", READER])
        .arg(dir)
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "tensorboard's reader failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(serde_json::from_slice(&out.stdout).expect("reader prints JSON"))
}

fn step(n: u64, phase: &str) -> StepRecord {
    let mut losses = BTreeMap::new();
    losses.insert("total".to_string(), 2.0 / n as f64);
    let mut rewards = BTreeMap::new();
    if phase != "xe" {
        rewards.insert("cider".to_string(), 0.5 + 0.01 * n as f64);
        rewards.insert("total".to_string(), 0.5 + 0.01 * n as f64);
    }
    StepRecord {
        step: n,
        epoch: n / 4,
        phase: phase.into(),
        policy_version: n,
        snapshot_version: None,
        losses,
        rewards,
        grad_norm: if n == 3 {
            f64::NAN
        } else {
            1.0 + 0.125 * n as f64
        },
        lr: 5e-4,
        lag: 0.25 * n as f64,
        tokens_per_s: 1000.0 + n as f64,
        ..StepRecord::default()
    }
}

fn samples(n: u64, caption: &str) -> SamplesRecord {
    SamplesRecord {
        step: n,
        epoch: n / 4,
        phase: "scst".into(),
        images: vec![SampleCaption {
            image: "val-0".into(),
            greedy: caption.into(),
            beam: format!("{caption} | beam"),
            refs: vec!["a red cube".into(), "a large red block".into()],
        }],
        unix_ms: 0,
    }
}

/// (step, value) pairs of `tag` as the reader returned them.
fn scalar(read: &Value, tag: &str) -> Vec<(u64, f64)> {
    read["scalars"][tag]
        .as_array()
        .unwrap_or_else(|| panic!("no scalar {tag} in {}", read["scalars"]))
        .iter()
        .map(|p| (p[0].as_u64().expect("step"), p[1].as_f64().expect("value")))
        .collect()
}

/// A new run log in `dir` mirrored to `dir/tb`; returns that folder and the log.
fn mirrored_run_log(dir: &Path) -> (PathBuf, RunLog) {
    let tb = dir.join("tb");
    let mut log = RunLog::create(dir, CONFIG, json!({})).expect("create");
    log.mirror_to_tensorboard(&tb, CONFIG, 0)
        .expect("tensorboard");
    (tb, log)
}

fn close(got: &[(u64, f64)], want: &[(u64, f64)]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for ((gs, gv), (ws, wv)) in got.iter().zip(want) {
        assert_eq!(gs, ws, "{got:?} vs {want:?}");
        // Event files hold f32 values.
        assert!(
            (gv - wv).abs() <= 1e-6 * wv.abs().max(1.0),
            "{got:?} vs {want:?}"
        );
    }
}

#[test]
fn tensorboard_reads_back_every_scalar_and_text_of_the_run_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (tb, mut log) = mirrored_run_log(dir.path());
    for n in 1..=4 {
        log.log_step(&step(n, "xe")).expect("step");
    }
    let mut metrics = BTreeMap::new();
    metrics.insert("cider_d".to_string(), 0.75);
    metrics.insert("bleu4".to_string(), 0.25);
    log.log_eval(&EvalRecord {
        step: 4,
        epoch: 1,
        split: "val".into(),
        metrics: metrics.clone(),
        unix_ms: 0,
    })
    .expect("eval");
    log.log_samples(&samples(4, "a red cube")).expect("samples");
    for n in 5..=6 {
        log.log_step(&step(n, "scst")).expect("step");
    }
    metrics.insert("cider_d".to_string(), 1.125);
    log.log_eval(&EvalRecord {
        step: 6,
        epoch: 2,
        split: "val".into(),
        metrics,
        unix_ms: 0,
    })
    .expect("eval");
    log.log_samples(&samples(6, "a large red cube beside a blue sphere"))
        .expect("samples");
    drop(log);

    // The run log keeps the samples too.
    let back = read_run_log(&dir.path().join("run.jsonl")).expect("read");
    let mut got = back.samples.clone();
    for g in &mut got {
        assert!(g.unix_ms > 0, "the wall clock is filled in");
        g.unix_ms = 0;
    }
    assert_eq!(
        got,
        vec![
            samples(4, "a red cube"),
            samples(6, "a large red cube beside a blue sphere")
        ]
    );

    let Some(read) = read_with_tensorboard(&tb) else {
        return;
    };
    assert_eq!(read["files"], 1);
    let steps: Vec<StepRecord> = (1..=4)
        .map(|n| step(n, "xe"))
        .chain((5..=6).map(|n| step(n, "scst")))
        .collect();
    let want = |f: &dyn Fn(&StepRecord) -> Option<f64>| -> Vec<(u64, f64)> {
        steps
            .iter()
            .filter_map(|s| f(s).filter(|v| v.is_finite()).map(|v| (s.step, v)))
            .collect()
    };
    close(
        &scalar(&read, "loss/total"),
        &want(&|s| s.losses.get("total").copied()),
    );
    close(
        &scalar(&read, "reward/cider"),
        &want(&|s| s.rewards.get("cider").copied()),
    );
    close(
        &scalar(&read, "reward/total"),
        &want(&|s| s.rewards.get("total").copied()),
    );
    let grad = scalar(&read, "train/grad_norm");
    assert!(
        !grad.iter().any(|(s, _)| *s == 3),
        "the NaN grad norm is left out: {grad:?}"
    );
    close(&grad, &want(&|s| Some(s.grad_norm)));
    close(&scalar(&read, "train/lr"), &want(&|s| Some(s.lr)));
    close(&scalar(&read, "train/policy_lag"), &want(&|s| Some(s.lag)));
    close(
        &scalar(&read, "throughput/tokens_per_s"),
        &want(&|s| Some(s.tokens_per_s)),
    );
    close(&scalar(&read, "eval_val/cider_d"), &[(4, 0.75), (6, 1.125)]);
    close(&scalar(&read, "eval_val/bleu4"), &[(4, 0.25), (6, 0.25)]);

    assert_eq!(read["plugins"]["config"], "text");
    assert_eq!(read["plugins"]["samples/captions"], "text");
    let config = &read["text"]["config"][0];
    assert_eq!(config[0], 0);
    assert!(
        config[1]
            .as_str()
            .expect("text")
            .contains("objective = \"scst\""),
        "{config}"
    );
    let texts = read["text"]["samples/captions"]
        .as_array()
        .expect("samples text");
    assert_eq!(texts.len(), 2);
    assert_eq!(texts[0][0], 4);
    assert_eq!(texts[1][0], 6);
    let last = texts[1][1].as_str().expect("text");
    assert!(
        last.contains("| val-0 | a large red cube beside a blue sphere | a large red cube beside a blue sphere \\| beam | a red cube / a large red block |"),
        "{last}"
    );
}

#[test]
fn a_resumed_run_adds_a_second_event_file_that_tensorboard_reads_with_the_first() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (tb, mut log) = mirrored_run_log(dir.path());
    for n in 1..=3 {
        log.log_step(&step(n, "scst")).expect("step");
    }
    drop(log);
    let mut log = RunLog::open_append(dir.path()).expect("reopen");
    log.mirror_to_tensorboard(&tb, CONFIG, 3)
        .expect("tensorboard again");
    for n in 4..=5 {
        log.log_step(&step(n, "scst")).expect("step");
    }
    drop(log);

    let files = std::fs::read_dir(&tb).expect("tb dir").count();
    assert_eq!(files, 2, "one event file per process");
    let Some(read) = read_with_tensorboard(&tb) else {
        return;
    };
    let got: Vec<u64> = scalar(&read, "loss/total").iter().map(|p| p.0).collect();
    assert_eq!(got, vec![1, 2, 3, 4, 5]);
}

#[test]
fn a_damaged_record_is_not_read_as_data() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (tb, mut log) = mirrored_run_log(dir.path());
    for n in 1..=3 {
        log.log_step(&step(n, "scst")).expect("step");
    }
    drop(log);
    let file = std::fs::read_dir(&tb)
        .expect("tb dir")
        .next()
        .expect("one file")
        .expect("entry")
        .path();
    let mut bytes = std::fs::read(&file).expect("read");
    // Flip a bit in the last record's payload: its data CRC no longer matches.
    let at = bytes.len() - 10;
    bytes[at] ^= 0x01;
    std::fs::write(&file, bytes).expect("write");
    let Some(read) = read_with_tensorboard(&tb) else {
        return;
    };
    let got: Vec<u64> = scalar(&read, "loss/total").iter().map(|p| p.0).collect();
    assert_eq!(
        got,
        vec![1, 2],
        "the record with the bad CRC is dropped, not misread"
    );
}
