//! SCST, self-critical sequence training (papers 000 and 002; Rennie et al.):
//!
//! `∇L = −(r(wˢ) − b)·∇log p(wˢ)`, masked over the tokens up to and including EOS.
//!
//! The advantage `r(wˢ) − b` comes from the estimator `train.baseline` names
//! ([`crate::advantage`]: the greedy caption's reward, the mean of the other samples, GRPO's or
//! Dr. GRPO's group statistics); [`crate::pg`] turns advantages into the loss.

use caprl_common::config::RunConfig;
use caprl_wire::ScoredRollout;

use super::{Decodes, Rule};
use crate::advantage::{self, Baseline};
use crate::targets::{per_image_samples, PgBatch};
use crate::LearnerError;

/// SCST: the sampled captions of each image, weighted by their advantages.
pub(crate) struct Scst {
    pub baseline: Baseline,
    /// The longest caption in tokens (words + EOS): Dr. GRPO's loss normaliser.
    pub max_tokens: usize,
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

    fn compares_samples_in_group(&self) -> bool {
        self.baseline.is_group()
    }

    fn supports_ppo(&self) -> bool {
        true
    }

    fn targets(&self, scored: &[ScoredRollout], version: u64) -> Result<PgBatch, LearnerError> {
        let mut out = per_image_samples(
            scored,
            version,
            |g| Ok(advantage::advantages(self.baseline, &g.rewards, g.greedy)),
            None,
        )?;
        out.norm = advantage::loss_norm(self.baseline, self.max_tokens);
        Ok(out)
    }
}
