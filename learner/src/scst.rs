//! SCST, self-critical sequence training (seeds 000 and 002; Rennie et al.):
//!
//! `∇L = −(r(wˢ) − b)·∇log p(wˢ)`, masked over the tokens up to and including EOS.
//!
//! This file computes the advantage `r(wˢ) − b`; [`crate::pg`] turns advantages
//! into the loss. Plain numbers in and out, so the formula can be checked by hand.

use caprl_common::config::RunConfig;
use caprl_common::wire::ScoredRollout;

use crate::objective::{Decodes, Rule};
use crate::targets::{per_image_samples, PgBatch};
use crate::LearnerError;

/// SCST baseline choice (seed 000, seed 002 §4): the `train.baseline` key itself.
pub use caprl_common::config::Baseline;

/// SCST: the sampled captions of each image, weighted by `r(wˢ) − b`.
pub(crate) struct Scst {
    pub baseline: Baseline,
}

impl Rule for Scst {
    fn name(&self) -> &'static str {
        "scst"
    }

    fn decodes(&self, cfg: &RunConfig) -> Decodes {
        Decodes {
            samples: cfg.train.samples,
            greedy: self.baseline == Baseline::Greedy,
            ..Decodes::default()
        }
    }

    fn targets(&self, scored: &[ScoredRollout], version: u64) -> Result<PgBatch, LearnerError> {
        per_image_samples(
            scored,
            version,
            |g| Ok(advantages(&g.rewards, g.greedy, self.baseline)),
            None,
        )
    }
}

/// SCST advantages `r(wˢ) − b` for the `s` samples of one input.
///
/// `greedy` is the reward of the greedy caption; it is required for
/// [`Baseline::Greedy`] and ignored for [`Baseline::Mean`]. With one sample
/// and the mean baseline there is no "other" sample: the advantage is 0.
pub fn advantages(rewards: &[f32], greedy: Option<f32>, baseline: Baseline) -> Vec<f32> {
    match baseline {
        Baseline::Greedy => {
            let b = greedy.unwrap_or(0.0);
            rewards.iter().map(|r| r - b).collect()
        }
        Baseline::Mean => {
            let s = rewards.len();
            if s < 2 {
                return vec![0.0; s];
            }
            let total: f32 = rewards.iter().sum();
            rewards
                .iter()
                .map(|r| r - (total - r) / (s as f32 - 1.0))
                .collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_baseline_subtracts_the_greedy_reward() {
        assert_eq!(
            advantages(&[1.0, 0.5], Some(0.75), Baseline::Greedy),
            vec![0.25, -0.25]
        );
    }

    #[test]
    fn mean_baseline_leaves_each_sample_out() {
        let a = advantages(&[1.0, 2.0, 3.0], None, Baseline::Mean);
        assert_eq!(a, vec![1.0 - 2.5, 2.0 - 2.0, 3.0 - 1.5]);
    }
}
