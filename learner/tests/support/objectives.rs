//! The tiny data set, model and step settings of the objective tests (`objectives*.rs`).
#![allow(dead_code)]

use std::path::Path;

use caprl_wire::Sampling;

use caprl_data::{synth_dataset, Dataset, SynthConfig};
use caprl_learner::{StepOptions, StepStats, Trainer};
use caprl_model::model::{
    batch_tokens, inputs_for_rows, CaprlRng, Captioner, CaptionerConfig, Device, ModelKind,
    SampleOptions,
};
use caprl_model::optim::AdamWParams;

pub fn tiny_data(dir: &Path) -> Dataset {
    let out = dir.join("synth");
    synth_dataset(
        &out,
        &SynthConfig {
            seed: 5,
            train: 16,
            val: 4,
            test: 4,
            progress: false,
        },
    )
    .unwrap()
}

pub fn tiny_model(data: &Dataset) -> CaptionerConfig {
    let mut cfg = CaptionerConfig::new(ModelKind::Fc, data.vocab.len(), data.fc_dim(), None);
    cfg.model.embed = 16;
    cfg.model.hidden = 24;
    cfg.model.dropout = 0.0;
    cfg
}

/// A tiny trainer for `data` with default AdamW, the same at every call with one `seed`.
pub fn tiny_trainer(data: &Dataset, seed: u64) -> Trainer {
    tiny_trainer_with(data, seed, AdamWParams::default())
}

/// [`tiny_trainer`] with the optimizer settings `adam`.
pub fn tiny_trainer_with(data: &Dataset, seed: u64, adam: AdamWParams) -> Trainer {
    let model = Captioner::new(&tiny_model(data), &Device::Cpu, seed).unwrap();
    Trainer::new(model, adam, seed).unwrap()
}

/// The value of the loss term `name` (`"kl"`, `"value"`, ...) in a step's statistics.
pub fn loss_part(stats: &StepStats, name: &str) -> f32 {
    stats.parts.iter().find(|(n, _)| *n == name).unwrap().1
}

pub fn opts(lr: f64) -> StepOptions {
    StepOptions {
        lr,
        grad_clip: 0.0,
        label_smoothing: 0.0,
        entropy_coef: 0.0,
        kl_coef: 0.0,
        kl_estimator: caprl_common::config::KlEstimator::Full,
        value_lr: 1e-2,
    }
}

/// Two sampled captions of training image 0 and two of image 1.
pub fn samples(model: &Captioner, data: &Dataset) -> (Vec<usize>, Vec<Vec<u32>>) {
    let rows = vec![data.train.items[0].row, data.train.items[1].row];
    let x = inputs_for_rows(data, &rows, model.config(), model.device()).unwrap();
    let d = model
        .sample(
            &x,
            &SampleOptions {
                n_per_input: 2,
                sampling: Sampling::default(),
                bad_endings: caprl_model::model::BadEndings::none(),
                max_len: 8,
            },
            &mut CaprlRng::new(3),
        )
        .unwrap();
    let seq_rows = vec![rows[0], rows[0], rows[1], rows[1]];
    (seq_rows, d.tokens)
}

/// `Σₜ log p(wₜ)` of each sequence under `model`.
pub fn seq_logp(model: &Captioner, data: &Dataset, rows: &[usize], seqs: &[Vec<u32>]) -> Vec<f32> {
    let x = inputs_for_rows(data, rows, model.config(), model.device()).unwrap();
    let toks = batch_tokens(seqs, model.device()).unwrap();
    let (logp, _) = model.token_logprobs(&x, &toks, None).unwrap();
    logp.sum(1).unwrap().to_vec1().unwrap()
}
