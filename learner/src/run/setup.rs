//! What the run config fixes for training: the learning-rate schedule of a phase, from the
//! `[optim]` section's own rule (`OptimConfig::schedule`) with the phase's numbers. (AdamW's
//! settings are `OptimConfig::adam`; the captioner's shape is `CaptionerConfig::for_dataset`.)

use crate::trainer::Phase;
use caprl_common::config::RunConfig;
use caprl_model::optim::Schedule;

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
