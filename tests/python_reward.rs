//! Rewards written in Python (`reward.spec = "cider=1,py:<function>=w"`, `reward.python` the
//! module): served by a Python child of each reward worker, mixed with the built-in rewards,
//! logged like them; the child killed with -9 mid-run costs nothing; a function that raises, or
//! returns a wrong count, NaN or a string, or a module or function that is not there, stops the
//! run with a message naming the reward (and, once scoring, the rollout).

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use support::{caprl, finish_within, output_of, sets, spawn_group, steps, stop, synth, Reaper};

/// A module whose `length` reward is a caption's word count over 10, and which records every
/// call (the captions, tokens, references and values) in `calls.jsonl` beside it.
const MODULE: &str = r#"
import json, os

CALLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "calls.jsonl")

def length(batch):
    values = [len(c.split()) / 10 for c in batch.captions]
    with open(CALLS, "a") as f:
        f.write(json.dumps({"task": batch.task, "captions": batch.captions,
                            "tokens": batch.tokens, "finished": batch.finished,
                            "references": batch.references, "image_ids": batch.image_ids,
                            "rows": batch.rows, "values": values}) + "\n")
    return values

def raises(batch):
    return {}["no such key"]

def too_few(batch):
    return [0.5] * (len(batch) - 1)

def nan(batch):
    return [float("nan")] * len(batch)

def text(batch):
    return ["high"] * len(batch)

def inf(batch):
    return [float("inf")] * len(batch)

def nothing(batch):
    return None

def slow(batch):
    # The first two calls outlast runtime.ack_wait_secs = 2.
    import time
    marks = os.path.join(os.path.dirname(os.path.abspath(__file__)), "slow-calls")
    with open(marks, "a") as f:
        f.write("x")
    if os.path.getsize(marks) <= 2:
        time.sleep(3.5)
    return [0.25] * len(batch)
"#;

fn module(dir: &Path) -> PathBuf {
    let path = dir.join("my_rewards.py");
    std::fs::write(&path, MODULE).unwrap();
    path
}

fn python_sets(data: &Path, run: &Path, module: &Path, spec: &str) -> Vec<String> {
    let spec = format!("reward.spec=\"{spec}\"");
    let python = format!("reward.python={:?}", module.display().to_string());
    sets(data, run, 1, &[&spec, &python])
}

/// `caprl local` over the tiny data set in `dir` with reward `spec` served from the test module,
/// and one more key `extra`: the module's path, the run directory and the arguments.
fn local_args(dir: &Path, spec: &str, extra: &str) -> (PathBuf, PathBuf, Vec<String>) {
    let data = synth(dir);
    let module = module(dir);
    let run = dir.join("run");
    let mut args = vec!["local".to_string()];
    args.extend(python_sets(&data, &run, &module, spec));
    args.extend(["--set".to_string(), extra.to_string()]);
    (module, run, args)
}

fn calls(module: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(module.with_file_name("calls.jsonl")).unwrap_or_default();
    text.lines()
        .map(|l| serde_json::from_str(l).expect("a call record"))
        .collect()
}

#[test]
fn a_python_reward_mixes_with_cider_and_is_logged_like_a_builtin_one() {
    let _reaper = Reaper;
    let dir = tempfile::tempdir().unwrap();
    // The mean baseline trains every caption the function scored (no greedy baseline caption).
    let (module, run, args) = local_args(
        dir.path(),
        "cider=1,py:length=0.5",
        "train.baseline=\"mean\"",
    );
    let (ok, out) = finish_within(spawn_group(&args), Duration::from_secs(300));
    assert!(ok, "caprl local with a Python reward failed:\n{out}");

    // Every call got what the batch promises, and its values are the function's.
    let calls = calls(&module);
    assert!(!calls.is_empty(), "the Python reward was never called");
    for call in &calls {
        let captions = call["captions"].as_array().unwrap();
        let values = call["values"].as_array().unwrap();
        assert_eq!(captions.len(), values.len());
        for (i, (caption, value)) in captions.iter().zip(values).enumerate() {
            let words = caption.as_str().unwrap().split_whitespace().count();
            assert_eq!(value.as_f64().unwrap(), words as f64 / 10.0);
            assert_eq!(call["tokens"][i].as_array().unwrap().len(), words);
            assert!(!call["references"][i].as_array().unwrap().is_empty());
            assert!(call["image_ids"][i].is_string() && call["rows"][i].is_u64());
        }
        assert!(call["task"].as_str().unwrap().starts_with("task-"));
    }
    // Each RL step's logged component is the mean of the values the function returned for the
    // tasks that step used, beside cider's.
    let values_of: std::collections::BTreeMap<u64, Vec<f64>> = calls
        .iter()
        .map(|c| {
            let task = c["task"].as_str().unwrap()["task-".len()..]
                .parse()
                .unwrap();
            let values = c["values"].as_array().unwrap();
            (task, values.iter().map(|v| v.as_f64().unwrap()).collect())
        })
        .collect();
    let rl = steps(&run, "rl");
    assert!(!rl.is_empty());
    for step in &rl {
        let values: Vec<f64> = step["task_ids"]
            .as_array()
            .expect("task ids in the step record")
            .iter()
            .flat_map(|t| values_of[&t.as_u64().unwrap()].clone())
            .collect();
        // The worker hands values on as f32.
        let mean = values.iter().map(|&v| v as f32 as f64).sum::<f64>() / values.len() as f64;
        let logged = step["rewards"]["py:length"]
            .as_f64()
            .expect("py:length logged");
        assert!(step["rewards"]["cider"].is_number(), "{step}");
        assert!(
            (logged - mean).abs() < 1e-6,
            "step {}: logged py:length {logged}, the function's values for its tasks average {mean}",
            step["step"]
        );
    }
    // TensorBoard's scalars and the HTML report carry it under its spec name, as cider.
    let events: Vec<u8> = std::fs::read_dir(run.join("tb"))
        .expect("TensorBoard event files in <run_dir>/tb")
        .flat_map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .collect();
    let has = |bytes: &[u8], name: &str| bytes.windows(name.len()).any(|w| w == name.as_bytes());
    assert!(
        has(&events, "py:length") && has(&events, "cider"),
        "no py:length scalar"
    );
    let report = dir.path().join("report.html");
    let out = caprl()
        .args([
            "report",
            run.to_str().unwrap(),
            "--out",
            report.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        has(&std::fs::read(&report).unwrap(), "py:length"),
        "py:length not in the report"
    );
}

/// The `python3` children of this test's run: their command line names `module`.
fn python_children(module: &Path) -> Vec<u32> {
    let needle = module.display().to_string();
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline);
        if cmdline.contains("reward_server") && cmdline.ends_with(&format!("{needle}\0")) {
            pids.push(pid);
        }
    }
    pids
}

#[test]
fn the_python_process_killed_mid_run_costs_one_retry_and_the_run_finishes() {
    let _reaper = Reaper;
    let dir = tempfile::tempdir().unwrap();
    let (module, run, args) = local_args(dir.path(), "cider=1,py:length=0.5", "train.rl_epochs=3");
    let local = spawn_group(&args);
    let started = Instant::now();
    while steps(&run, "rl").is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no RL step:\n{}",
            output_of(&local)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let children = python_children(&module);
    assert!(!children.is_empty(), "no Python reward process found");
    for pid in &children {
        // SAFETY: kill(2) on a Python child of the run this test started.
        unsafe {
            libc::kill(*pid as i32, libc::SIGKILL);
        }
    }
    let (ok, out) = finish_within(local, Duration::from_secs(300));
    assert!(
        ok,
        "caprl local failed after the Python process was killed:\n{out}"
    );
    assert!(
        out.contains("a new Python process serves the next one")
            && out.contains("py:length` of ")
            && out.contains(", on the rollout of task-"),
        "the worker did not say it handed the rollout back, naming it:\n{out}"
    );
    // The run ended cleanly: no Python process outlives its reward worker.
    assert_eq!(
        python_children(&module),
        Vec::<u32>::new(),
        "Python children left"
    );
    // The task-id ledger: each RL step used its round's tasks (a batch of 16 images in tasks of
    // 4), and no task twice.
    let mut seen = std::collections::BTreeSet::new();
    for step in steps(&run, "rl") {
        let n = step["step"].as_u64().unwrap();
        let ids: Vec<u64> = step["task_ids"]
            .as_array()
            .expect("task ids in the step record")
            .iter()
            .map(|t| t.as_u64().unwrap())
            .collect();
        let first = (n - 1) * 4;
        assert_eq!(ids, (first..first + 4).collect::<Vec<_>>(), "step {n}");
        assert!(ids.iter().all(|id| seen.insert(*id)), "a task used twice");
    }
    assert!(seen.len() >= 12, "three epochs of RL steps: {seen:?}");
}

/// SIGTERM to `caprl local` mid-run stops it cleanly, its reward workers' Python processes with
/// it.
#[test]
fn sigterm_stops_a_run_and_its_python_processes() {
    let _reaper = Reaper;
    let dir = tempfile::tempdir().unwrap();
    let (module, run, args) = local_args(dir.path(), "cider=1,py:length=0.5", "train.rl_epochs=50");
    let local = spawn_group(&args);
    support::wait_for_rl(&run);
    assert!(
        !python_children(&module).is_empty(),
        "no Python reward process found"
    );
    let (_, out) = stop(local);
    let stopped = Instant::now();
    while !python_children(&module).is_empty() {
        assert!(
            stopped.elapsed() < Duration::from_secs(10),
            "Python processes outlived the stopped run:\n{out}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `caprl train` with `spec` fails, exits 3 (no restart helps), and says `what`.
fn refused(spec: &str, module: Option<&str>, what: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let data = synth(dir.path());
    let path = match module {
        Some(m) => PathBuf::from(m),
        None => self::module(dir.path()),
    };
    let out = caprl()
        .arg("train")
        .args(python_sets(&data, &dir.path().join("run"), &path, spec))
        .arg("-q")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{spec}: {err}");
    for w in what {
        assert!(err.contains(w), "{spec}: the message lacks {w:?}:\n{err}");
    }
}

#[test]
fn a_broken_python_reward_stops_the_run_and_names_the_reward_and_the_rollout() {
    let rollout = "failed on the rollout of task-";
    refused(
        "cider=1,py:raises=1",
        None,
        &[
            "py:raises",
            "my_rewards.py",
            rollout,
            "KeyError",
            "no such key",
        ],
    );
    refused(
        "py:too_few=1",
        None,
        &["py:too_few", rollout, "values for", "captions"],
    );
    refused("py:nan=1", None, &["py:nan", rollout, "nan", "finite"]);
    refused(
        "py:text=1",
        None,
        &["py:text", rollout, "str 'high'", "not a number"],
    );
    refused("py:inf=1", None, &["py:inf", rollout, "inf", "finite"]);
    refused(
        "py:nothing=1",
        None,
        &["py:nothing", rollout, "NoneType", "not a sequence"],
    );
}

/// The same under `caprl local`, over a real nats-server: the reward worker stops with the
/// message, and the run stops with it (exit 3) instead of restarting the worker for ever.
#[test]
fn a_broken_python_reward_stops_a_local_run_with_its_message() {
    let _reaper = Reaper;
    let dir = tempfile::tempdir().unwrap();
    let (_, _, args) = local_args(dir.path(), "cider=1,py:raises=1", "train.rl_epochs=1");
    let mut local = spawn_group(&args);
    let started = Instant::now();
    let status = loop {
        if let Some(status) = local.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(180),
            "caprl local still running with a broken reward"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = output_of(&local);
    assert_eq!(status.code(), Some(3), "{out}");
    for w in ["py:raises", "failed on the rollout of task-", "KeyError"] {
        assert!(out.contains(w), "the message lacks {w:?}:\n{out}");
    }
}

#[test]
fn a_missing_module_or_function_stops_the_worker_before_it_takes_work() {
    refused(
        "cider=1,py:nowhere=1",
        None,
        &["reward.python", "my_rewards.py has no function nowhere"],
    );
    refused(
        "cider=1,py:length=1",
        Some("/nonexistent/rewards.py"),
        &["reward.python", "/nonexistent/rewards.py"],
    );
}

#[test]
fn a_python_term_without_a_module_is_a_config_error() {
    let dir = tempfile::tempdir().unwrap();
    let data = synth(dir.path());
    let out = caprl()
        .arg("train")
        .args(sets(
            &data,
            &dir.path().join("run"),
            1,
            &["reward.spec=\"cider=1,py:length=1\""],
        ))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("reward.python") && err.contains("py:<function>"),
        "{err}"
    );
}

/// The example the docs point at trains as they say, both of its rewards beside CIDEr-D.
#[test]
fn the_documented_example_rewards_train() {
    let dir = tempfile::tempdir().unwrap();
    let data = synth(dir.path());
    let run = dir.path().join("run");
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/rewards/simple.py");
    let out = caprl()
        .arg("train")
        .args(python_sets(
            &data,
            &run,
            &example,
            "cider=1,py:length_bonus=0.2,py:mentions=0.2",
        ))
        .arg("-q")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for step in steps(&run, "rl") {
        for name in ["py:length_bonus", "py:mentions"] {
            let v = step["rewards"][name].as_f64().expect(name);
            assert!((0.0..=1.0).contains(&v), "{name} = {v}");
        }
    }
}

/// `caprl bench reward` times a Python reward beside a built-in one, row by row.
#[test]
fn bench_reward_prints_a_row_per_reward() {
    let bench = |json: &[&str]| {
        let out = caprl()
            .args(["bench", "reward", "--rollouts", "2", "--images", "2"])
            .args(["--samples", "2", "--rewards", "bleu4,py:zero"])
            .args(json)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let text = bench(&[]);
    assert!(text.contains("= 6 captions"), "{text}");
    for row in ["| bleu4 | ", "| py:zero | "] {
        assert!(text.contains(row), "no row {row:?}:\n{text}");
    }
    // --json: the same figures for scripts/results/reward_cost.sh.
    let json: serde_json::Value = serde_json::from_str(&bench(&["--json"])).expect("JSON");
    assert_eq!(json["captions"], 6);
    let rows = json["rows"].as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["reward"].as_str().unwrap()).collect();
    assert_eq!(names, ["bleu4", "py:zero"]);
    assert!(rows
        .iter()
        .all(|r| r["ms_per_rollout"].as_f64().unwrap() > 0.0));
}

/// A Python reward slower than `ack_wait` keeps its rollout: the worker extends the delivery
/// while the function runs, so nothing is scored twice and every task is used once.
#[test]
fn a_python_reward_slower_than_ack_wait_is_not_scored_twice() {
    let _reaper = Reaper;
    let dir = tempfile::tempdir().unwrap();
    let (module, run, args) =
        local_args(dir.path(), "cider=1,py:slow=1", "runtime.ack_wait_secs=2");
    let (ok, out) = finish_within(spawn_group(&args), Duration::from_secs(300));
    assert!(ok, "{out}");
    let slow_calls = std::fs::read(module.with_file_name("slow-calls")).unwrap();
    assert!(slow_calls.len() >= 2, "the slow calls did not happen");
    let rl = steps(&run, "rl");
    assert!(!rl.is_empty());
    let mut seen = std::collections::BTreeSet::new();
    for step in &rl {
        assert_eq!(step["duplicates"].as_u64(), Some(0), "{step}");
        for id in step["task_ids"].as_array().unwrap() {
            assert!(
                seen.insert(id.as_u64().unwrap()),
                "a task used twice: {step}"
            );
        }
        assert_eq!(step["rewards"]["py:slow"].as_f64(), Some(0.25), "{step}");
    }
}
