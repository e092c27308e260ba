//! `--device` and `--dtype` on the commands that compute: a CUDA device in a CPU build is a clear
//! error before any work, a bf16 run trains and writes f32 checkpoints that an f32 eval reads, and
//! `caprl bench model` prints its rows.

mod support;

use support::{caprl, checkpoint_dirs, eval_test_split, sets, synth, text};

#[test]
#[cfg(not(feature = "cuda"))]
fn cuda_device_in_a_cpu_build_says_to_rebuild_with_the_feature() {
    let dir = tempfile::tempdir().unwrap();
    let ck = dir.path().join("no-checkpoint");
    let runs: Vec<Vec<String>> = vec![
        vec!["train".into(), "--device".into(), "cuda:0".into()],
        vec!["run".into(), "--device".into(), "cuda:1".into()],
        vec!["learner".into(), "--device".into(), "cuda:0".into()],
        vec!["actor".into(), "--device".into(), "cuda".into()],
        vec!["train".into(), "--set".into(), "device=\"cuda:0\"".into()],
        vec![
            "eval".into(),
            "--device".into(),
            "cuda:0".into(),
            "--checkpoint".into(),
            ck.display().to_string(),
        ],
        vec![
            "caption".into(),
            "--device".into(),
            "cuda:0".into(),
            "--checkpoint".into(),
            ck.display().to_string(),
            "--features".into(),
            "f.safetensors".into(),
        ],
        vec![
            "bench".into(),
            "model".into(),
            "--device".into(),
            "cuda:0".into(),
        ],
    ];
    for args in runs {
        let out = caprl()
            .current_dir(dir.path())
            .args(&args)
            .arg("-q")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded: {}", text(&out));
        assert!(
            err.contains("--features cuda"),
            "{args:?}: the error does not say to rebuild with --features cuda: {}",
            text(&out)
        );
    }
    // Nothing was generated before the device was refused.
    assert!(!dir.path().join("data").exists());
    assert!(!dir.path().join("runs").exists());
}

#[test]
fn unknown_device_and_dtype_are_refused_with_the_allowed_values() {
    let out = caprl()
        .args(["train", "--device", "gpu0", "-q"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("cuda:N"), "{}", text(&out));

    let out = caprl()
        .args(["train", "--dtype", "f64", "-q"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("bf16") && err.contains("f16"),
        "{}",
        text(&out)
    );

    let out = caprl()
        .args(["bench", "model", "--dtype", "f8"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("f32, bf16 or f16"), "{}", text(&out));
}

#[test]
fn a_bf16_run_writes_f32_checkpoints_that_an_f32_eval_reads() {
    let dir = tempfile::tempdir().unwrap();
    let data = synth(dir.path());
    let run = dir.path().join("run");
    let out = caprl()
        .arg("train")
        .args(["--dtype", "bf16", "--device", "cpu"])
        .args(sets(&data, &run, 0, &[]))
        .arg("-q")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let config = std::fs::read_to_string(run.join("config.toml")).unwrap();
    assert!(config.contains("dtype = \"bf16\""), "{config}");

    let newest = checkpoint_dirs(&run.join("checkpoints"))
        .pop()
        .expect("a checkpoint");
    let weights =
        candle_core::safetensors::load(newest.join("model.safetensors"), &candle_core::Device::Cpu)
            .unwrap();
    assert!(!weights.is_empty());
    for (name, t) in &weights {
        assert_eq!(t.dtype(), candle_core::DType::F32, "{name} is not f32");
    }
    let out = eval_test_split(&newest, &["--dtype", "f32", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(report.to_string().contains("cider_d"), "{report}");
}

#[test]
fn bench_model_prints_one_row_per_dtype_batch_and_hidden() {
    let out = caprl()
        .args([
            "bench",
            "model",
            "--device",
            "cpu",
            "--dtype",
            "f32,bf16",
            "--batch",
            "2,3",
            "--hidden",
            "8",
            "--iters",
            "1",
            "--vocab",
            "16",
            "--max-len",
            "3",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rows.len(), 4, "{rows:?}");
    for r in &rows {
        for key in [
            "xe_step_ms",
            "scst_step_ms",
            "greedy_tok_s",
            "sample_tok_s",
            "beam_tok_s",
            "snapshot_ms",
            "snapshot_mb",
        ] {
            let v = r[key].as_f64().unwrap_or(f64::NAN);
            assert!(v.is_finite() && v > 0.0, "{key} = {v} in {r}");
        }
    }
    let dtypes: Vec<&str> = rows.iter().map(|r| r["dtype"].as_str().unwrap()).collect();
    assert_eq!(dtypes, ["f32", "bf16", "f32", "bf16"]);
}
