//! A tiny `caprl train` (XE then SCST) as a researcher looks at it: the run log
//! holds the sample captions of every evaluation, `RUN_DIR/tb/` holds TensorBoard
//! event files, and `caprl report` shows the captions and the XE→RL boundary.

mod support;

use caprl_common::telemetry::read_run_log;
use support::{caprl, sets, synth, text};

#[test]
fn a_training_run_logs_sample_captions_and_tensorboard_events_and_reports_them() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = synth(tmp.path());
    let run = tmp.path().join("run");
    let out = caprl()
        .arg("train")
        .args(sets(&data, &run, 1, &["train.sample_images=3"]))
        .arg("-q")
        .output()
        .expect("caprl runs");
    assert!(out.status.success(), "{}", text(&out));

    let log = read_run_log(&run.join("run.jsonl")).expect("run log");
    assert_eq!(log.evals.len(), 2, "one val eval per epoch");
    assert_eq!(log.samples.len(), 2, "sample captions at every eval");
    for (samples, eval) in log.samples.iter().zip(&log.evals) {
        assert_eq!(samples.step, eval.step);
        assert_eq!(samples.images.len(), 3, "train.sample_images=3");
        for img in &samples.images {
            assert_eq!(img.refs.len(), 5, "the synthetic task's five references");
            assert!(!img.greedy.is_empty() && !img.beam.is_empty(), "{img:?}");
        }
    }
    assert_eq!(log.samples[0].phase, "xe");
    assert_eq!(log.samples[1].phase, "scst");
    let ids = |i: usize| -> Vec<&str> {
        log.samples[i]
            .images
            .iter()
            .map(|s| s.image.as_str())
            .collect()
    };
    assert_eq!(ids(0), ids(1), "the same images at every evaluation");

    let events: Vec<_> = std::fs::read_dir(run.join("tb"))
        .expect("RUN_DIR/tb")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().contains("tfevents"))
        .collect();
    assert_eq!(events.len(), 1, "one event file");
    let bytes = std::fs::read(events[0].path()).expect("events");
    for tag in [
        "loss/total",
        "reward/cider",
        "eval_val/cider_d",
        "samples/captions",
    ] {
        assert!(
            bytes.windows(tag.len()).any(|w| w == tag.as_bytes()),
            "{tag} in the event file"
        );
    }

    let html = tmp.path().join("report.html");
    let out = caprl()
        .arg("report")
        .arg(&run)
        .arg("--out")
        .arg(&html)
        .output()
        .expect("caprl runs");
    assert!(out.status.success(), "{}", text(&out));
    let page = std::fs::read_to_string(&html).expect("report");
    assert!(page.contains("Sample captions over training"));
    let first = &log.samples[1].images[0];
    assert!(
        page.contains(&format!("<td>scst</td><td>{}</td>", first.greedy)),
        "the RL caption of the first image is on the page"
    );
    assert!(page.contains("XE | RL"), "the XE→RL boundary is marked");

    // Switched off, no event files.
    let quiet = tmp.path().join("quiet");
    let out = caprl()
        .arg("train")
        .args(sets(
            &data,
            &quiet,
            0,
            &["train.tensorboard=false", "train.sample_images=0"],
        ))
        .args(["--objective", "xe", "-q"])
        .output()
        .expect("caprl runs");
    assert!(out.status.success(), "{}", text(&out));
    assert!(!quiet.join("tb").exists());
    let log = read_run_log(&quiet.join("run.jsonl")).expect("run log");
    assert!(log.samples.is_empty() && !log.evals.is_empty());
}
