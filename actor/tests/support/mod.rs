//! A tiny synthetic data set and a matching small captioner config for the actor's tests.

use std::path::Path;

use caprl_common::data::{synth, Dataset, SynthConfig};
use caprl_common::model::{CaptionerConfig, ModelKind};
use caprl_common::wire::{PolicyVersion, RolloutTask, TaskId};

/// Writes an 8-image synthetic data set under `dir` and opens it, with an FC captioner config
/// small enough to decode in milliseconds.
pub fn tiny(dir: &Path) -> (Dataset, CaptionerConfig) {
    let dir = dir.join("synth");
    synth(
        &dir,
        &SynthConfig {
            seed: 2,
            train: 8,
            val: 2,
            test: 2,
            progress: false,
        },
    )
    .unwrap();
    let data = Dataset::open(&dir).unwrap();
    let mut cfg = CaptionerConfig::new(ModelKind::Fc, data.vocab.len(), data.fc_dim(), None);
    cfg.embed = 8;
    cfg.hidden = 16;
    cfg.max_len = 6;
    (data, cfg)
}

/// Task `id` for policy v0: two samples of each of `rows`, nothing else.
pub fn task(id: u64, rows: Vec<u32>) -> RolloutTask {
    RolloutTask {
        task_id: TaskId(id),
        policy_version: PolicyVersion(0),
        min_version: PolicyVersion(0),
        image_rows: rows,
        samples: 2,
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
        remove_bad_endings: false,
        greedy: false,
        beam: 0,
        beam_groups: 1,
        diversity_lambda: 0.0,
        seed: 99,
        with_gt: false,
        mc_rollouts: 0,
    }
}
