//! The chaos soak, short: `caprl soak` for one minute of faults with a fixed seed meets every
//! kind of fault at least once (kill -9 of a role, a pause past the ack wait, a broker killed
//! and restarted on its store, a role started twice, a full disk under the learner, a burst of
//! several at once), and every round it ran ends as the undisturbed run does: the same weights
//! bit for bit, each task id used once, the counters adding up, every checkpoint verifying,
//! every second learner refused, memory bounded.

mod support;

use std::time::Duration;

use support::{caprl, finish_within, spawn_group, Reaper};

#[test]
fn a_short_soak_meets_every_fault_and_every_invariant_holds() {
    let _reaper = Reaper;
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("soak");
    let args: Vec<String> = [
        "soak",
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
        "--out",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([out_dir.display().to_string()])
    .collect();
    let (ok, out) = finish_within(spawn_group(&args), Duration::from_secs(900));
    assert!(ok, "the soak failed:\n{out}");
    assert!(out.contains("soak PASSED"), "{out}");

    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("soak.json")).unwrap()).unwrap();
    assert_eq!(report["passed"], true, "{report}");
    for kind in ["kill", "pause", "broker", "duplicate", "disk-full", "burst"] {
        let applied = report["faults"][kind]["applied"].as_u64().unwrap_or(0);
        assert!(applied >= 1, "no {kind} fault was applied:\n{out}");
    }
    let rounds = report["rounds"].as_array().expect("rounds");
    assert!(!rounds.is_empty(), "{report}");
    for r in rounds {
        let names: Vec<&str> = r["checks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["ok"] == true)
            .map(|c| c["name"].as_str().unwrap())
            .collect();
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
                names.contains(&check),
                "round {}: {check} did not hold: {r}",
                r["round"]
            );
        }
    }
    let log = std::fs::read_to_string(out_dir.join("faults.log")).unwrap();
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
