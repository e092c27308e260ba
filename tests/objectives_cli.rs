//! The RL objectives through the CLI on a tiny run: XE once, then mc-pg and actor-critic
//! started from that XE checkpoint, their value heads used by lookahead evaluation, and the
//! clear errors of a bad `--start-from` or a lookahead without a value head.

mod support;

use std::path::Path;

use support::{caprl, eval_test_split, sets, steps, synth, text};

fn train(args: &[String], extra: &[&str]) -> std::process::Output {
    caprl()
        .arg("train")
        .args(extra)
        .args(args)
        .output()
        .expect("caprl runs")
}

/// `caprl eval` of `checkpoint` on the test split, beam 2, lookahead λ = 0.5.
fn eval_lookahead(checkpoint: &Path, extra: &[&str]) -> std::process::Output {
    let flags = [&["--beam", "2", "--lookahead", "0.5"], extra].concat();
    eval_test_split(checkpoint, &flags)
}

fn has_value_head(best: &Path) -> bool {
    std::fs::read_dir(best)
        .unwrap()
        .filter_map(Result::ok)
        .any(|e| e.path().join("value.safetensors").exists())
}

#[test]
fn mc_pg_and_actor_critic_train_from_an_xe_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let data = synth(tmp.path());
    let xe = tmp.path().join("xe");
    let out = train(&sets(&data, &xe, 0, &[]), &["--objective", "xe"]);
    assert!(out.status.success(), "{}", text(&out));
    let best_xe = xe.join("best-xe");

    for (objective, extra) in [
        ("mc-pg", vec!["train.samples=1", "train.mc_rollouts=2"]),
        (
            "actor-critic",
            vec!["reward.spec=\"cider=1,embed=0.5\"", "train.kl_coef=0.1"],
        ),
    ] {
        let run = tmp.path().join(objective);
        let out = train(
            &sets(&data, &run, 1, &extra),
            &[
                "--objective",
                objective,
                "--start-from",
                best_xe.to_str().unwrap(),
            ],
        );
        assert!(out.status.success(), "{objective}: {}", text(&out));
        assert!(steps(&run, "xe").is_empty(), "{objective} skipped XE");
        let rl = steps(&run, "rl");
        assert!(!rl.is_empty());
        for s in &rl {
            let value = s["losses"]["value"].as_f64();
            assert!(value.is_some_and(f64::is_finite), "{objective}: {s}");
        }
        if objective == "actor-critic" {
            assert!(rl.iter().all(|s| s["losses"]["kl"].as_f64().is_some()));
            assert!(rl.iter().all(|s| s["rewards"]["embed"].as_f64().is_some()));
        }
        let best_rl = run.join("best-rl");
        assert!(
            has_value_head(&best_rl),
            "{objective}: value head in best-rl"
        );
        let out = eval_lookahead(&best_rl, &["--json"]);
        assert!(out.status.success(), "{}", text(&out));
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(json["lookahead_lambda"], 0.5);
        assert!(json["metrics"]["cider_d"].as_f64().is_some());
    }

    // Lookahead needs a value head: the XE checkpoint has none.
    let out = eval_lookahead(&best_xe, &[]);
    assert!(!out.status.success());
    assert!(text(&out).contains("has no value head"), "{}", text(&out));
}

#[test]
fn a_bad_start_from_is_a_clear_error_and_touches_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let data = synth(tmp.path());
    let run = tmp.path().join("run");
    // An earlier run's log in the run dir must survive a refused start.
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(run.join("run.jsonl"), "{\"earlier\":true}\n").unwrap();
    let missing = tmp.path().join("no-such-checkpoint");
    let out = train(
        &sets(&data, &run, 1, &[]),
        &[
            "--objective",
            "scst",
            "--start-from",
            missing.to_str().unwrap(),
        ],
    );
    assert!(!out.status.success());
    let msg = text(&out);
    assert!(
        msg.contains("--start-from") && msg.contains("is not a checkpoint"),
        "{msg}"
    );

    // A checkpoint of another data set (another vocabulary) is refused by name.
    let other = tmp.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    let out = caprl()
        .args([
            "data", "synth", "--seed", "9", "--train", "64", "--val", "16", "--test", "16", "-q",
            "--out",
        ])
        .arg(other.join("data"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let xe_other = tmp.path().join("xe-other");
    let out = train(
        &sets(&other.join("data"), &xe_other, 0, &[]),
        &["--objective", "xe"],
    );
    assert!(out.status.success(), "{}", text(&out));
    let out = train(
        &sets(&data, &run, 1, &[]),
        &[
            "--objective",
            "scst",
            "--start-from",
            xe_other.join("best-xe").to_str().unwrap(),
        ],
    );
    assert!(!out.status.success());
    let msg = text(&out);
    assert!(msg.contains("another vocabulary"), "{msg}");
    assert_eq!(
        std::fs::read_to_string(run.join("run.jsonl")).unwrap(),
        "{\"earlier\":true}\n",
        "the earlier run is left where it was"
    );
    assert!(!run.join("previous-1").exists());
}
