//! The data set and step settings of the trainer tests (`trainer_*.rs`).

use std::path::Path;

use caprl_data::{synth_dataset, Dataset, SynthConfig};
use caprl_learner::StepOptions;

/// A synthetic data set of `train` training images (40 val, 8 test) under `dir`.
pub fn tiny_data(dir: &Path, train: usize) -> Dataset {
    let config = SynthConfig {
        seed: 7,
        train,
        val: 40,
        test: 8,
        progress: false,
    };
    synth_dataset(&dir.join("synth"), &config).unwrap()
}

/// Plain steps at `lr`: gradients clipped at 2, no smoothing, entropy or KL terms.
pub fn opts(lr: f64) -> StepOptions {
    StepOptions {
        lr,
        grad_clip: 2.0,
        label_smoothing: 0.0,
        entropy_coef: 0.0,
        kl_coef: 0.0,
        kl_estimator: caprl_common::config::KlEstimator::Full,
        value_lr: 1e-3,
    }
}
