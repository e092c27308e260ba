//! What the run config fixes for training: the learning-rate schedule of a phase and AdamW's
//! settings. (The captioner's shape is the model's own: `CaptionerConfig::for_dataset`.)

use crate::trainer::Phase;
use caprl_common::config::{self, RunConfig};
use caprl_model::optim::{AdamWParams, Schedule};

/// The learning-rate schedule of one phase of `epochs` epochs over `n_items` images.
pub fn schedule(cfg: &RunConfig, phase: Phase, epochs: u64, n_items: usize) -> Schedule {
    let lr = match phase {
        Phase::Xe => cfg.optim.lr,
        Phase::Rl => cfg.optim.rl_lr,
    };
    match cfg.optim.schedule {
        config::ScheduleKind::Constant => Schedule::Constant { lr },
        config::ScheduleKind::Step => Schedule::Step {
            lr,
            every: cfg.optim.decay_every as u64,
            rate: cfg.optim.decay_rate,
        },
        config::ScheduleKind::Cosine => Schedule::Cosine {
            lr,
            warmup: cfg.optim.warmup_steps,
            total: epochs * n_items.div_ceil(cfg.train.batch_size.max(1) as usize) as u64,
        },
        // The width it scales by is the Transformer's; a recurrent model's is its hidden size.
        config::ScheduleKind::Noam if phase == Phase::Xe => Schedule::Noam {
            factor: cfg.optim.noam_factor,
            d_model: cfg.model.state_dim() as u64,
            warmup: cfg.optim.warmup_steps,
        },
        config::ScheduleKind::Noam => Schedule::Constant { lr },
    }
}

/// AdamW's settings from `[optim]`.
pub fn adam_params(cfg: &RunConfig) -> AdamWParams {
    AdamWParams {
        beta1: cfg.optim.beta1,
        beta2: cfg.optim.beta2,
        eps: cfg.optim.eps,
        weight_decay: cfg.optim.weight_decay,
    }
}
