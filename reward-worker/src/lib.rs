//! caprl-reward-worker: scores rollouts with the configured reward spec.
//!
//! [`Rewarder`] turns a [`caprl_wire::Rollout`] into a
//! [`caprl_wire::ScoredRollout`]: a weighted sum of the rewards of [`rewards::BUILTIN`] —
//! CIDEr-D (precomputed training df), BLEU-n, ROUGE-L, the embedding reward of paper 001
//! ([`EmbedReward`]) and paper 004's contrastive CLIP rewards and discriminator probability
//! ([`ClipReward`]) — plus SLE's exploration term.
//! [`run`] is the reward-worker role on a bus.

mod clip_reward;
mod df_cache;
mod lse;
mod rewarder;
pub mod rewards;
mod service;
mod settings;

pub use clip_reward::{contrast, ClipParts, ClipReward, CLIP_S_WEIGHT};
pub use df_cache::{cache_path, cached_training_df};
pub use rewarder::{RewardError, Rewarder};
pub use rewards::exploration_terms;
pub use rewards::EmbedReward;
pub use service::{
    run, run_with_scorer, ScoreFn, WorkerConfig, WorkerError, WorkerStats, INTERNAL_FAULT_RETRY,
};
