//! The sequence-level policy-gradient loss every RL objective reduces to.
//!
//! Given per-sequence multipliers `Aᵢ` (an advantage, or SLE's combined term),
//! `L = −Σᵢ Aᵢ · Σₜ mᵢₜ log p(wᵢₜ) / Σᵢₜ mᵢₜ`, where `m` masks the tokens up to
//! and including EOS. Normalising by the token count follows
//! self-critical.pytorch's `RewardCriterion`; GRPO and Dr. GRPO normalise otherwise
//! ([`LossNorm`]). [`clipped_loss`] is PPO's clipped surrogate of the same loss,
//! [`token_loss`] the form with a per-token advantage `Aᵢₜ`, and [`entropy`] the optional
//! entropy bonus (the KL regulariser is [`crate::kl`]).

use candle_core::{Tensor, D};

/// How a step's masked per-token terms `xᵢₜ` become one number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LossNorm {
    /// `Σᵢₜ xᵢₜ / Σᵢₜ mᵢₜ`: every token of the batch weighs the same (self-critical.pytorch).
    #[default]
    Tokens,
    /// `(1/N) Σᵢ (Σₜ xᵢₜ / Σₜ mᵢₜ)`: each sequence weighs the same (GRPO).
    Sequences,
    /// `Σᵢₜ xᵢₜ / (N·L)` with a fixed `L` (Dr. GRPO: no per-sequence length normalisation).
    Constant(usize),
}

/// The mean of the masked per-token terms `terms` (`[N, T]`, already multiplied by the mask)
/// under `norm`.
pub fn aggregate(terms: &Tensor, mask: &Tensor, norm: LossNorm) -> candle_core::Result<Tensor> {
    match norm {
        LossNorm::Tokens => terms.sum_all()?.div(&mask.sum_all()?.maximum(1.0)?),
        LossNorm::Sequences => {
            let n = terms.dim(0)?.max(1) as f64;
            let per_seq = terms.sum(1)?.div(&mask.sum(1)?.maximum(1.0)?)?;
            per_seq.sum_all()? / n
        }
        LossNorm::Constant(len) => {
            let n = terms.dim(0)?.max(1) as f64;
            terms.sum_all()? / (n * len.max(1) as f64)
        }
    }
}

/// `−Σ A·Σₜ m·logp`, normalised by `norm`, for `logp`, `mask` of shape `[N, T]` and `N`
/// multipliers.
pub fn loss(
    logp: &Tensor,
    mask: &Tensor,
    multipliers: &[f32],
    norm: LossNorm,
) -> candle_core::Result<Tensor> {
    let a = column(multipliers, logp)?;
    aggregate(&logp.mul(mask)?.broadcast_mul(&a)?, mask, norm)?.neg()
}

/// [`loss`] with a weight `wᵢₜ` (no gradient) on each term, `[N, T]`: async mode's importance
/// weights ([`crate::off_policy`]). The normalisation still counts tokens, not weights.
pub fn weighted_loss(
    logp: &Tensor,
    mask: &Tensor,
    multipliers: &[f32],
    weights: &Tensor,
    norm: LossNorm,
) -> candle_core::Result<Tensor> {
    let a = column(multipliers, logp)?;
    let w = weights.detach().to_dtype(logp.dtype())?;
    let terms = logp.mul(mask)?.mul(&w)?.broadcast_mul(&a)?;
    aggregate(&terms, mask, norm)?.neg()
}

/// `N` multipliers as an `[N, 1]` column in `like`'s dtype and device.
pub(crate) fn column(values: &[f32], like: &Tensor) -> candle_core::Result<Tensor> {
    Tensor::from_slice(values, (values.len(), 1), like.device())?.to_dtype(like.dtype())
}

/// PPO's clip range: the ratio `π/μ` is kept within `[1 − low, 1 + high]` (DAPO's
/// "clip-higher" sets `high > low`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClipRange {
    pub low: f32,
    pub high: f32,
}

/// What the ratios `ρ = π/μ` of one clipped loss looked like, over the unmasked tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RatioStats {
    /// Tokens whose term was clipped (no gradient), as a fraction.
    pub clip_fraction: f64,
    /// `KL(μ ‖ π)` by Schulman's k3 estimator, `mean((ρ − 1) − log ρ)`.
    pub approx_kl: f64,
    pub mean: f64,
    pub min: f64,
    pub max: f64,
}

/// PPO's clipped surrogate (Schulman et al. 2017, eq. 7) at the token level, as OpenRLHF and
/// veRL apply it to sequences:
///
/// `L = −norm Σᵢₜ mᵢₜ min(ρᵢₜ Aᵢ, clip(ρᵢₜ, 1 − ε_low, 1 + ε_high) Aᵢ)`,
/// `ρᵢₜ = exp(log π(wᵢₜ) − log μ(wᵢₜ))`
///
/// with `μ` the policy the ratio is taken to (`old`, `[N, T]`, no gradient: the actors' policy,
/// or decoupled PPO's proximal one). The gradient is `ρ A ∇log π` where the term is not clipped
/// and 0 where it is; at `ρ = 1` it is [`loss`]'s. `weights` (`[N, T]`, no gradient) multiply
/// each term: decoupled PPO's `π_old/μ` importance weights ([`crate::off_policy`]).
pub fn clipped_loss(
    logp: &Tensor,
    old: &Tensor,
    mask: &Tensor,
    advantages: &[f32],
    weights: Option<&Tensor>,
    (clip, norm): (ClipRange, LossNorm),
) -> candle_core::Result<(Tensor, RatioStats)> {
    let mask_w = match weights {
        Some(w) => mask.mul(&w.detach().to_dtype(mask.dtype())?)?,
        None => mask.clone(),
    };
    let a = column(advantages, logp)?.broadcast_as(logp.shape())?;
    let ratio = logp.sub(&old.detach().to_dtype(logp.dtype())?)?.exp()?;
    let r = ratio.detach();
    let hi = r.gt(1.0 + clip.high as f64)?.to_dtype(logp.dtype())?;
    let lo = r.lt(1.0 - clip.low as f64)?.to_dtype(logp.dtype())?;
    let pos = a.gt(0.0)?.to_dtype(logp.dtype())?;
    let neg = a.lt(0.0)?.to_dtype(logp.dtype())?;
    // Clipped: the ratio is past the bound on the side the advantage pushes it to.
    let clipped = pos.mul(&hi)?.add(&neg.mul(&lo)?)?;
    let kept = clipped.affine(-1.0, 1.0)?;
    let surrogate = ratio.mul(&a)?.mul(&kept)?.mul(&mask_w)?;
    // The value is the clipped objective; the gradient is the surrogate's.
    let clipped_value = r
        .clamp(1.0 - clip.low, 1.0 + clip.high)?
        .mul(&a)?
        .minimum(&r.mul(&a)?)?
        .mul(&mask_w)?;
    let grad_part = aggregate(&surrogate, mask, norm)?;
    let value = aggregate(&clipped_value, mask, norm)?;
    let loss = grad_part.sub(&grad_part.detach())?.add(&value)?.neg()?;
    Ok((loss, ratio_stats(&r, &clipped, mask)?))
}

/// The statistics of several clipped losses (the minibatches of a PPO update) as one: the means
/// averaged, the extremes kept.
pub fn merge_ratio_stats(parts: &[RatioStats]) -> RatioStats {
    if parts.is_empty() {
        return RatioStats::default();
    }
    let n = parts.len() as f64;
    let mean = |f: fn(&RatioStats) -> f64| parts.iter().map(f).sum::<f64>() / n;
    RatioStats {
        clip_fraction: mean(|s| s.clip_fraction),
        approx_kl: mean(|s| s.approx_kl),
        mean: mean(|s| s.mean),
        min: parts.iter().map(|s| s.min).fold(f64::INFINITY, f64::min),
        max: parts
            .iter()
            .map(|s| s.max)
            .fold(f64::NEG_INFINITY, f64::max),
    }
}

pub(crate) fn ratio_stats(
    ratio: &Tensor,
    clipped: &Tensor,
    mask: &Tensor,
) -> candle_core::Result<RatioStats> {
    let f32s = |t: &Tensor| -> candle_core::Result<Vec<f32>> {
        t.to_dtype(candle_core::DType::F32)?
            .flatten_all()?
            .to_vec1()
    };
    let (ratio, clipped, mask) = (f32s(ratio)?, f32s(clipped)?, f32s(mask)?);
    let mut stats = RatioStats {
        min: f64::INFINITY,
        max: f64::NEG_INFINITY,
        ..RatioStats::default()
    };
    let mut n = 0usize;
    for ((&r, &c), &m) in ratio.iter().zip(&clipped).zip(&mask) {
        if m == 0.0 {
            continue;
        }
        let r = r as f64;
        n += 1;
        stats.clip_fraction += c as f64;
        stats.approx_kl += (r - 1.0) - r.ln();
        stats.mean += r;
        stats.min = stats.min.min(r);
        stats.max = stats.max.max(r);
    }
    if n == 0 {
        return Ok(RatioStats::default());
    }
    let n = n as f64;
    stats.clip_fraction /= n;
    stats.approx_kl /= n;
    stats.mean /= n;
    Ok(stats)
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

    fn grad_of(loss: &Tensor, var: &Var) -> Vec<Vec<f32>> {
        let g = loss.backward().unwrap();
        g.get(var.as_tensor()).unwrap().to_vec2::<f32>().unwrap()
    }

    fn assert_close(a: &[Vec<f32>], b: &[Vec<f32>]) {
        for (r, s) in a.iter().zip(b) {
            for (x, y) in r.iter().zip(s) {
                assert!((x - y).abs() < 1e-6, "{a:?} vs {b:?}");
            }
        }
    }

    /// Sequences of 3 and 2 tokens with terms 1..: tokens (1+2+3+4+5)/5; sequences
    /// ((1+2+3)/3 + (4+5)/2)/2; constant (15)/(2·4).
    #[test]
    fn each_normalisation_matches_its_formula() {
        let dev = Device::Cpu;
        let terms = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 0.0], (2, 3), &dev).unwrap();
        let mask = Tensor::from_slice(&[1.0f32, 1.0, 1.0, 1.0, 1.0, 0.0], (2, 3), &dev).unwrap();
        let value = |norm| {
            aggregate(&terms, &mask, norm)
                .unwrap()
                .to_scalar::<f32>()
                .unwrap()
        };
        assert!((value(LossNorm::Tokens) - 3.0).abs() < 1e-6);
        assert!((value(LossNorm::Sequences) - (2.0 + 4.5) / 2.0).abs() < 1e-6);
        assert!((value(LossNorm::Constant(4)) - 15.0 / 8.0).abs() < 1e-6);
    }

    /// At `π = μ` the clipped surrogate has the plain loss's gradient.
    #[test]
    fn clipped_loss_at_ratio_one_is_the_plain_loss() {
        let dev = Device::Cpu;
        let values = [-1.0f32, -2.0, -0.5, -0.1, -3.0, 0.0];
        let logp = Var::from_slice(&values, (2, 3), &dev).unwrap();
        let mu = Tensor::from_slice(&values, (2, 3), &dev).unwrap();
        let mask = Tensor::from_slice(&[1.0f32, 1.0, 1.0, 1.0, 1.0, 0.0], (2, 3), &dev).unwrap();
        let a = [0.5, -2.0];
        let clip = ClipRange {
            low: 0.2,
            high: 0.28,
        };
        for norm in [LossNorm::Tokens, LossNorm::Sequences, LossNorm::Constant(5)] {
            let plain = loss(logp.as_tensor(), &mask, &a, norm).unwrap();
            let (clipped, stats) =
                clipped_loss(logp.as_tensor(), &mu, &mask, &a, None, (clip, norm)).unwrap();
            // The surrogate's value is `−norm Σ ρ·A·m`, here `−norm Σ A·m`.
            let ones = Tensor::ones((2, 3), candle_core::DType::F32, &dev).unwrap();
            let want = loss(&ones, &mask, &a, norm)
                .unwrap()
                .to_scalar::<f32>()
                .unwrap();
            let got = clipped.to_scalar::<f32>().unwrap();
            assert!((got - want).abs() < 1e-6, "{norm:?}: {got} vs {want}");
            assert_close(&grad_of(&plain, &logp), &grad_of(&clipped, &logp));
            assert_eq!(stats.clip_fraction, 0.0);
            assert_eq!((stats.min, stats.max, stats.mean), (1.0, 1.0, 1.0));
            assert_eq!(stats.approx_kl, 0.0);
        }
    }

    /// A token whose ratio is past the bound on its advantage's side gets no gradient; one
    /// past the other bound keeps `ρ·A·∇log π` (PPO clips only what would over-step).
    #[test]
    fn clipped_tokens_get_no_gradient() {
        let dev = Device::Cpu;
        // ρ = e^0.5 ≈ 1.65 on every token.
        let logp = Var::from_slice(&[-0.5f32, -0.5], (2, 1), &dev).unwrap();
        let mu = Tensor::from_slice(&[-1.0f32, -1.0], (2, 1), &dev).unwrap();
        let mask = Tensor::from_slice(&[1.0f32, 1.0], (2, 1), &dev).unwrap();
        let clip = ClipRange {
            low: 0.2,
            high: 0.2,
        };
        let (l, stats) = clipped_loss(
            logp.as_tensor(),
            &mu,
            &mask,
            &[1.0, -1.0],
            None,
            (clip, LossNorm::Tokens),
        )
        .unwrap();
        let rho = 0.5f32.exp();
        // Value: −(min(ρ, 1.2)·1 + min(−ρ, −1.2)) / 2 = −(1.2 − ρ) / 2.
        assert!((l.to_scalar::<f32>().unwrap() + (1.2 - rho) / 2.0).abs() < 1e-6);
        let g = grad_of(&l, &logp);
        assert_eq!(g[0][0], 0.0, "the clipped token moved: {g:?}");
        assert!((g[1][0] - rho / 2.0).abs() < 1e-6, "{g:?}");
        assert!((stats.clip_fraction - 0.5).abs() < 1e-9);
        assert!((stats.approx_kl - ((rho as f64 - 1.0) - 0.5)).abs() < 1e-6);
    }

    /// Weights scale each token's gradient to `−w·A·m / Σm` and leave the normaliser alone; in
    /// the clipped loss they scale the unclipped tokens' `ρ·A` the same way.
    #[test]
    fn weights_scale_each_terms_gradient() {
        let dev = Device::Cpu;
        let logp = Var::from_slice(&[-1.0f32, -2.0, -0.5, -0.1, -3.0, 0.0], (2, 3), &dev).unwrap();
        let mask = Tensor::from_slice(&[1.0f32, 1.0, 1.0, 1.0, 1.0, 0.0], (2, 3), &dev).unwrap();
        let w = Tensor::from_slice(&[0.5f32, 1.0, 0.0, 2.0, 2.0, 1.0], (2, 3), &dev).unwrap();
        let l = weighted_loss(logp.as_tensor(), &mask, &[0.5, -2.0], &w, LossNorm::Tokens).unwrap();
        assert_close(
            &grad_of(&l, &logp),
            &[vec![-0.05, -0.1, 0.0], vec![0.8, 0.8, 0.0]],
        );
        let clip = ClipRange {
            low: 0.2,
            high: 0.2,
        };
        let mu = logp.as_tensor().detach();
        let (c, _) = clipped_loss(
            logp.as_tensor(),
            &mu,
            &mask,
            &[0.5, -2.0],
            Some(&w),
            (clip, LossNorm::Tokens),
        )
        .unwrap();
        assert_close(&grad_of(&c, &logp), &grad_of(&l, &logp));
    }

    /// The gradient of the loss w.r.t. each log-prob is `−A·m / Σm`.
    #[test]
    fn gradient_equals_the_hand_computed_formula() {
        let dev = Device::Cpu;
        let logp = Var::from_slice(&[-1.0f32, -2.0, -0.5, -0.1, -3.0, 0.0], (2, 3), &dev).unwrap();
        let mask = Tensor::from_slice(&[1.0f32, 1.0, 1.0, 1.0, 1.0, 0.0], (2, 3), &dev).unwrap();
        let l = loss(logp.as_tensor(), &mask, &[0.5, -2.0], LossNorm::Tokens).unwrap();
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
