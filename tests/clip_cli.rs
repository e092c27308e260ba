//! Paper 004 end to end through the CLI on the tiny synthetic set: `caprl clip train` makes the
//! reward and evaluation encoders, WTF-RL trains with `clip=0.94,disc=0.06` (the discriminator
//! pre-trained, trained online, checkpointed and handed to the reward workers in the policy
//! snapshot), a resumed run restores it, and `caprl eval` reports R@k with the frozen
//! evaluation encoder. Bad encoder settings fail before training with a clear error.

mod support;

use std::path::{Path, PathBuf};

use support::{caprl, eval_test_split, final_weights, sets, steps, synth, text};

fn clip_train(data: &Path, out: &Path, seed: &str) {
    let o = caprl()
        .args([
            "clip", "train", "--epochs", "2", "--batch", "16", "--seed", seed, "-q", "--data",
        ])
        .arg(data)
        .arg("--out")
        .arg(out)
        .output()
        .expect("caprl runs");
    assert!(o.status.success(), "{}", text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("R@1 t2i"), "{stdout}");
}

fn wtf_sets(data: &Path, run: &Path, enc: &Path, eval_enc: &Path, objective: &str) -> Vec<String> {
    let extra = [
        format!("train.objective=\"{objective}\""),
        "reward.spec=\"clip=0.94,disc=0.06\"".to_string(),
        format!("clip.reward={:?}", enc.display().to_string()),
        format!("clip.eval={:?}", eval_enc.display().to_string()),
        "clip.disc_pretrain_images=32".into(),
        "clip.disc_pretrain_epochs=2".into(),
        "decode.beam=2".into(),
    ];
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let mut args = sets(data, run, 1, &extra);
    args.insert(0, "-q".into());
    args
}

/// `caprl train ARGS`, which must succeed, and the RL steps it logged in `run` (at least one).
fn train_rl(args: &[String], run: &Path) -> Vec<serde_json::Value> {
    let out = caprl()
        .arg("train")
        .args(args)
        .output()
        .expect("caprl runs");
    assert!(out.status.success(), "{}", text(&out));
    let rl = steps(run, "rl");
    assert!(!rl.is_empty(), "no RL step logged: {}", text(&out));
    rl
}

fn checkpoints_with(run: &Path, file: &str) -> Vec<PathBuf> {
    let dir = run.join("checkpoints");
    std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.join(file).exists())
        .collect()
}

#[test]
fn wtf_rl_trains_with_the_discriminator_and_eval_reports_recall() {
    let tmp = tempfile::tempdir().unwrap();
    let data = synth(tmp.path());
    let enc = tmp.path().join("clip-reward.safetensors");
    let eval_enc = tmp.path().join("clip-eval.safetensors");
    clip_train(&data, &enc, "1");
    clip_train(&data, &eval_enc, "2");
    assert_ne!(
        std::fs::read(&enc).unwrap(),
        std::fs::read(&eval_enc).unwrap()
    );

    let run = tmp.path().join("wtf-rl");
    let args = wtf_sets(&data, &run, &enc, &eval_enc, "wtf-rl");
    let rl = train_rl(&args, &run);
    for s in &rl {
        for key in ["disc", "disc_acc", "p_d_real", "p_d_fake"] {
            let v = s["losses"][key].as_f64();
            assert!(v.is_some_and(f64::is_finite), "{key} in {s}");
        }
        // The reward workers scored `disc` with the snapshot's discriminator.
        let p = s["rewards"]["disc"].as_f64().unwrap();
        assert!(p > 0.0 && p < 1.0, "{s}");
        assert!(
            s["rewards"]["clip"].as_f64().is_some_and(f64::is_finite),
            "{s}"
        );
    }
    assert!(!checkpoints_with(&run, "disc.safetensors").is_empty());
    assert!(!checkpoints_with(&run, "disc-optim.safetensors").is_empty());

    // Resuming a finished run with one more epoch restores the discriminator, no pre-training.
    let mut more: Vec<String> = args.iter().filter(|a| *a != "-q").cloned().collect();
    more.extend(["--set".into(), "train.rl_epochs=2".into()]);
    let out = caprl()
        .args(["train", "--resume"])
        .args(&more)
        .output()
        .expect("caprl runs");
    assert!(out.status.success(), "{}", text(&out));
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(log.contains("discriminator restored"), "{log}");
    assert!(!log.contains("pre-trained on"), "{log}");
    assert!(steps(&run, "rl").len() > rl.len());

    let out = eval_test_split(&run.join("best-rl"), &["--beam", "2", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for key in [
        "r1_t2i",
        "r5_t2i",
        "r10_t2i",
        "r1_i2t",
        "r5_i2t",
        "r10_i2t",
        "self_bleu",
    ] {
        let v = json["metrics"][key].as_f64().unwrap_or(-1.0);
        assert!((0.0..=100.0).contains(&v), "{key}: {json}");
    }
    // 16 test images: R@10 is at least R@1.
    assert!(json["metrics"]["r10_t2i"].as_f64() >= json["metrics"]["r1_t2i"].as_f64());
}

#[test]
fn wtf_rl_over_nats_scores_with_the_snapshots_discriminator_like_in_process() {
    // Reward workers in their own processes get `D` only through the policy snapshot; in sync
    // mode the run must match the in-process one bit for bit.
    let tmp = tempfile::tempdir().unwrap();
    let data = synth(tmp.path());
    let enc = tmp.path().join("clip.safetensors");
    clip_train(&data, &enc, "1");
    let inproc = tmp.path().join("inproc");
    let a = train_rl(&wtf_sets(&data, &inproc, &enc, &enc, "wtf-rl"), &inproc);
    let nats = tmp.path().join("nats");
    let args: Vec<String> = wtf_sets(&data, &nats, &enc, &enc, "wtf-rl")
        .into_iter()
        .filter(|a| a != "-q")
        .collect();
    let out = caprl()
        .args(["local", "--actors", "2", "--reward-workers", "2"])
        .args(&args)
        .output()
        .expect("caprl runs");
    assert!(out.status.success(), "caprl local: {}", text(&out));
    assert!(
        final_weights(&inproc) == final_weights(&nats),
        "weights differ"
    );
    let b = steps(&nats, "rl");
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x["rewards"], y["rewards"]);
    }
}

#[test]
fn scst_with_clip_s_and_disc_rewards_trains_the_discriminator_on_samples() {
    // Paper 004's comparison rows: SCST (greedy baseline) on CLIP-S plus the discriminator.
    let tmp = tempfile::tempdir().unwrap();
    let data = synth(tmp.path());
    let enc = tmp.path().join("clip.safetensors");
    clip_train(&data, &enc, "1");
    let run = tmp.path().join("scst");
    let mut args = wtf_sets(&data, &run, &enc, &enc, "scst");
    args.extend([
        "--set".into(),
        "reward.spec=\"clip-s=0.94,disc=0.06\"".into(),
    ]);
    let rl = train_rl(&args, &run);
    for s in &rl {
        let clip_s = s["rewards"]["clip-s"].as_f64().unwrap();
        assert!((0.0..=2.5).contains(&clip_s), "{s}");
        assert!(
            s["losses"]["disc_acc"].as_f64().is_some_and(f64::is_finite),
            "{s}"
        );
    }
}

#[test]
fn wtf_without_a_clip_reward_or_encoder_fails_before_training() {
    let tmp = tempfile::tempdir().unwrap();
    let data = synth(tmp.path());
    let run = tmp.path().join("run");
    let refused = |extra: &[&str]| -> String {
        let out = caprl()
            .arg("train")
            .args(sets(&data, &run, 1, extra))
            .output()
            .expect("caprl runs");
        assert!(!out.status.success(), "{}", text(&out));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = refused(&["train.objective=\"wtf\""]);
    assert!(
        err.contains("reward.spec") && err.contains("clip=0.94,disc=0.06"),
        "{err}"
    );
    let err = refused(&["reward.spec=\"clip-s=1\""]);
    assert!(
        err.contains("clip.reward") && err.contains("caprl clip train"),
        "{err}"
    );
    let missing = tmp.path().join("nope.safetensors");
    let err = refused(&[
        "reward.spec=\"clip-s=1\"",
        &format!("clip.reward={:?}", missing.display().to_string()),
    ]);
    assert!(err.contains("nope.safetensors"), "{err}");
    assert!(!run.join("run.jsonl").exists() || steps(&run, "rl").is_empty());
}

/// WTF and WTF-RL train the Transformer captioner too (its snapshot carries the discriminator
/// the same way).
#[test]
fn wtf_and_wtf_rl_train_a_transformer_captioner() {
    let tmp = tempfile::tempdir().unwrap();
    let data = synth(tmp.path());
    let enc = tmp.path().join("clip-reward.safetensors");
    clip_train(&data, &enc, "1");
    for objective in ["wtf", "wtf-rl"] {
        let run = tmp.path().join(objective);
        let mut args = wtf_sets(&data, &run, &enc, &enc, objective);
        for key in support::TINY_TRANSFORMER {
            args.extend(["--set".into(), key.into()]);
        }
        let rl = train_rl(&args, &run);
        for s in &rl {
            let total = s["losses"]["total"].as_f64();
            assert!(total.is_some_and(f64::is_finite), "{objective}: {s}");
        }
    }
}
