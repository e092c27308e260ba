//! The Transformer captioner in every role, through the CLI on the tiny synthetic set (with its
//! 4 region features): `caprl local` over NATS ends with the in-process weights, a resumed run
//! with the uninterrupted run's, every RL objective trains from its XE checkpoint, and `eval`
//! and `caption` read its checkpoints.

mod support;

use std::path::Path;
use std::process::Output;

use support::{
    caprl, checkpoint_dirs, eval_test_split, final_weights, resume_train, sets, steps, synth, text,
    TINY_TRANSFORMER,
};

fn transformer_sets(data: &Path, run: &Path, rl_epochs: u32, extra: &[&str]) -> Vec<String> {
    let keys: Vec<&str> = TINY_TRANSFORMER.iter().chain(extra).copied().collect();
    sets(data, run, rl_epochs, &keys)
}

/// Runs `caprl caption <flags> --checkpoint <checkpoint> --features <features>` to the end.
fn caption(checkpoint: &Path, features: &Path, flags: &[&str]) -> Output {
    caprl()
        .arg("caption")
        .args(flags)
        .arg("--checkpoint")
        .arg(checkpoint)
        .arg("--features")
        .arg(features)
        .output()
        .expect("caprl runs")
}

#[test]
fn transformer_over_nats_gives_the_in_process_weights_and_resumes_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    let data = synth(dir.path());
    let extra = ["checkpoint.every_steps=2"];
    let inproc = dir.path().join("inproc");
    let args = transformer_sets(&data, &inproc, 2, &extra);
    let out = caprl().arg("train").args(&args).arg("-q").output().unwrap();
    assert!(out.status.success(), "caprl train: {}", text(&out));
    let want = final_weights(&inproc);

    let nats = dir.path().join("nats");
    let out = caprl()
        .args(["local", "--actors", "2", "--reward-workers", "2"])
        .args(transformer_sets(&data, &nats, 2, &extra))
        .output()
        .unwrap();
    assert!(out.status.success(), "caprl local: {}", text(&out));
    assert!(
        final_weights(&nats) == want,
        "weights differ between the in-process bus and NATS"
    );

    // Back to an early checkpoint, as after a crash: the resumed run ends where the whole did.
    let dirs = checkpoint_dirs(&inproc.join("checkpoints"));
    assert!(dirs.len() >= 3, "need three checkpoints, have {dirs:?}");
    for later in &dirs[1..] {
        std::fs::remove_dir_all(later).unwrap();
    }
    let log = resume_train(&args);
    assert!(
        log.contains(&format!("resuming from {}", dirs[0].display())),
        "{log}"
    );
    assert!(
        final_weights(&inproc) == want,
        "the resumed run ended with other weights"
    );
}

#[test]
fn transformer_trains_with_every_rl_objective_and_eval_and_caption_read_it() {
    let tmp = tempfile::tempdir().unwrap();
    let data = synth(tmp.path());
    let xe = tmp.path().join("xe");
    let out = caprl()
        .arg("train")
        .args(transformer_sets(&data, &xe, 0, &[]))
        .args(["--objective", "xe", "-q"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(!steps(&xe, "xe").is_empty());
    let best_xe = xe.join("best-xe");

    for (objective, extra) in [
        ("scst", vec!["train.baseline=\"mean\""]),
        ("sle", vec![]),
        ("mc-pg", vec!["train.samples=1", "train.mc_rollouts=2"]),
        ("actor-critic", vec!["train.kl_coef=0.1"]),
    ] {
        let run = tmp.path().join(objective);
        let out = caprl()
            .arg("train")
            .args(transformer_sets(&data, &run, 1, &extra))
            .args(["-q", "--objective", objective, "--start-from"])
            .arg(&best_xe)
            .output()
            .unwrap();
        assert!(out.status.success(), "{objective}: {}", text(&out));
        let rl = steps(&run, "rl");
        assert!(!rl.is_empty(), "{objective}: no RL step");
        for s in &rl {
            let loss = s["losses"]["total"].as_f64();
            assert!(loss.is_some_and(f64::is_finite), "{objective}: {s}");
        }
    }

    let out = eval_test_split(
        &tmp.path().join("actor-critic").join("best-rl"),
        &["--beam", "2", "--json", "--lookahead", "0.5"],
    );
    assert!(out.status.success(), "{}", text(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(json["metrics"]["cider_d"]
        .as_f64()
        .is_some_and(f64::is_finite));

    let features = data.join("features.safetensors");
    let out = caption(&best_xe, &features, &[]);
    assert!(out.status.success(), "{}", text(&out));
    let captions = String::from_utf8_lossy(&out.stdout);
    assert!(captions.lines().count() >= 16, "{captions}");

    // The decoding options through both commands: flags, and `--set decode.*` on top of the
    // checkpoint's config (any other key is refused).
    let out = caption(
        &best_xe,
        &features,
        &["--beam", "4", "--beam-groups", "2", "--remove-bad-endings"],
    );
    assert!(out.status.success(), "{}", text(&out));
    let out = eval_test_split(
        &best_xe,
        &[
            "--json",
            "--set",
            "decode.beam=4",
            "--set",
            "decode.beam_groups=2",
            "--set",
            "decode.top_p=0.9",
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
    let out = eval_test_split(&best_xe, &["--set", "model.hidden=8"]);
    assert!(!out.status.success());
    assert!(text(&out).contains("only decode.* keys"), "{}", text(&out));
    let out = caption(&best_xe, &features, &["--beam", "3", "--beam-groups", "2"]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("--beam 3 is not a multiple"),
        "{}",
        text(&out)
    );
}
