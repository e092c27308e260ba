//! The `[optim]` section ([`OptimConfig`]): its keys, defaults and rules ([`OptimConfig::CHECKS`],
//! the one rule of each key), and what the optimizer makes of them: AdamW's settings
//! ([`OptimConfig::adam`]) and a phase's learning-rate schedule ([`OptimConfig::schedule`]).

use serde::{Deserialize, Serialize};

use super::{AdamWParams, Schedule};
use caprl_wire::check::{fails, outside, toml_int, Check, TOML_INT};

/// `[optim]`: AdamW and the learning-rate schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OptimConfig {
    /// XE learning rate; > 0.
    pub lr: f64,
    /// RL learning rate; > 0.
    pub rl_lr: f64,
    /// Learning rate of the value head (mc-pg baseline, actor-critic critic); > 0.
    pub value_lr: f64,
    /// >= 0.
    pub weight_decay: f64,
    /// [0, 1).
    pub beta1: f64,
    /// [0, 1).
    pub beta2: f64,
    /// > 0.
    pub eps: f64,
    /// Global-norm clip; 0 = off.
    pub grad_clip: f64,
    pub schedule: ScheduleKind,
    /// Step schedule: epochs between decays; >= 1.
    pub decay_every: u32,
    /// Step schedule factor; (0, 1].
    pub decay_rate: f64,
    /// Warmup steps of the cosine and noam schedules.
    pub warmup_steps: u64,
    /// Noam schedule: the factor of `d_model^(−1/2) · min(s^(−1/2), s · warmup^(−3/2))`; > 0.
    pub noam_factor: f64,
}

impl Default for OptimConfig {
    fn default() -> Self {
        OptimConfig {
            lr: 5e-4,
            rl_lr: 1e-4,
            value_lr: 1e-3,
            weight_decay: 0.0,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            grad_clip: 2.0,
            schedule: ScheduleKind::Step,
            decay_every: 3,
            decay_rate: 0.8,
            warmup_steps: 0,
            noam_factor: 1.0,
        }
    }
}

/// Which learning-rate schedule `[optim]` names ([`Schedule`] is the schedule with its numbers,
/// [`OptimConfig::schedule`] makes one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ScheduleKind {
    Constant,
    Step,
    Cosine,
    /// The Transformer's warmup then inverse square root, scaled by `model.d_model`
    /// (`optim.lr` is not used): the XE phase; RL phases run at a constant `optim.rl_lr`.
    Noam,
}

/// A finite number > 0.
fn positive(x: f64) -> bool {
    x > 0.0 && x.is_finite()
}

/// A finite number >= 0.
fn non_negative(x: f64) -> bool {
    x >= 0.0 && x.is_finite()
}

impl OptimConfig {
    #[rustfmt::skip]
    pub const CHECKS: &'static [Check<OptimConfig>] = &[
        Check { key: "optim.lr", allowed: "a finite number > 0", violation: |o| fails(o.lr, positive) },
        Check { key: "optim.rl_lr", allowed: "a finite number > 0", violation: |o| fails(o.rl_lr, positive) },
        Check { key: "optim.value_lr", allowed: "a finite number > 0", violation: |o| fails(o.value_lr, positive) },
        Check { key: "optim.weight_decay", allowed: "a finite number >= 0", violation: |o| fails(o.weight_decay, non_negative) },
        Check { key: "optim.beta1", allowed: "[0, 1)", violation: |o| fails(o.beta1, |x| (0.0..1.0).contains(&x)) },
        Check { key: "optim.beta2", allowed: "[0, 1)", violation: |o| fails(o.beta2, |x| (0.0..1.0).contains(&x)) },
        Check { key: "optim.eps", allowed: "a finite number > 0", violation: |o| fails(o.eps, positive) },
        Check { key: "optim.grad_clip", allowed: "a finite number >= 0 (0 = off)", violation: |o| fails(o.grad_clip, non_negative) },
        Check { key: "optim.decay_every", allowed: ">= 1", violation: |o| outside(o.decay_every, 1..) },
        Check { key: "optim.decay_rate", allowed: "(0, 1]", violation: |o| fails(o.decay_rate, |x| x > 0.0 && x <= 1.0) },
        Check { key: "optim.warmup_steps", allowed: TOML_INT, violation: |o| toml_int(o.warmup_steps) },
        Check {
            key: "optim.warmup_steps",
            allowed: ">= 1 when schedule = \"noam\" (its peak is at the end of the warmup)",
            violation: |o| (o.schedule == ScheduleKind::Noam).then(|| outside(o.warmup_steps, 1..)).flatten(),
        },
        Check { key: "optim.noam_factor", allowed: "a finite number > 0", violation: |o| fails(o.noam_factor, positive) },
    ];

    /// AdamW's settings.
    pub fn adam(&self) -> AdamWParams {
        AdamWParams {
            beta1: self.beta1,
            beta2: self.beta2,
            eps: self.eps,
            weight_decay: self.weight_decay,
        }
    }

    /// The schedule of a phase at learning rate `lr` (`optim.lr` for XE, `optim.rl_lr` for RL)
    /// over `total_steps` optimizer steps; noam scales by the model's width `d_model` and runs
    /// only in XE (`xe`): an RL phase under noam keeps `lr` constant.
    pub fn schedule(&self, lr: f64, xe: bool, total_steps: u64, d_model: u64) -> Schedule {
        match self.schedule {
            ScheduleKind::Constant => Schedule::Constant { lr },
            ScheduleKind::Step => Schedule::Step {
                lr,
                every: self.decay_every as u64,
                rate: self.decay_rate,
            },
            ScheduleKind::Cosine => Schedule::Cosine {
                lr,
                warmup: self.warmup_steps,
                total: total_steps,
            },
            ScheduleKind::Noam if xe => Schedule::Noam {
                factor: self.noam_factor,
                d_model,
                warmup: self.warmup_steps,
            },
            ScheduleKind::Noam => Schedule::Constant { lr },
        }
    }
}
