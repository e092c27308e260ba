//! The sequence-level policy-gradient loss every RL objective reduces to.
//!
//! Given per-sequence multipliers `Aᵢ` (an advantage, or SLE's combined term),
//! `L = −Σᵢ Aᵢ · Σₜ mᵢₜ log p(wᵢₜ) / Σᵢₜ mᵢₜ`, where `m` masks the tokens up to
//! and including EOS. Normalising by the token count follows
//! self-critical.pytorch's `RewardCriterion`. [`token_loss`] is the same with a
//! per-token advantage `Aᵢₜ`; [`entropy`] and [`kl_to_reference`] are the optional
//! regularisers.

use candle_core::{Tensor, D};

/// `−Σ A·Σₜ m·logp / Σ m` for `logp`, `mask` of shape `[N, T]` and `N` multipliers.
pub fn loss(logp: &Tensor, mask: &Tensor, multipliers: &[f32]) -> candle_core::Result<Tensor> {
    let n = multipliers.len();
    let a = Tensor::from_slice(multipliers, (n, 1), logp.device())?.to_dtype(logp.dtype())?;
    let weighted = logp.mul(mask)?.broadcast_mul(&a)?.sum_all()?;
    let tokens = mask.sum_all()?.maximum(1.0)?;
    weighted.neg()?.div(&tokens)
}

/// The per-token form for objectives whose advantage varies along the sequence (mc-pg,
/// actor-critic): `L = −Σᵢₜ Aᵢₜ mᵢₜ log p(wᵢₜ) / Σᵢₜ mᵢₜ`, `advantages` `[N, T]` (no gradient).
pub fn token_loss(
    logp: &Tensor,
    mask: &Tensor,
    advantages: &Tensor,
) -> candle_core::Result<Tensor> {
    let a = advantages.detach().to_dtype(logp.dtype())?;
    let weighted = logp.mul(mask)?.mul(&a)?.sum_all()?;
    let tokens = mask.sum_all()?.maximum(1.0)?;
    weighted.neg()?.div(&tokens)
}

/// `KL(π ‖ π_ref)` per step, averaged over unmasked steps: `Σ_w π(w)(log π(w) − log π_ref(w))`,
/// with `π_ref` the frozen XE model (no gradient). Penalising it keeps the RL policy near the
/// fluent XE model, the usual remedy for SCST's collapse onto a few phrasings.
pub fn kl_to_reference(
    logprobs_full: &Tensor,
    reference_full: &Tensor,
    mask: &Tensor,
) -> candle_core::Result<Tensor> {
    let reference = reference_full.detach().to_dtype(logprobs_full.dtype())?;
    let kl = logprobs_full
        .exp()?
        .mul(&logprobs_full.sub(&reference)?)?
        .sum(D::Minus1)?;
    let tokens = mask.sum_all()?.maximum(1.0)?;
    kl.mul(mask)?.sum_all()?.div(&tokens)
}

/// Mean entropy of the per-step distributions `[N, T, V]` over unmasked steps
/// (the optional entropy bonus against collapse).
pub fn entropy(logprobs_full: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
    let h = logprobs_full
        .exp()?
        .mul(logprobs_full)?
        .sum(D::Minus1)?
        .neg()?;
    let tokens = mask.sum_all()?.maximum(1.0)?;
    h.mul(mask)?.sum_all()?.div(&tokens)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    /// The gradient of the loss w.r.t. each log-prob is `−A·m / Σm`.
    #[test]
    fn gradient_equals_the_hand_computed_formula() {
        let dev = Device::Cpu;
        let logp = Var::from_slice(&[-1.0f32, -2.0, -0.5, -0.1, -3.0, 0.0], (2, 3), &dev).unwrap();
        let mask = Tensor::from_slice(&[1.0f32, 1.0, 1.0, 1.0, 1.0, 0.0], (2, 3), &dev).unwrap();
        let l = loss(logp.as_tensor(), &mask, &[0.5, -2.0]).unwrap();
        let want_loss = -(0.5 * (-3.5) + -2.0 * (-3.1)) / 5.0;
        assert!((l.to_scalar::<f32>().unwrap() - want_loss).abs() < 1e-6);
        let g = l.backward().unwrap();
        let g = g.get(logp.as_tensor()).unwrap().to_vec2::<f32>().unwrap();
        let want = [[-0.1, -0.1, -0.1], [0.4, 0.4, 0.0]];
        for (r, w) in g.iter().zip(want.iter()) {
            for (x, y) in r.iter().zip(w.iter()) {
                assert!((x - y).abs() < 1e-6, "{g:?}");
            }
        }
    }
}
