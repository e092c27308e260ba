//! What the run config fixes for training: the rules of the keys the run reads (`[train]`'s
//! batch, samples, label smoothing, evaluation and step limit, `[checkpoint]`, the
//! discriminator's learning rate), and the learning-rate schedule of a phase, from the
//! `[optim]` section's own rule (`OptimConfig::schedule`) with the phase's numbers. (AdamW's
//! settings are `OptimConfig::adam`; the captioner's shape is `CaptionerConfig::for_dataset`.)

use crate::trainer::Phase;
use caprl_common::config::RunConfig;
use caprl_model::optim::Schedule;
use caprl_wire::check::{fails, outside, toml_int, Check};

#[rustfmt::skip]
pub(crate) const CHECKS: &[Check<RunConfig>] = &[
    Check { key: "train.batch_size", allowed: ">= 1", violation: |c| outside(c.train.batch_size, 1..) },
    Check { key: "train.samples", allowed: ">= 1", violation: |c| outside(c.train.samples, 1..) },
    Check { key: "train.label_smoothing", allowed: "[0, 1)", violation: |c| fails(c.train.label_smoothing, |x| (0.0..1.0).contains(&x)) },
    Check { key: "train.eval_every", allowed: ">= 1", violation: |c| outside(c.train.eval_every, 1..) },
    Check { key: "train.sample_images", allowed: "0..=100", violation: |c| outside(c.train.sample_images, 0..=100) },
    Check { key: "train.max_steps", allowed: caprl_wire::check::TOML_INT, violation: |c| toml_int(c.train.max_steps) },
    Check { key: "checkpoint.keep", allowed: ">= 1", violation: |c| outside(c.checkpoint.keep, 1..) },
    Check { key: "checkpoint.every_steps", allowed: "1..=9223372036854775807", violation: |c| outside(c.checkpoint.every_steps, 1..=i64::MAX as u64) },
    Check { key: "clip.disc_lr", allowed: "a finite number > 0", violation: |c| fails(c.clip.disc_lr, |x| x > 0.0 && x.is_finite()) },
];

/// The learning-rate schedule of one phase of `epochs` epochs over `n_items` images.
pub fn schedule(cfg: &RunConfig, phase: Phase, epochs: u64, n_items: usize) -> Schedule {
    let lr = match phase {
        Phase::Xe => cfg.optim.lr,
        Phase::Rl => cfg.optim.rl_lr,
    };
    let steps = epochs * n_items.div_ceil(cfg.train.batch_size.max(1) as usize) as u64;
    // The width noam scales by is the Transformer's; a recurrent model's is its hidden size.
    let d_model = cfg.model.state_dim() as u64;
    cfg.optim.schedule(lr, phase == Phase::Xe, steps, d_model)
}
