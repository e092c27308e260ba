//! The JSONL run log: round trip, crash tolerance, resume.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use caprl_common::telemetry::{
    read_run_log, EvalRecord, ResumeRecord, RunLog, StepRecord, TelemetryError,
};
use serde_json::json;

const CONFIG: &str = "seed = 3\n\n[train]\nobjective = \"scst\"\n";

/// A record's per-name values (losses, rewards, stages, ...) from `(name, value)` pairs.
fn by_name<V: Copy>(pairs: &[(&str, V)]) -> BTreeMap<String, V> {
    pairs.iter().map(|&(k, v)| (k.to_string(), v)).collect()
}

/// Appends `bytes` to the file at `path`, as a crash or a stray writer would leave them.
fn append_raw(path: &Path, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .expect("open");
    f.write_all(bytes).expect("append");
}

fn step(n: u64) -> StepRecord {
    StepRecord {
        step: n,
        epoch: n / 10,
        phase: "scst".into(),
        policy_version: n,
        snapshot_version: Some(n + 3),
        losses: by_name(&[("total", 1.0 / n as f64), ("pg", 0.5)]),
        rewards: by_name(&[("cider", 0.1 * n as f64)]),
        grad_norm: 2.0,
        lr: 5e-5,
        tokens_per_s: 1000.0,
        rollouts_per_s: 80.0,
        lag: 0.25,
        max_lag: 1,
        importance_weight: 0.9,
        off_policy: by_name(&[("weight_mean", 0.9), ("cut_fraction", 0.25)]),
        dropped_stale: 1,
        stale_reweighted: 2,
        ppo: by_name(&[("clip_fraction", 0.1), ("ratio_max", 1.3)]),
        groups_dropped: 3,
        tasks_issued: 4,
        results_found: 0,
        task_ids: vec![4 * n, 4 * n + 1],
        duplicates: 1,
        rejected: by_name(&[("bad_magic", 2)]),
        seconds: 0.5,
        stages: by_name(&[("forward", 0.2), ("wait_results", 0.1)]),
        unix_ms: 1_700_000_000_000 + n,
    }
}

fn eval(n: u64, cider: f64) -> EvalRecord {
    EvalRecord {
        step: n,
        epoch: 0,
        split: "val".into(),
        metrics: by_name(&[("cider_d", cider)]),
        unix_ms: 1_700_000_000_500,
    }
}

#[test]
fn run_log_round_trips_header_steps_and_evals() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run_dir = dir.path().join("run1");
    let mut log = RunLog::create(
        &run_dir,
        CONFIG,
        json!({"run_id": "r1", "versions": {"candle": "0.11"}}),
    )
    .expect("create");
    for n in 1..=3 {
        log.log_step(&step(n)).expect("log step");
    }
    log.log_eval(&eval(3, 0.9)).expect("log eval");
    let mut nan_step = step(4);
    nan_step.grad_norm = f64::NAN;
    nan_step.losses.insert("total".into(), f64::NAN);
    log.log_step(&nan_step).expect("log a NaN step");

    assert_eq!(
        std::fs::read_to_string(run_dir.join("config.toml")).expect("config copy"),
        CONFIG
    );
    let text = std::fs::read_to_string(log.path()).expect("read");
    let first: serde_json::Value =
        serde_json::from_str(text.lines().next().expect("header")).expect("json");
    assert_eq!(first["type"], "header");
    assert_eq!(first["config"]["train"]["objective"], "scst");
    assert_eq!(first["versions"]["caprl"], env!("CARGO_PKG_VERSION"));
    assert_eq!(first["versions"]["candle"], "0.11");
    assert_eq!(first["run_id"], "r1");
    assert!(text
        .lines()
        .nth(1)
        .expect("step line")
        .starts_with("{\"type\":\"step\""));

    let back = read_run_log(log.path()).expect("read back");
    assert!(back.warnings.is_empty());
    assert_eq!(back.steps.len(), 4);
    assert_eq!(back.steps[..3], [step(1), step(2), step(3)]);
    assert!(
        back.steps[3].grad_norm.is_nan(),
        "NaN is written as null and read back as NaN"
    );
    assert!(back.steps[3].losses["total"].is_nan());
    assert_eq!(back.evals, vec![eval(3, 0.9)]);
    assert_eq!(back.config().expect("config")["seed"], 3);
}

#[test]
fn truncated_last_line_is_skipped_with_a_warning() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = RunLog::create(dir.path(), CONFIG, json!(null)).expect("create");
    log.log_step(&step(1)).expect("log");
    log.log_step(&step(2)).expect("log");
    let path = log.path().to_path_buf();
    drop(log);
    append_raw(&path, b"{\"type\":\"step\",\"step\":3,\"polic");

    let back = read_run_log(&path).expect("a torn last line is tolerated");
    assert_eq!(back.steps.len(), 2);
    assert_eq!(back.warnings.len(), 1);
    assert!(back.warnings[0].contains(":4:"), "{:?}", back.warnings);
}

#[test]
fn malformed_line_in_the_middle_names_file_and_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = RunLog::create(dir.path(), CONFIG, json!({})).expect("create");
    log.log_step(&step(1)).expect("log");
    let path = log.path().to_path_buf();
    drop(log);
    append_raw(&path, b"{\"type\":\"step\",\"step\":2,\"polic\n");
    append_raw(
        &path,
        b"{\"type\":\"step\",\"step\":3,\"policy_version\":3}\n",
    );

    let err = read_run_log(&path).expect_err("corrupt middle line");
    assert!(
        matches!(err, TelemetryError::MalformedLine { line: 3, .. }),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(msg.contains(&format!("{}:3:", path.display())), "{msg}");

    // A record of the wrong shape is an error too, not a silent default.
    std::fs::write(
        &path,
        "{\"type\":\"header\"}\n{\"type\":\"step\",\"step\":\"two\",\"policy_version\":1}\n{\"type\":\"header\"}\n",
    )
    .expect("write");
    let err = read_run_log(&path).expect_err("bad step");
    assert!(err.to_string().contains(":2: bad step record"), "{err}");
}

#[test]
fn a_log_without_header_is_rejected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("run.jsonl");
    std::fs::write(
        &path,
        "{\"type\":\"step\",\"step\":1,\"policy_version\":1}\n",
    )
    .expect("write");
    let err = read_run_log(&path).expect_err("no header");
    assert!(
        err.to_string().contains("expected the header line"),
        "{err}"
    );
}

#[test]
fn create_refuses_to_overwrite_an_existing_run_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    RunLog::create(dir.path(), CONFIG, json!({})).expect("create");
    let err = RunLog::create(dir.path(), CONFIG, json!({})).expect_err("exists");
    assert!(matches!(err, TelemetryError::RunLogExists { .. }));
    assert!(err.to_string().contains("open_append"), "{err}");
    let err = RunLog::create(dir.path(), "not = [toml", json!({})).expect_err("bad toml");
    assert!(matches!(err, TelemetryError::ConfigNotToml(_)), "{err:?}");
}

#[test]
fn resume_appends_after_a_torn_line_and_replayed_steps_supersede() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut log = RunLog::create(dir.path(), CONFIG, json!({})).expect("create");
    for n in 1..=5 {
        log.log_step(&step(n)).expect("log");
    }
    log.log_eval(&eval(5, 0.5)).expect("eval");
    let path = log.path().to_path_buf();
    drop(log);
    append_raw(&path, b"{\"type\":\"st");

    // The checkpoint was at step 3: steps 4.. are done again.
    let mut log = RunLog::open_append(dir.path()).expect("open_append");
    let resumed = ResumeRecord {
        from_step: Some(3),
        checkpoint: Some("ckpt-00000003".into()),
        unix_ms: 7,
    };
    log.log_resume(&resumed).expect("resume record");
    for n in 4..=6 {
        let mut s = step(n);
        s.phase = "resumed".into();
        log.log_step(&s).expect("log");
    }
    log.log_eval(&eval(5, 0.7)).expect("eval");
    drop(log);

    let back = read_run_log(&path).expect("read");
    assert!(
        back.warnings.is_empty(),
        "the torn line was cut before appending: {:?}",
        back.warnings
    );
    let steps: Vec<(u64, &str)> = back
        .steps
        .iter()
        .map(|s| (s.step, s.phase.as_str()))
        .collect();
    assert_eq!(
        steps,
        vec![
            (1, "scst"),
            (2, "scst"),
            (3, "scst"),
            (4, "resumed"),
            (5, "resumed"),
            (6, "resumed")
        ]
    );
    assert_eq!(back.evals, vec![eval(5, 0.7)]);
    assert_eq!(back.resumes, vec![resumed]);

    let missing = RunLog::open_append(&dir.path().join("nope")).expect_err("missing");
    assert!(matches!(missing, TelemetryError::RunLogMissing { .. }));
}
