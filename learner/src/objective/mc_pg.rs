//! Monte-Carlo-rollout policy gradient (paper 003, Liu et al., "Improved image captioning via
//! policy gradient optimization of SPIDEr"):
//!
//! `Q(s_t, w_t) ≈ (1/K) Σₖ r(w_{1:t} ⊕ w̃ᵏ_{t+1:T})` for `t < T` (K sampled completions of the
//! prefix), `Q(s_T, w_T) = r(w_{1:T})`, and
//! `∇L = −Σₜ (Q(s_t, w_t) − b_φ(s_t)) ∇log p(w_t | s_t)`,
//! with `b_φ` an MLP on the decoder state trained by MSE to `Q` ([`crate::critic`]).
//!
//! Actors decode the completions (`RolloutTask::mc_rollouts` = K), reward workers score them like
//! any caption; this file turns the scores into per-token `Q` estimates.

use caprl_common::config::{Baseline, RunConfig};
use caprl_wire::ScoredRollout;

use super::{Decodes, Rule};
use crate::targets::{per_image_samples, ImageSamples, PgBatch};
use crate::{advantage, LearnerError};

/// mc-pg: per-token `Q` targets for the value-head baseline. The sequence multipliers (SCST
/// advantages under `baseline`) are computed but not trained on.
pub(crate) struct McPg {
    pub baseline: Baseline,
}

impl Rule for McPg {
    fn name(&self) -> &'static str {
        "mc-pg"
    }

    fn decodes(&self, cfg: &RunConfig) -> Decodes {
        Decodes {
            samples: cfg.train.samples,
            mc_rollouts: cfg.train.mc_rollouts,
            ..Decodes::default()
        }
    }

    fn uses_value_head(&self) -> bool {
        true
    }

    fn targets(&self, scored: &[ScoredRollout], version: u64) -> Result<PgBatch, LearnerError> {
        let q = |g: &ImageSamples, k: usize| q_estimates(g.len(k), g.rewards[k], g.completions(k));
        per_image_samples(
            scored,
            version,
            |g| Ok(advantage::advantages(self.baseline, &g.rewards, g.greedy)),
            Some(&q),
        )
    }
}

/// `Q(s_t, w_t)` for `t = 1..=len` of one sampled sequence of `len` tokens with reward
/// `sample_reward`, from its scored completions `(prefix_len, reward)`. A step whose completions
/// are missing (none were sent) falls back to the sequence reward.
pub fn q_estimates(len: usize, sample_reward: f32, completions: &[(usize, f32)]) -> Vec<f32> {
    let mut sum = vec![0f64; len];
    let mut count = vec![0usize; len];
    for &(t, r) in completions {
        if (1..len).contains(&t) {
            sum[t - 1] += r as f64;
            count[t - 1] += 1;
        }
    }
    (0..len)
        .map(|i| match count[i] {
            0 => sample_reward,
            n => (sum[i] / n as f64) as f32,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q_is_the_mean_completion_reward_and_the_last_step_the_sample_reward() {
        let q = q_estimates(3, 0.9, &[(1, 0.2), (1, 0.4), (2, 1.0), (2, 0.0)]);
        assert_eq!(q.len(), 3);
        assert!((q[0] - 0.3).abs() < 1e-6);
        assert!((q[1] - 0.5).abs() < 1e-6);
        assert!((q[2] - 0.9).abs() < 1e-6);
    }

    #[test]
    fn steps_without_completions_take_the_sequence_reward() {
        assert_eq!(q_estimates(2, 0.7, &[(5, 1.0)]), vec![0.7, 0.7]);
    }
}
