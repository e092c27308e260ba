//! SLE, sequence-level exploration (paper 002, eq. 15 with the baselines of its §4):
//!
//! `Lʲ = −α(CIDEr(ỹⱼ) − b_greedy)·log p(ỹⱼ) − (1−α)(2/s)Σₖ(d(ỹⱼ,ỹₖ) − d̄)·log p(ỹⱼ)`
//!
//! The quality term `CIDEr(ỹⱼ) − b_greedy` is the advantage of `train.baseline` (the paper's
//! greedy baseline by default; [`crate::advantage`] has the others).
//!
//! `d̄ = (1/s²)ΣⱼΣₖ d(ỹⱼ,ỹₖ)` is the mean of all pairwise distances of the `s`
//! samples of one input. The reward worker computes the exploration term
//! `eⱼ = (2/s)Σₖ(dⱼₖ − d̄)` (reward component [`DIVERSITY`]); this file combines
//! it with the quality term into the multiplier of `log p(ỹⱼ)`, which
//! [`crate::pg`] turns into the loss.

use caprl_common::config::{ConfigError, RunConfig, DIVERSITY};
use caprl_wire::ScoredRollout;

use super::{refuse, uses_encoder, Decodes, Rule};
use crate::advantage::{self, Baseline};
use crate::targets::{per_image_samples, PgBatch};
use crate::LearnerError;

/// SLE with quality weight `alpha` and the quality term's advantage estimator `baseline`.
pub(crate) struct Sle {
    pub alpha: f32,
    pub baseline: Baseline,
    /// The longest caption in tokens (words + EOS): Dr. GRPO's loss normaliser.
    pub max_tokens: usize,
}

impl Rule for Sle {
    fn name(&self) -> &'static str {
        "sle"
    }

    /// The greedy caption is the quality term's baseline under `baseline = "greedy"` (and a
    /// rival in the contrastive reward's text pool, paper 004); a group baseline needs none.
    fn decodes(&self, cfg: &RunConfig) -> Decodes {
        Decodes {
            samples: cfg.train.samples,
            greedy: self.baseline == Baseline::Greedy || uses_encoder(cfg),
            ..Decodes::default()
        }
    }

    fn wants_exploration(&self) -> bool {
        true
    }

    fn compares_samples_in_group(&self) -> bool {
        self.baseline.is_group()
    }

    fn supports_ppo(&self) -> bool {
        true
    }

    /// The exploration term compares the samples of an image pairwise.
    fn check(&self, cfg: &RunConfig) -> Result<(), ConfigError> {
        match cfg.train.samples {
            0 | 1 => refuse(
                "train.samples",
                cfg.train.samples.to_string(),
                ">= 2 when objective = \"sle\" (pairwise distances need two samples)",
            ),
            _ => Ok(()),
        }
    }

    fn targets(&self, scored: &[ScoredRollout], version: u64) -> Result<PgBatch, LearnerError> {
        let mut out = per_image_samples(
            scored,
            version,
            |g| {
                if self.baseline == Baseline::Greedy && g.greedy.is_none() {
                    return Err(LearnerError::Internal(
                        "SLE needs the greedy caption's reward, and the rollouts have none",
                    ));
                }
                let quality = advantage::advantages(self.baseline, &g.rewards, g.greedy);
                Ok(multipliers(&quality, &g.component(DIVERSITY), self.alpha))
            },
            None,
        )?;
        out.norm = advantage::loss_norm(self.baseline, self.max_tokens);
        Ok(out)
    }
}

/// `α·Aⱼ + (1−α)·eⱼ` for the samples of one input, `Aⱼ` the quality advantage (`rⱼ − b_greedy`
/// in the paper) and `eⱼ` the exploration term.
pub fn multipliers(quality: &[f32], exploration: &[f32], alpha: f32) -> Vec<f32> {
    quality
        .iter()
        .zip(exploration)
        .map(|(a, e)| alpha * a + (1.0 - alpha) * e)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sle_multipliers_match_a_hand_example() {
        // s = 3, d12 = 0.1, d13 = d23 = 0.9: d̄ = 3.8 / 9.
        // e1 = (2/3)((0 − d̄) + (0.1 − d̄) + (0.9 − d̄)) = (2/3)(1.0 − 3.8/3).
        let d_bar = 3.8f32 / 9.0;
        let e1 = (2.0 / 3.0) * (1.0 - 3.0 * d_bar);
        let e3 = (2.0 / 3.0) * (1.8 - 3.0 * d_bar);
        let quality = advantage::greedy::advantages(&[1.0, 0.5, 0.2], 0.5);
        let m = multipliers(&quality, &[e1, e1, e3], 0.75);
        assert!((m[0] - (0.75 * 0.5 + 0.25 * e1)).abs() < 1e-6);
        assert!((m[1] - (0.25 * e1)).abs() < 1e-6);
        assert!((m[2] - (0.75 * -0.3 + 0.25 * e3)).abs() < 1e-6);
        assert!(e3 > 0.0 && e1 < 0.0, "the odd caption out is pushed up");
    }
}
