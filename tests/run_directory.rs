//! Run directories keep every run and pick the right checkpoint: the RL phase goes on counting
//! steps, policy versions and checkpoint names after the XE phase (even when the best XE epoch
//! is not the last), `--resume` after a kill -9 during RL continues RL and ends with the
//! undisturbed run's weights, `eval` of the checkpoint directory evaluates the RL model, and a
//! fresh run into a used directory sets the earlier ones aside, saying so under `-q`.

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{caprl, checkpoint_dirs, final_weights, kill9, sets, synth, text, Reaper};

/// Three XE epochs of 8 steps, then `RL_EPOCHS` RL epochs, a checkpoint every 2 steps (all
/// kept); with this seed, learning rate and 4 validation images the second XE epoch validates
/// best.
const RL_EPOCHS: u32 = 3;
const XE_STEPS: u64 = 24;
const LAST_STEP: u64 = XE_STEPS + 8 * RL_EPOCHS as u64;

fn three_xe_epochs(data: &Path, run: &Path) -> Vec<String> {
    sets(
        data,
        run,
        RL_EPOCHS,
        &[
            "train.xe_epochs=3",
            "train.batch_size=8",
            "train.eval_images=4",
            "seed=3",
            "optim.lr=0.05",
            "optim.schedule=\"constant\"",
            "checkpoint.every_steps=2",
            "checkpoint.keep=100",
        ],
    )
}

fn log_lines(run: &Path) -> Vec<Value> {
    std::fs::read_to_string(run.join("run.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The step a checkpoint directory holds (its name is the zero-padded step).
fn step_of(dir: &Path) -> u64 {
    let name = dir.file_name().unwrap().to_string_lossy().into_owned();
    name.trim_start_matches("ckpt-").parse().unwrap()
}

#[test]
fn rl_counts_on_after_xe_and_a_run_killed_during_rl_resumes_to_the_same_weights() {
    let _reaper = Reaper;
    let tmp = tempfile::tempdir().unwrap();
    let data = synth(tmp.path());

    // The undisturbed run.
    let reference = tmp.path().join("reference");
    let out = caprl()
        .args(["train", "-q"])
        .args(three_xe_epochs(&data, &reference))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let log = log_lines(&reference);
    let steps: Vec<&Value> = log.iter().filter(|l| l["type"] == "step").collect();
    let numbers: Vec<u64> = steps.iter().map(|s| s["step"].as_u64().unwrap()).collect();
    assert_eq!(
        numbers,
        (1..=LAST_STEP).collect::<Vec<_>>(),
        "steps of the run log"
    );
    let versions: Vec<u64> = steps
        .iter()
        .map(|s| s["policy_version"].as_u64().unwrap())
        .collect();
    assert!(versions.windows(2).all(|w| w[0] < w[1]), "{versions:?}");
    let rl: Vec<&&Value> = steps.iter().filter(|s| s["phase"] == "rl").collect();
    assert_eq!(
        rl[0]["step"],
        XE_STEPS + 1,
        "RL goes on from XE's last step"
    );

    // The case this guards: the best XE epoch is not the last, so RL starts from weights of
    // an earlier step than the one it counts on from.
    let best_xe = checkpoint_dirs(&reference.join("best-xe"));
    let best_step = step_of(best_xe.last().unwrap());
    assert!(
        best_step < XE_STEPS,
        "the best XE checkpoint is the last epoch's (step {best_step}): this test needs an earlier \
         one; change its XE settings"
    );
    // Every checkpoint name is a distinct step; the newest is the end of RL.
    let ckpts = checkpoint_dirs(&reference.join("checkpoints"));
    assert_eq!(step_of(ckpts.last().unwrap()), LAST_STEP);

    // `eval` of the checkpoint directory evaluates the newest: the final RL model.
    let out = caprl()
        .args(["eval", "--beam", "1", "--limit", "4", "--checkpoint"])
        .arg(reference.join("checkpoints"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let first = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string();
    assert!(
        first.contains(&format!("(rl phase, step {LAST_STEP})")),
        "{first}"
    );

    // The same run killed (-9) during RL, then resumed.
    let run = tmp.path().join("run");
    let mut args = vec!["train".to_string(), "-q".into()];
    args.extend(three_xe_epochs(&data, &run));
    let child = support::spawn_group(&args);
    let kill_after = XE_STEPS + 5;
    let started = Instant::now();
    loop {
        let logged = support::steps(&run, "rl")
            .iter()
            .filter_map(|s| s["step"].as_u64())
            .max();
        if logged.is_some_and(|s| s >= kill_after) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "RL step {kill_after} was never logged:\n{}",
            support::output_of(&child)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let killed_at = support::steps(&run, "rl")
        .iter()
        .filter_map(|s| s["step"].as_u64())
        .max()
        .unwrap();
    assert!(
        killed_at < LAST_STEP,
        "the run finished before it could be killed"
    );
    kill9(child);

    let out = caprl()
        .args(["train", "-q", "--resume"])
        .args(three_xe_epochs(&data, &run))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let log = log_lines(&run);
    let at = log
        .iter()
        .position(|l| l["type"] == "resume")
        .expect("a resume record");
    let from = log[at]["from_step"]
        .as_u64()
        .expect("resumed from a checkpoint");
    assert!(
        from > XE_STEPS && from <= killed_at,
        "resumed from step {from}, killed after step {killed_at}"
    );
    let after: Vec<(u64, String)> = log[at..]
        .iter()
        .filter(|l| l["type"] == "step")
        .map(|s| {
            (
                s["step"].as_u64().unwrap(),
                s["phase"].as_str().unwrap().into(),
            )
        })
        .collect();
    let want: Vec<(u64, String)> = (from + 1..=LAST_STEP).map(|s| (s, "rl".into())).collect();
    assert_eq!(
        after, want,
        "the resumed learner continues RL where it stopped"
    );
    assert!(
        final_weights(&run) == final_weights(&reference),
        "the resumed run ends with other weights than the undisturbed one"
    );
}

#[test]
fn three_fresh_runs_in_one_directory_keep_all_three() {
    let tmp = tempfile::tempdir().unwrap();
    let data = synth(tmp.path());
    let run = tmp.path().join("run");
    for seed in 1..=3 {
        let out = caprl()
            .args(["train", "--objective", "xe", "-q"])
            .args(sets(&data, &run, 0, &[]))
            .args(["--set", &format!("seed={seed}")])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        if seed > 1 {
            let aside = run.join(format!("previous-{}", seed - 1));
            assert!(
                stderr.contains("note:") && stderr.contains(&aside.display().to_string()),
                "-q must still say where the earlier run went:\n{stderr}"
            );
        }
    }
    let seed_of = |dir: PathBuf| -> u64 {
        let header = log_lines(&dir)
            .into_iter()
            .find(|l| l["type"] == "header")
            .unwrap_or_else(|| panic!("no run log header in {}", dir.display()));
        header["seed"].as_u64().unwrap()
    };
    assert_eq!(seed_of(run.join("previous-1")), 1);
    assert_eq!(seed_of(run.join("previous-2")), 2);
    assert_eq!(seed_of(run.clone()), 3);
    for dir in ["previous-1", "previous-2"] {
        assert!(
            !checkpoint_dirs(&run.join(dir).join("best-xe")).is_empty(),
            "{dir} keeps its best checkpoint"
        );
        // Its config went with it: the seed it was trained with.
        let config = std::fs::read_to_string(run.join(dir).join("config.toml")).unwrap();
        let seed = if dir == "previous-1" { 1 } else { 2 };
        assert!(
            config.contains(&format!("seed = {seed}")),
            "{dir}: {config}"
        );
    }
}

/// `caprl train --objective xe -q` of the tiny run with `extra` keys.
fn train_xe(data: &Path, run: &Path, extra: &[&str]) -> std::process::Output {
    caprl()
        .args(["train", "--objective", "xe", "-q"])
        .args(sets(data, run, 0, extra))
        .output()
        .unwrap()
}

#[test]
fn a_checkpoint_dir_that_is_not_the_runs_own_is_refused_before_anything_moves() {
    let tmp = tempfile::tempdir().unwrap();
    let data = synth(tmp.path());
    let run = tmp.path().join("run");
    for (dir, says) in [
        (run.clone(), "is the run directory itself"),
        (data.join("checkpoints"), "lies inside the data set"),
    ] {
        let key = format!("checkpoint.dir={:?}", dir.display().to_string());
        let out = train_xe(&data, &run, &[&key]);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        assert!(text(&out).contains(says), "{}", text(&out));
    }
    assert!(
        !data.join("checkpoints").exists(),
        "a checkpoint went into the data set"
    );
    assert!(!run.join("previous-1").exists());

    // Run A keeps its checkpoints in a shared directory; run B may not take it over.
    let shared = tmp.path().join("shared-ckpts");
    let key = format!("checkpoint.dir={:?}", shared.display().to_string());
    let out = train_xe(
        &data,
        &tmp.path().join("run-a"),
        &[&key, "checkpoint.every_steps=2"],
    );
    assert!(out.status.success(), "{}", text(&out));
    let before = checkpoint_dirs(&shared);
    assert!(!before.is_empty());
    let out = train_xe(&data, &tmp.path().join("run-b"), &[&key]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("holds the checkpoints of the run in"),
        "{}",
        text(&out)
    );
    assert!(text(&out).contains("run-a"), "{}", text(&out));
    assert_eq!(
        checkpoint_dirs(&shared),
        before,
        "run A's checkpoints changed"
    );
}

#[test]
fn a_resume_with_other_settings_says_which_and_records_them() {
    let tmp = tempfile::tempdir().unwrap();
    let data = synth(tmp.path());
    let run = tmp.path().join("run");
    let out = train_xe(&data, &run, &["checkpoint.every_steps=2"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = caprl()
        .args(["train", "--objective", "xe", "-q", "--resume"])
        .args(sets(
            &data,
            &run,
            0,
            &["checkpoint.every_steps=2", "seed=7", "optim.lr=0.002"],
        ))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--resume with settings other than the checkpoint's"),
        "{stderr}"
    );
    assert!(
        stderr.contains("seed 42 -> 7") && stderr.contains("optim.lr"),
        "{stderr}"
    );
    let config = std::fs::read_to_string(run.join("config.toml")).unwrap();
    assert!(config.contains("seed = 7"), "{config}");
}

#[test]
fn resume_refuses_when_every_checkpoint_is_damaged_instead_of_starting_over() {
    let tmp = tempfile::tempdir().unwrap();
    let data = synth(tmp.path());
    let run = tmp.path().join("run");
    let out = train_xe(&data, &run, &["checkpoint.every_steps=2"]);
    assert!(out.status.success(), "{}", text(&out));
    let checkpoints = checkpoint_dirs(&run.join("checkpoints"));
    assert!(!checkpoints.is_empty());
    for ck in &checkpoints {
        let weights = ck.join("model.safetensors");
        let bytes = std::fs::read(&weights).unwrap();
        std::fs::write(&weights, &bytes[..bytes.len() / 2]).unwrap();
    }
    let out = caprl()
        .args(["train", "--objective", "xe", "-q", "--resume"])
        .args(sets(&data, &run, 0, &["checkpoint.every_steps=2"]))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("every checkpoint in"), "{}", text(&out));
    assert!(text(&out).contains("truncated"), "{}", text(&out));
    assert!(
        !run.join("previous-1").exists(),
        "the damaged run was moved aside"
    );
    assert_eq!(checkpoint_dirs(&run.join("checkpoints")), checkpoints);
}
