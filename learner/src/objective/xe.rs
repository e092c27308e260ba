//! XE: teacher-forced cross-entropy, the warm start of every source paper,
//! with optional label smoothing ε:
//! `L = Σₜ mₜ [ (1−ε)(−log p(wₜ)) + ε·(−(1/V)Σ_v log p(v)) ] / Σₜ mₜ`.

use candle_core::{Tensor, D};
use caprl_common::config::RunConfig;
use caprl_wire::ScoredRollout;

use super::{Decodes, Rule};
use crate::targets::PgBatch;
use crate::LearnerError;

/// `objective = "xe"`: the XE phase alone, no RL phase.
pub(crate) struct Xe;

impl Rule for Xe {
    fn name(&self) -> &'static str {
        "xe"
    }

    fn decodes(&self, cfg: &RunConfig) -> Decodes {
        Decodes {
            samples: cfg.train.samples,
            ..Decodes::default()
        }
    }

    fn has_rl_phase(&self) -> bool {
        false
    }

    fn targets(&self, _: &[ScoredRollout], _: u64) -> Result<PgBatch, LearnerError> {
        Err(LearnerError::Misconfigured(
            "objective = \"xe\" has no RL phase; choose an RL objective (scst, sle, ...)".into(),
        ))
    }
}

/// XE loss from the full log-softmax `[N, T, V]`, targets `[N, T]` (u32) and mask `[N, T]`.
pub fn loss(
    logprobs_full: &Tensor,
    targets: &Tensor,
    mask: &Tensor,
    label_smoothing: f32,
) -> candle_core::Result<Tensor> {
    let nll = logprobs_full
        .gather(&targets.unsqueeze(2)?, 2)?
        .squeeze(2)?
        .neg()?;
    let per_token = if label_smoothing > 0.0 {
        let smooth = logprobs_full.mean(D::Minus1)?.neg()?;
        ((nll * (1.0 - label_smoothing as f64))? + (smooth * label_smoothing as f64)?)?
    } else {
        nll
    };
    let tokens = mask.sum_all()?.maximum(1.0)?;
    per_token.mul(mask)?.sum_all()?.div(&tokens)
}

/// XE loss without smoothing from the targets' log-probabilities `[N, T]` (0 where masked, as
/// `Captioner::token_logprobs` gives them) and the mask: `−Σ logp / Σ m`.
pub fn nll(logp: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
    let tokens = mask.sum_all()?.maximum(1.0)?;
    logp.mul(mask)?.sum_all()?.neg()?.div(&tokens)
}
