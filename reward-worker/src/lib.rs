//! caprl-reward-worker: scores rollouts with the configured reward spec.
//!
//! [`Rewarder`] turns a [`caprl_common::wire::Rollout`] into a
//! [`caprl_common::wire::ScoredRollout`]: CIDEr-D (precomputed training df),
//! BLEU-n and ROUGE-L as a weighted sum, plus SLE's exploration term.
//! [`run`] is the reward-worker role on a bus.

mod rewarder;
mod service;

pub use rewarder::{exploration_terms, RewardError, Rewarder};
pub use service::{run, WorkerConfig, WorkerError, WorkerStats};
