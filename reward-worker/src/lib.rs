//! caprl-reward-worker: scores rollouts with the configured reward spec.
//!
//! [`Rewarder`] turns a [`caprl_common::wire::Rollout`] into a
//! [`caprl_common::wire::ScoredRollout`]: CIDEr-D (precomputed training df),
//! BLEU-n, ROUGE-L and the embedding reward of seed 001 ([`EmbedReward`]) as a weighted sum,
//! plus SLE's exploration term.
//! [`run`] is the reward-worker role on a bus.

mod embed;
mod rewarder;
mod service;

pub use embed::EmbedReward;
pub use rewarder::{exploration_terms, RewardError, Rewarder};
pub use service::{run, WorkerConfig, WorkerError, WorkerStats};
