//! caprl-learner: turns scored trajectories into gradient steps.
//!
//! - [`run`]: the training run (XE phase, RL phase over the bus, evaluation, best checkpoints,
//!   the run directory) and opening a trained checkpoint.
//! - [`objective::Objective`]: every per-objective decision (decodes, value head, async mode,
//!   targets) in one place; [`targets`]: the per-step policy-gradient targets objectives build.
//! - [`trainer::Trainer`]: weights, optimizer, data cursor; XE and policy-gradient steps; checkpoints.
//! - Objectives, each under [`objective`] in the file named after it with its formula: `xe`,
//!   `scst`, `sle`, `mc_pg`, `actor_critic`, `wtf` (WTF and WTF-RL), reduced to the shared
//!   policy-gradient loss in [`pg`] (with the entropy and KL-to-XE regularisers); the value head
//!   of the last two is in [`critic`].
//! - Async mode's off-policy corrections (truncated and masked IS): [`off_policy`]; PPO's
//!   clipped surrogate in [`pg`], GSPO's per-caption one in [`gspo`]; DAPO's dynamic
//!   sampling in [`dynamic_sampling`].
//! - [`disc_online`]: paper 004's discriminator, pre-trained and then trained every iteration.
//! - [`checkpoint`]: atomic, checksummed checkpoint directories.
//! - [`eval`]: caption a split and compute every metric; [`samples`]: the captions of fixed
//!   validation images that the run log records at every evaluation.

pub mod advantage;
pub mod checkpoint;
pub mod critic;
pub mod disc_online;
pub mod driver;
pub mod dynamic_sampling;
pub mod error;
pub mod eval;
pub mod gspo;
pub mod kl;
pub mod objective;
pub mod off_policy;
pub mod pg;
pub mod run;
pub mod samples;
pub mod targets;
pub mod trainer;

pub use error::LearnerError;
pub use trainer::{PgTargets, Phase, StepOptions, StepStats, TrainState, Trainer};
