//! WTF-RL and weighted teacher forcing (paper 004, eq. 3):
//!
//! `∇L = −[ r(x^bs)·∇log p(x^bs) + r(x^gt)·∇log p(x^gt) ]`, `r(x) = α·r_bicont(x) + (1−α)·P_D(x)`
//!
//! over the best beam `x^bs` and a ground-truth caption `x^gt` of each image. `r` is the reward
//! spec's weighted total (`clip=0.94,disc=0.06` for α = 0.94); no baseline is subtracted, since
//! `r_bicont` already measures each caption against its strongest rivals in the batch. `wtf`
//! keeps only the ground-truth half: teacher forcing weighted by how well each reference
//! retrieves its image. [`crate::pg::loss`] turns the multipliers into the loss.

use caprl_common::config::{self, spelled, ConfigError, RunConfig};
use caprl_wire::{DecodeKind, ScoredRollout};

use super::{refuse, Decodes, Rule};
use crate::targets::{reward_weighted, PgBatch};
use crate::LearnerError;

/// Whether a sequence of `kind` gets a gradient: ground truth always, the beam caption only
/// with the RL half (`rl = true`, objective `wtf-rl`).
pub fn trains_on(kind: DecodeKind, rl: bool) -> bool {
    match kind {
        DecodeKind::GroundTruth => true,
        DecodeKind::Beam => rl,
        _ => false,
    }
}

/// What is subtracted from (or done to) the rewards before they weigh the log-likelihoods:
/// the `train.wtf_baseline` key itself.
pub use caprl_common::config::WtfBaseline as Baseline;

/// WTF (`rl = false`) and WTF-RL (`rl = true`).
pub(crate) struct Wtf {
    pub rl: bool,
    pub baseline: Baseline,
}

impl Rule for Wtf {
    fn name(&self) -> &'static str {
        match self.rl {
            true => "wtf-rl",
            false => "wtf",
        }
    }

    /// Beam and ground-truth captions only (paper 004); the greedy caption is a rival in the
    /// contrastive reward's text pool.
    fn decodes(&self, cfg: &RunConfig) -> Decodes {
        Decodes {
            samples: 0,
            greedy: true,
            beam: cfg.decode.beam,
            ..Decodes::default()
        }
    }

    fn needs_encoder_reward(&self) -> bool {
        true
    }

    /// The sampled objectives' `train.baseline` means nothing here: `train.wtf_baseline` is
    /// this objective's own.
    fn check(&self, cfg: &RunConfig) -> Result<(), ConfigError> {
        match cfg.train.baseline {
            config::Baseline::Greedy => Ok(()),
            other => refuse(
                "train.baseline",
                format!("\"{}\" with objective \"{}\"", spelled(&other), self.name()),
                "\"greedy\" with objective wtf or wtf-rl (they weigh beam and ground-truth \
                 captions by their own reward: set train.wtf_baseline instead)",
            ),
        }
    }

    fn targets(&self, scored: &[ScoredRollout], version: u64) -> Result<PgBatch, LearnerError> {
        let mut out = reward_weighted(scored, version, |kind| trains_on(kind, self.rl));
        out.multipliers = multipliers(&out.multipliers, self.baseline);
        Ok(out)
    }
}

/// The multipliers of eq. 3 for the batch's trained sequences with rewards `r`.
pub fn multipliers(r: &[f32], baseline: Baseline) -> Vec<f32> {
    match baseline {
        Baseline::None => r.to_vec(),
        Baseline::Mean => {
            let mean = r.iter().sum::<f32>() / r.len().max(1) as f32;
            r.iter().map(|x| x - mean).collect()
        }
        Baseline::Positive => r.iter().map(|x| x.max(0.0)).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn baselines_transform_the_rewards() {
        let r = [0.3, -0.1, -0.5];
        assert_eq!(multipliers(&r, Baseline::None), r.to_vec());
        assert_eq!(multipliers(&r, Baseline::Positive), vec![0.3, 0.0, 0.0]);
        let m = multipliers(&r, Baseline::Mean);
        assert!((m.iter().sum::<f32>()).abs() < 1e-6 && (m[0] - 0.4).abs() < 1e-6);
    }

    #[test]
    fn wtf_trains_on_ground_truth_only_and_wtf_rl_adds_the_beam() {
        assert!(trains_on(DecodeKind::GroundTruth, false));
        assert!(!trains_on(DecodeKind::Beam, false));
        assert!(trains_on(DecodeKind::Beam, true));
        assert!(!trains_on(DecodeKind::Greedy, true));
        assert!(!trains_on(DecodeKind::Sample, true));
    }
}
