//! Advantage estimators of the sampled objectives (`scst`, `sle`'s quality term, and the
//! sequence multipliers that `mc-pg` and `actor-critic` report), one file per estimator with its
//! formula, chosen by `train.baseline`:
//!
//! | `train.baseline` | estimator | loss normalisation |
//! |---|---|---|
//! | `greedy` | [`greedy`]: `r − r(greedy)` (SCST) | tokens of the batch |
//! | `mean` (`rloo`) | [`leave_one_out`]: `r − mean of the others` (new self-critical, RLOO) | tokens of the batch |
//! | `grpo` | [`grpo`]: `(r − mean) / (std + ε)` | each sequence's own tokens, then sequences |
//! | `dr-grpo` | [`dr_grpo`]: `r − mean` | a constant: sequences × longest caption |
//!
//! Each takes the rewards of one input's samples and returns their advantages; the loss
//! normalisation is part of the estimator because GRPO and Dr. GRPO differ in it as much as
//! in the advantage (Liu et al. 2025, "Understanding R1-Zero-like training").

pub mod dr_grpo;
pub mod greedy;
pub mod grpo;
pub mod leave_one_out;

pub use caprl_common::config::Baseline;

use crate::pg::LossNorm;

/// The advantages of the samples of one input under `baseline`. `greedy` is the reward of the
/// input's greedy caption; only [`Baseline::Greedy`] reads it (0 when missing).
pub fn advantages(baseline: Baseline, rewards: &[f32], greedy: Option<f32>) -> Vec<f32> {
    match baseline {
        Baseline::Greedy => greedy::advantages(rewards, greedy.unwrap_or(0.0)),
        Baseline::Mean => leave_one_out::advantages(rewards),
        Baseline::Grpo => grpo::advantages(rewards),
        Baseline::DrGrpo => dr_grpo::advantages(rewards),
    }
}

/// How the per-token terms of a step's loss are averaged under `baseline`; `max_tokens` is the
/// longest caption in tokens (words + EOS), Dr. GRPO's constant.
pub fn loss_norm(baseline: Baseline, max_tokens: usize) -> LossNorm {
    match baseline {
        Baseline::Greedy | Baseline::Mean => LossNorm::Tokens,
        Baseline::Grpo => LossNorm::Sequences,
        Baseline::DrGrpo => LossNorm::Constant(max_tokens.max(1)),
    }
}
