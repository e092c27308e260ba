//! What must hold after a soak round, read from what the run left on disk: the final weights
//! (sync mode: bit-identical to an undisturbed run), every task id of every step used exactly
//! once (both modes: each step trains on its own round's ids), the step counters adding up
//! (sync mode: async steps issue later rounds' tasks too), every checkpoint verifying against its manifest, numbers
//! that only go forward (steps and policy versions within each learner's life, across the XE
//! to RL boundary; the snapshot versions actors saw over the whole run, restarts included),
//! and (async mode) every step's batch within `max_policy_lag`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use caprl_common::telemetry::StepRecord;

/// One invariant's outcome: its name, and what is wrong when it does not hold.
#[derive(Debug, Clone)]
pub struct InvariantCheck {
    pub name: &'static str,
    pub detail: String,
    pub ok: bool,
}

impl InvariantCheck {
    fn new(name: &'static str, ok: bool, detail: String) -> InvariantCheck {
        InvariantCheck { name, detail, ok }
    }
}

/// What the checks compare a round with.
pub struct Expected<'a> {
    /// Sync mode: the undisturbed run's final weights.
    pub weights: Option<&'a [u8]>,
    /// Tasks per optimizer step (the step logged as `s` trains on tasks
    /// `(s-1)·K .. (s-1)·K+K-1`; sync: issued from the weights of step `s-1`).
    pub tasks_per_step: u64,
    /// The last optimizer step of the run.
    pub last_step: u64,
    /// The RL steps of the run.
    pub rl_steps: u64,
    pub sync: bool,
    pub max_policy_lag: u64,
}

/// The step records of `run_dir/run.jsonl`, in the order they were written (a resumed learner
/// writes the steps after its checkpoint again).
pub fn step_records(run_dir: &Path) -> Vec<StepRecord> {
    let text = std::fs::read_to_string(run_dir.join("run.jsonl")).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["type"] == "step")
        .filter_map(|v| serde_json::from_value(v).ok())
        .collect()
}

/// The newest periodic checkpoint's weights.
pub fn final_weights(checkpoints: &Path) -> Option<Vec<u8>> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(checkpoints)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("ckpt-"))
        })
        .collect();
    dirs.sort();
    std::fs::read(dirs.last()?.join("model.safetensors")).ok()
}

/// Every invariant of a finished round in `run_dir`.
pub fn check(run_dir: &Path, want: &Expected) -> Vec<InvariantCheck> {
    let records = step_records(run_dir);
    // The record of each step that survived: the last one written for it.
    let mut lineage: BTreeMap<u64, &StepRecord> = BTreeMap::new();
    for r in &records {
        lineage.insert(r.step, r);
    }
    let rl: Vec<&StepRecord> = lineage
        .values()
        .copied()
        .filter(|r| !r.task_ids.is_empty())
        .collect();
    let mut checks = vec![
        steps_complete(&lineage, &rl, want),
        task_ids_once(&rl, want),
    ];
    if want.sync {
        checks.push(weights(run_dir, want));
        checks.push(counters(&records, &rl, want));
    } else {
        checks.push(lag_bounded(&rl, want));
    }
    checks.push(numbers_go_forward(run_dir));
    checks.push(checkpoints_verify(run_dir));
    checks
}

/// Step numbers and policy versions grow with every step a learner logs (a resumed learner
/// starts again after its checkpoint: a `resume` line), and the snapshot versions of the RL
/// steps grow over the whole log: no actor ever saw a version go back.
fn numbers_go_forward(run_dir: &Path) -> InvariantCheck {
    let text = std::fs::read_to_string(run_dir.join("run.jsonl")).unwrap_or_default();
    let mut life: Option<(u64, u64)> = None;
    let mut snapshot: Option<u64> = None;
    let (mut steps, mut wrong) = (0, Vec::new());
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if v["type"] == "resume" {
            life = None;
            continue;
        }
        let Ok(r) = serde_json::from_value::<StepRecord>(v) else {
            continue;
        };
        steps += 1;
        if let Some((step, version)) = life {
            if r.step <= step || r.policy_version <= version {
                wrong.push(format!(
                    "step {} (policy v{}) logged after step {step} (v{version})",
                    r.step, r.policy_version
                ));
            }
        }
        life = Some((r.step, r.policy_version));
        if let Some(v) = r.snapshot_version {
            if snapshot.is_some_and(|last| v <= last) {
                wrong.push(format!(
                    "step {} published snapshot v{v} after v{}",
                    r.step,
                    snapshot.unwrap_or(0)
                ));
            }
            snapshot = Some(v);
        }
    }
    InvariantCheck::new(
        "numbers go forward",
        wrong.is_empty(),
        match wrong.is_empty() {
            true => format!(
                "{steps} step lines; snapshot versions up to v{}",
                snapshot.unwrap_or(0)
            ),
            false => wrong.join("; "),
        },
    )
}

fn steps_complete(
    lineage: &BTreeMap<u64, &StepRecord>,
    rl: &[&StepRecord],
    want: &Expected,
) -> InvariantCheck {
    let steps: Vec<u64> = lineage.keys().copied().collect();
    let ok = steps == (1..=want.last_step).collect::<Vec<_>>() && rl.len() as u64 == want.rl_steps;
    InvariantCheck::new(
        "every step ran",
        ok,
        format!(
            "steps 1..={} ({} RL) expected; the run log has {} steps ({} RL), last {:?}",
            want.last_step,
            want.rl_steps,
            steps.len(),
            rl.len(),
            steps.last()
        ),
    )
}

fn weights(run_dir: &Path, want: &Expected) -> InvariantCheck {
    let got = final_weights(&run_dir.join("checkpoints"));
    let ok = got.is_some() && got.as_deref() == want.weights;
    let detail = match (&got, ok) {
        (None, _) => "no final checkpoint".to_string(),
        (Some(_), true) => "bit-identical to the undisturbed run".to_string(),
        (Some(w), false) => format!(
            "the final weights ({} bytes) differ from the undisturbed run's",
            w.len()
        ),
    };
    InvariantCheck::new("final weights", ok, detail)
}

fn task_ids_once(rl: &[&StepRecord], want: &Expected) -> InvariantCheck {
    let k = want.tasks_per_step;
    let mut seen = BTreeSet::new();
    let mut wrong = Vec::new();
    for r in rl {
        let first = r.step.saturating_sub(1) * k;
        let expected: Vec<u64> = (first..first + k).collect();
        if r.task_ids != expected {
            wrong.push(format!(
                "step {} used {:?}, not {expected:?}",
                r.step, r.task_ids
            ));
        }
        for id in &r.task_ids {
            if !seen.insert(*id) {
                wrong.push(format!("task {id} used by two steps"));
            }
        }
    }
    InvariantCheck::new(
        "task ids used once",
        wrong.is_empty(),
        match wrong.is_empty() {
            true => format!("{} task ids over {} RL steps", seen.len(), rl.len()),
            false => wrong.join("; "),
        },
    )
}

/// Every surviving step's tasks were either issued by its learner or found in JetStream (left
/// by a predecessor), never both and never neither; the drops are reported by reason.
fn counters(records: &[StepRecord], rl: &[&StepRecord], want: &Expected) -> InvariantCheck {
    let k = want.tasks_per_step;
    let wrong: Vec<String> = rl
        .iter()
        .filter(|r| r.tasks_issued + r.results_found != k)
        .map(|r| {
            format!(
                "step {}: {} issued + {} found ≠ {k}",
                r.step, r.tasks_issued, r.results_found
            )
        })
        .collect();
    let mut rejected: BTreeMap<&str, u64> = BTreeMap::new();
    for r in records {
        for (reason, n) in &r.rejected {
            *rejected.entry(reason.as_str()).or_default() += n;
        }
    }
    let sum = |f: fn(&StepRecord) -> u64| records.iter().map(f).sum::<u64>();
    let redone = records.len()
        - records
            .iter()
            .map(|r| r.step)
            .collect::<BTreeSet<_>>()
            .len();
    let detail = format!(
        "issued {} + found {} = used {}; dropped: {} duplicates, {} stale, rejected {:?}; {} steps \
         redone after a learner restart",
        rl.iter().map(|r| r.tasks_issued).sum::<u64>(),
        rl.iter().map(|r| r.results_found).sum::<u64>(),
        rl.len() as u64 * k,
        sum(|r| r.duplicates),
        sum(|r| r.dropped_stale),
        rejected,
        redone
    );
    match wrong.is_empty() {
        true => InvariantCheck::new("counters add up", true, detail),
        false => InvariantCheck::new(
            "counters add up",
            false,
            format!("{}; {detail}", wrong.join("; ")),
        ),
    }
}

fn lag_bounded(rl: &[&StepRecord], want: &Expected) -> InvariantCheck {
    let over: Vec<String> = rl
        .iter()
        .filter(|r| r.max_lag > want.max_policy_lag)
        .map(|r| format!("step {} lag {}", r.step, r.max_lag))
        .collect();
    InvariantCheck::new(
        "policy lag bounded",
        over.is_empty(),
        match over.is_empty() {
            true => format!(
                "every RL step's batch within max_policy_lag {}",
                want.max_policy_lag
            ),
            false => over.join("; "),
        },
    )
}

fn checkpoints_verify(run_dir: &Path) -> InvariantCheck {
    let roots = ["checkpoints", "best-xe", "best-rl"].map(|d| run_dir.join(d));
    let mut verified = 0;
    let mut wrong = Vec::new();
    for root in roots.iter().filter(|r| r.exists()) {
        match caprl_learner::checkpoint::damage(root) {
            Ok(damaged) => wrong.extend(damaged.iter().map(|e| e.to_string())),
            Err(e) => wrong.push(format!("{}: {e}", root.display())),
        }
        for entry in std::fs::read_dir(root).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with("ckpt-") {
                verified += 1;
            } else if name.starts_with(".tmp-") {
                wrong.push(format!("{} left behind", entry.path().display()));
            }
        }
    }
    InvariantCheck::new(
        "checkpoints verify",
        wrong.is_empty() && verified > 0,
        match wrong.is_empty() {
            true => format!("{verified} checkpoints, each matching its manifest"),
            false => wrong.join("; "),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: u64 = 2;

    fn record(step: u64, rl: bool, issued: u64) -> String {
        snapshot_record(step, rl, issued, step + 10)
    }

    /// [`record`] whose RL step published snapshot version `snapshot`.
    fn snapshot_record(step: u64, rl: bool, issued: u64, snapshot: u64) -> String {
        let ids: Vec<u64> = match rl {
            true => ((step - 1) * K..step * K).collect(),
            false => Vec::new(),
        };
        let mut v = serde_json::json!({
            "type": "step", "step": step, "phase": if rl { "scst" } else { "xe" },
            "policy_version": step, "task_ids": ids, "tasks_issued": issued,
            "results_found": K - issued.min(K), "duplicates": 1,
        });
        if rl {
            v["snapshot_version"] = snapshot.into();
        }
        v.to_string()
    }

    const RESUME: &str = r#"{"type":"resume","from_step":2}"#;

    /// A run directory with steps 1 (XE), 2 and 3 (RL) and a checkpoint of `weights` at step 3.
    fn run_dir(lines: &[String], weights: &[u8]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let mut text = String::from("{\"type\":\"header\"}\n");
        for l in lines {
            text.push_str(l);
            text.push('\n');
        }
        std::fs::write(dir.path().join("run.jsonl"), text).unwrap();
        let files = [("model.safetensors", weights.to_vec())];
        caprl_learner::checkpoint::write(&dir.path().join("checkpoints"), 3, &files, 2).unwrap();
        dir
    }

    fn expected(weights: &[u8]) -> Expected<'_> {
        Expected {
            weights: Some(weights),
            tasks_per_step: K,
            last_step: 3,
            rl_steps: 2,
            sync: true,
            max_policy_lag: 0,
        }
    }

    fn failed(checks: &[InvariantCheck]) -> Vec<&'static str> {
        checks.iter().filter(|c| !c.ok).map(|c| c.name).collect()
    }

    fn good_lines() -> Vec<String> {
        vec![record(1, false, 0), record(2, true, 2), record(3, true, 1)]
    }

    #[test]
    fn an_undisturbed_run_and_one_with_a_redone_step_pass() {
        let w = b"weights".as_slice();
        let dir = run_dir(&good_lines(), w);
        assert_eq!(failed(&check(dir.path(), &expected(w))), Vec::<&str>::new());
        // A learner killed after step 3 and resumed from step 2 logs step 3 again, publishing
        // its snapshot past the one its predecessor published last.
        let mut lines = good_lines();
        lines.push(RESUME.into());
        lines.push(snapshot_record(3, true, 2, 14));
        let dir = run_dir(&lines, w);
        let checks = check(dir.path(), &expected(w));
        assert_eq!(failed(&checks), Vec::<&str>::new());
        let counters = checks.iter().find(|c| c.name == "counters add up").unwrap();
        assert!(
            counters.detail.contains("1 steps redone"),
            "{}",
            counters.detail
        );
    }

    #[test]
    fn numbers_going_back_are_caught() {
        let w = b"weights".as_slice();
        // A resumed learner that publishes a snapshot version its predecessor already did.
        let mut lines = good_lines();
        lines.push(RESUME.into());
        lines.push(snapshot_record(3, true, 2, 12));
        let dir = run_dir(&lines, w);
        let checks = check(dir.path(), &expected(w));
        assert_eq!(failed(&checks), ["numbers go forward"]);
        // A step logged again with no resume between (an RL phase reusing XE's numbers).
        let mut lines = good_lines();
        lines.push(snapshot_record(3, true, 2, 14));
        let dir = run_dir(&lines, w);
        assert_eq!(
            failed(&check(dir.path(), &expected(w))),
            ["numbers go forward"]
        );
    }

    #[test]
    fn other_weights_a_reused_task_id_a_missing_step_and_a_bad_count_are_caught() {
        let w = b"weights".as_slice();
        let dir = run_dir(&good_lines(), b"weightz");
        assert_eq!(failed(&check(dir.path(), &expected(w))), ["final weights"]);

        let mut lines = good_lines();
        lines[2] = lines[2].replace("[4,5]", "[2,3]");
        let dir = run_dir(&lines, w);
        assert_eq!(
            failed(&check(dir.path(), &expected(w))),
            ["task ids used once"]
        );

        let dir = run_dir(&good_lines()[..2], w);
        assert_eq!(failed(&check(dir.path(), &expected(w))), ["every step ran"]);

        let mut lines = good_lines();
        lines[1] = record(2, true, 2).replace("\"results_found\":0", "\"results_found\":1");
        let dir = run_dir(&lines, w);
        assert_eq!(
            failed(&check(dir.path(), &expected(w))),
            ["counters add up"]
        );
    }

    #[test]
    fn a_damaged_checkpoint_and_a_left_over_temp_directory_are_caught() {
        let w = b"weights".as_slice();
        let dir = run_dir(&good_lines(), w);
        let ckpt = dir.path().join("checkpoints/ckpt-0000000002");
        caprl_learner::checkpoint::write(
            &dir.path().join("checkpoints"),
            2,
            &[("model.safetensors", b"older".to_vec())],
            2,
        )
        .unwrap();
        std::fs::write(ckpt.join("model.safetensors"), b"olde").unwrap();
        assert_eq!(
            failed(&check(dir.path(), &expected(w))),
            ["checkpoints verify"]
        );

        let dir = run_dir(&good_lines(), w);
        std::fs::create_dir(dir.path().join("checkpoints/.tmp-ckpt-0000000004-99")).unwrap();
        assert_eq!(
            failed(&check(dir.path(), &expected(w))),
            ["checkpoints verify"]
        );
    }

    /// What an async run with `max_policy_lag = 2` is held to.
    fn async_expected(w: &[u8]) -> Expected<'_> {
        Expected {
            weights: None,
            sync: false,
            max_policy_lag: 2,
            ..expected(w)
        }
    }

    /// Async runs keep the ledger too: a step that trained on another round's task fails.
    #[test]
    fn async_runs_use_each_rounds_own_task_ids() {
        let w = b"weights".as_slice();
        let mut lines = good_lines();
        let rl_line = lines
            .iter()
            .position(|l| l.contains("\"task_ids\":[") && !l.contains("\"task_ids\":[]"))
            .unwrap();
        let ids =
            serde_json::from_str::<serde_json::Value>(&lines[rl_line]).unwrap()["task_ids"].clone();
        let first = ids[0].as_u64().unwrap();
        lines[rl_line] =
            lines[rl_line].replacen(&format!("[{first},"), &format!("[{},", first + 1000), 1);
        let dir = run_dir(&lines, w);
        let want = async_expected(w);
        assert_eq!(failed(&check(dir.path(), &want)), ["task ids used once"]);
    }

    #[test]
    fn async_runs_are_held_to_the_policy_lag() {
        let w = b"weights".as_slice();
        let mut lines = good_lines();
        lines[2] = lines[2].replace("\"policy_version\":3", "\"policy_version\":3,\"max_lag\":3");
        let dir = run_dir(&lines, w);
        let want = async_expected(w);
        assert_eq!(failed(&check(dir.path(), &want)), ["policy lag bounded"]);
    }
}
