//! The chaos soak, short: `caprl soak` for one minute of faults with a fixed seed meets every
//! kind of fault at least once (kill -9 of a role, a pause past the ack wait, a broker killed
//! and restarted on its store, a role started twice, a full disk under the learner, a burst of
//! several at once), and every round it ran ends as the undisturbed run does: the same weights
//! bit for bit, each task id used once, the counters adding up, every checkpoint verifying,
//! every second learner refused, memory bounded. In async mode, half a minute of faults: every
//! round finishes, each step's batch within `max_policy_lag`.

mod support;

use std::path::Path;
use std::time::Duration;

use support::{caprl, finish_within, spawn_group, Reaper};

/// Runs `caprl soak <args> --out DIR/soak` (within `limit`); its output and `soak.json`.
fn soak(dir: &Path, args: &[&str], limit: Duration) -> (String, serde_json::Value) {
    let out_dir = dir.join("soak");
    let mut all: Vec<String> = ["soak"].iter().chain(args).map(|s| s.to_string()).collect();
    all.extend(["--out".to_string(), out_dir.display().to_string()]);
    let (ok, out) = finish_within(spawn_group(&all), limit);
    assert!(ok, "the soak failed:\n{out}");
    let report = std::fs::read(out_dir.join("soak.json")).expect("soak.json");
    (
        out,
        serde_json::from_slice(&report).expect("soak.json is JSON"),
    )
}

/// The names of the checks that held in each round of a soak report.
fn held_per_round(report: &serde_json::Value) -> Vec<Vec<String>> {
    let rounds = report["rounds"].as_array().expect("rounds");
    assert!(!rounds.is_empty(), "no round ran: {report}");
    rounds
        .iter()
        .map(|r| {
            r["checks"]
                .as_array()
                .expect("checks")
                .iter()
                .filter(|c| c["ok"] == true)
                .map(|c| c["name"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .collect()
}

#[test]
fn a_short_soak_meets_every_fault_and_every_invariant_holds() {
    let _reaper = Reaper;
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--minutes",
        "1",
        "--seed",
        "7",
        "--fault-every",
        "3",
        "--max-rss-mib",
        "768",
        // Rounds of 3 RL epochs: several rounds in the minute, each checked.
        "--set",
        "train.rl_epochs=3",
        // bf16 snapshots through the object store: versions travel as chains of deltas
        // (runtime.snapshot_full_every), through kills and broker restarts.
        "--set",
        "runtime.snapshot_dtype=\"bf16\"",
    ];
    let (out, report) = soak(dir.path(), &args, Duration::from_secs(600));
    assert!(out.contains("soak PASSED"), "{out}");
    assert_eq!(report["passed"], true, "{report}");
    for kind in ["kill", "pause", "broker", "duplicate", "disk-full", "burst"] {
        let applied = report["faults"][kind]["applied"].as_u64().unwrap_or(0);
        assert!(applied >= 1, "no {kind} fault was applied:\n{out}");
    }
    for (round, held) in held_per_round(&report).iter().enumerate() {
        for check in [
            "every step ran",
            "final weights",
            "task ids used once",
            "counters add up",
            "checkpoints verify",
            "second learners refused",
            "memory bounded",
        ] {
            assert!(
                held.iter().any(|h| h == check),
                "round {}: {check} did not hold: {report}",
                round + 1
            );
        }
    }
    let log = std::fs::read_to_string(dir.path().join("soak/faults.log")).unwrap();
    assert!(log.contains("kill -9 nats-server"), "{log}");
}

#[test]
fn soak_refuses_nonsense_options_before_starting_anything() {
    let dir = tempfile::tempdir().unwrap();
    let out = caprl()
        .args(["soak", "--minutes", "0", "--out"])
        .arg(dir.path().join("soak"))
        .output()
        .expect("caprl runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--minutes must be a positive number"), "{err}");
    assert!(
        !dir.path().join("soak").exists(),
        "it created its output anyway"
    );
}

#[test]
fn an_async_soak_finishes_every_round_within_the_policy_lag() {
    let _reaper = Reaper;
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--minutes",
        "0.5",
        "--seed",
        "3",
        "--fault-every",
        "3",
        "--set",
        "runtime.mode=\"async\"",
        "--set",
        "train.rl_epochs=3",
    ];
    let (_, report) = soak(dir.path(), &args, Duration::from_secs(600));
    for held in held_per_round(&report) {
        assert!(held.iter().any(|h| h == "policy lag bounded"), "{report}");
        assert!(held.iter().any(|h| h == "every step ran"), "{report}");
    }
}
