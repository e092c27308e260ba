//! `caprl bench pipeline` at a tiny size, in one process and over a real nats-server: every
//! role's stages timed and counted once per unit of work, the step records carrying the
//! learner's stages, a peak RSS for every process, and bad flags refused (figures only; speed
//! is not asserted).

mod support;

use serde_json::Value;
use support::{caprl, sets, synth, text};

const STEPS: u64 = 3;
/// `train.batch_size = 16` in tasks of 4 images.
const TASKS_PER_STEP: u64 = 4;

fn stage(run: &Value, key: &str) -> (f64, u64) {
    let s = &run["stages"][key];
    (
        s[0].as_f64().unwrap_or(0.0),
        s[1].as_u64().unwrap_or_default(),
    )
}

#[test]
fn bench_pipeline_times_every_roles_stages_in_process_and_over_nats() {
    let dir = tempfile::tempdir().unwrap();
    let data = synth(dir.path());
    let (json, keep) = (dir.path().join("pipeline.json"), dir.path().join("runs"));
    let out = caprl()
        .args(["bench", "pipeline", "--steps", &STEPS.to_string()])
        .args(["--actors", "2", "--reward-workers", "1"])
        .arg("--json")
        .arg(&json)
        .arg("--keep")
        .arg(&keep)
        .args(sets(&data, &dir.path().join("unused"), 1, &[]))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for row in [
        "learner snapshot_serialise",
        "learner wait_results",
        "learner forward",
        "learner optimizer",
        "actor decode",
        "actor snapshot_load",
        "reward-worker score",
        "snapshot path (share of step)",
        "start to first step",
        "peak RSS actor actor-1",
        "peak RSS local",
    ] {
        assert!(stdout.contains(row), "no {row:?} row:\n{stdout}");
    }
    let runs: Vec<Value> = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(runs.len(), 2, "{runs:?}");
    for run in &runs {
        let mode = run["mode"].as_str().unwrap();
        assert_eq!(run["steps"], STEPS, "{mode}");
        assert!(run["step_seconds"].as_f64().unwrap() > 0.0, "{mode}");
        assert!(run["later_step_seconds"].as_f64().unwrap() > 0.0, "{mode}");
        assert!(run["first_step_seconds"].as_f64().unwrap() > 0.0, "{mode}");
        // One snapshot per step, one decode and one score per task: nothing timed twice.
        assert_eq!(stage(run, "learner/snapshot_serialise").1, STEPS, "{mode}");
        assert_eq!(stage(run, "learner/snapshot_put").1, STEPS, "{mode}");
        assert_eq!(stage(run, "learner/wait_results").1, STEPS, "{mode}");
        assert_eq!(stage(run, "learner/optimizer").1, STEPS, "{mode}");
        assert_eq!(
            stage(run, "actor/decode").1,
            STEPS * TASKS_PER_STEP,
            "{mode}"
        );
        assert_eq!(
            stage(run, "reward-worker/score").1,
            STEPS * TASKS_PER_STEP,
            "{mode}"
        );
        for key in [
            "learner/forward",
            "learner/backward",
            "actor/snapshot_fetch",
            "actor/snapshot_load",
            "actor/rollout_publish",
            "reward-worker/scored_publish",
        ] {
            let (seconds, count) = stage(run, key);
            assert!(
                seconds > 0.0 && count > 0,
                "{mode}: {key} {seconds} s × {count}"
            );
        }
        let rss = run["peak_rss"].as_object().unwrap();
        assert!(
            rss.values().all(|b| b.as_u64().unwrap() > 1_000_000),
            "{mode}: {rss:?}"
        );
    }
    let nats = &runs[1];
    assert_eq!(nats["mode"], "nats");
    let processes: Vec<&String> = nats["peak_rss"].as_object().unwrap().keys().collect();
    assert_eq!(
        processes,
        [
            "actor actor-0",
            "actor actor-1",
            "learner",
            "local",
            "reward-worker reward-worker-0"
        ],
        "{nats}"
    );
    // The learner's step records carry its stages of the step.
    let records = support::steps(&keep.join("nats").join("run"), "rl");
    assert_eq!(records.len() as u64, STEPS);
    for r in &records {
        for key in ["snapshot_serialise", "wait_results", "forward", "backward"] {
            assert!(r["stages"][key].as_f64().unwrap() > 0.0, "{key}: {r}");
        }
        let staged: f64 = r["stages"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_f64().unwrap())
            .sum();
        assert!(staged <= r["seconds"].as_f64().unwrap() * 1.01, "{r}");
    }
}

#[test]
fn bench_pipeline_refuses_too_few_steps_and_zero_actors() {
    for (flag, says) in [
        ("--steps=1", "--steps must be at least 2"),
        (
            "--actors=0",
            "--actors and --reward-workers must be at least 1",
        ),
        ("--modes=cluster", "invalid value 'cluster'"),
    ] {
        let out = caprl().args(["bench", "pipeline", flag]).output().unwrap();
        assert!(!out.status.success());
        assert!(text(&out).contains(says), "{flag}: {}", text(&out));
    }
}
