//! The sequence-level policy-gradient loss every RL objective reduces to.
//!
//! Given per-sequence multipliers `Aᵢ` (an advantage, or SLE's combined term),
//! `L = −Σᵢ Aᵢ · Σₜ mᵢₜ log p(wᵢₜ) / Σᵢₜ mᵢₜ`, where `m` masks the tokens up to
//! and including EOS. Normalising by the token count follows
//! self-critical.pytorch's `RewardCriterion`.

use candle_core::{Tensor, D};

/// `−Σ A·Σₜ m·logp / Σ m` for `logp`, `mask` of shape `[N, T]` and `N` multipliers.
pub fn loss(logp: &Tensor, mask: &Tensor, multipliers: &[f32]) -> candle_core::Result<Tensor> {
    let n = multipliers.len();
    let a = Tensor::from_slice(multipliers, (n, 1), logp.device())?.to_dtype(logp.dtype())?;
    let weighted = logp.mul(mask)?.broadcast_mul(&a)?.sum_all()?;
    let tokens = mask.sum_all()?.maximum(1.0)?;
    weighted.neg()?.div(&tokens)
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
