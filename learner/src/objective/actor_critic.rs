//! Actor-critic training (paper 001, Ren et al., "Deep Reinforcement Learning-based Image
//! Captioning with Embedding Reward"): a value network `v_θ(s_t)` is regressed on the return
//! `r` of the whole caption (the reward arrives only at the end, undiscounted), and the policy
//! follows `∇L = −Σₜ (r − v_θ(s_t)) ∇log p(w_t | s_t)`.
//!
//! The value head and its loss are in [`crate::critic`]; lookahead inference
//! (`λ·log π + (1 − λ)·v`) is `Decoder::beam_lookahead`; the embedding reward is the reward
//! workers' `embed`.

use caprl_common::config::{Baseline, RunConfig};
use caprl_wire::ScoredRollout;

use super::{Decodes, Rule};
use crate::targets::{per_image_samples, ImageSamples, PgBatch};
use crate::{advantage, LearnerError};

/// Actor-critic: per-token return targets for the critic. The sequence multipliers (SCST
/// advantages under `baseline`) are computed but not trained on.
pub(crate) struct ActorCritic {
    pub baseline: Baseline,
}

impl Rule for ActorCritic {
    fn name(&self) -> &'static str {
        "actor-critic"
    }

    fn decodes(&self, cfg: &RunConfig) -> Decodes {
        Decodes {
            samples: cfg.train.samples,
            ..Decodes::default()
        }
    }

    fn uses_value_head(&self) -> bool {
        true
    }

    fn targets(&self, scored: &[ScoredRollout], version: u64) -> Result<PgBatch, LearnerError> {
        let returns = |g: &ImageSamples, k: usize| return_targets(g.len(k), g.rewards[k]);
        per_image_samples(
            scored,
            version,
            |g| Ok(advantage::advantages(self.baseline, &g.rewards, g.greedy)),
            Some(&returns),
        )
    }
}

/// The critic's per-token targets of one sequence: its return at every step.
pub fn return_targets(len: usize, reward: f32) -> Vec<f32> {
    vec![reward; len]
}
