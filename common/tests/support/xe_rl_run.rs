//! A run log written by the tests themselves: 10 XE steps then 10 SCST steps,
//! a val evaluation with sample captions every 10 steps.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use caprl_common::telemetry::{EvalRecord, RunLog, SampleCaption, SamplesRecord, StepRecord};
use serde_json::json;

/// Sample caption of image `42` at the first (XE) and at the second (RL) evaluation.
pub const XE_CAPTION: &str = "a red cube";
pub const RL_CAPTION: &str = "a large red cube beside a blue sphere";

/// A run with an XE phase then SCST, evaluations and sample captions, in `dir`.
pub fn xe_then_rl_run(dir: &Path) -> PathBuf {
    let run = dir.join("run_xe_scst");
    let config =
        "seed = 11\nrun_dir = \"runs/run_xe_scst\"\n[train]\nobjective = \"scst\"\nxe_epochs = 1\n";
    let mut log = RunLog::create(&run, config, json!({})).expect("create");
    for n in 1..=20u64 {
        let phase = if n <= 10 { "xe" } else { "scst" };
        let mut losses = BTreeMap::new();
        losses.insert("total".to_string(), 3.0 / n as f64 + 0.1 * (n % 3) as f64);
        let mut rewards = BTreeMap::new();
        if n > 10 {
            rewards.insert(
                "cider".to_string(),
                0.6 + 0.02 * n as f64 + 0.05 * (n % 2) as f64,
            );
            rewards.insert("total".to_string(), 0.6 + 0.02 * n as f64);
        }
        log.log_step(&StepRecord {
            step: n,
            phase: phase.into(),
            policy_version: n,
            losses,
            rewards,
            grad_norm: 1.0,
            lr: 1e-4,
            lag: 0.0,
            ..StepRecord::default()
        })
        .expect("step");
        if n % 10 == 0 {
            let mut metrics = BTreeMap::new();
            metrics.insert("cider_d".to_string(), 0.5 + 0.03 * n as f64);
            log.log_eval(&EvalRecord {
                step: n,
                epoch: n / 10,
                split: "val".into(),
                metrics,
                unix_ms: 0,
            })
            .expect("eval");
            let caption = if n == 10 { XE_CAPTION } else { RL_CAPTION };
            log.log_samples(&SamplesRecord {
                step: n,
                epoch: n / 10,
                phase: phase.into(),
                images: vec![SampleCaption {
                    image: "42".into(),
                    greedy: caption.into(),
                    beam: caption.into(),
                    refs: vec!["a big red cube next to a blue ball".into()],
                }],
                unix_ms: 0,
            })
            .expect("samples");
        }
    }
    run
}
