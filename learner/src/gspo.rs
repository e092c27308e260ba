//! GSPO's clipped surrogate (Zheng et al. 2025, "Group Sequence Policy Optimization", eq. 5–7):
//! PPO with one ratio per caption, `train.ppo_ratio = "sequence"`.
//!
//! `sᵢ = (π(yᵢ)/π_old(yᵢ))^(1/|yᵢ|) = exp((1/|yᵢ|) Σₜ log π(wᵢₜ) − log π_old(wᵢₜ))`
//!
//! `L = −(1/N) Σᵢ wᵢ · min(sᵢ Aᵢ, clip(sᵢ, 1 − ε_low, 1 + ε_high) Aᵢ)`
//!
//! The length normalisation keeps `sᵢ` in one range whatever the caption's length, so one clip
//! range fits all captions (the paper clips at 3e-4 / 4e-4: set `train.clip_low` and
//! `clip_high` that small). The gradient where the caption is not clipped is
//! `sᵢ Aᵢ (1/|yᵢ|) Σₜ ∇log π(wᵢₜ)`: every token of a caption weighs the same. `wᵢ` (no
//! gradient) is decoupled PPO's importance weight of the caption ([`crate::off_policy`]), the
//! mean of its tokens' weights; 1 without one.

use candle_core::Tensor;

use crate::pg::{column, ratio_stats, ClipRange, RatioStats};

/// GSPO's loss for `logp`, `old` (`π_old`, no gradient), `mask` of shape `[N, T]` and one
/// advantage per caption; the stats are over captions.
pub fn sequence_clipped_loss(
    logp: &Tensor,
    old: &Tensor,
    mask: &Tensor,
    advantages: &[f32],
    weights: Option<&Tensor>,
    clip: ClipRange,
) -> candle_core::Result<(Tensor, RatioStats)> {
    let dtype = logp.dtype();
    let lens = mask.sum_keepdim(1)?.maximum(1.0)?;
    let log_ratio = logp
        .sub(&old.detach().to_dtype(dtype)?)?
        .mul(mask)?
        .sum_keepdim(1)?
        .div(&lens)?;
    let ratio = log_ratio.exp()?;
    let w = match weights {
        Some(w) => w
            .detach()
            .to_dtype(dtype)?
            .mul(mask)?
            .sum_keepdim(1)?
            .div(&lens)?,
        None => Tensor::ones_like(&ratio)?,
    };
    let a = column(advantages, logp)?;
    let r = ratio.detach();
    let hi = r.gt(1.0 + clip.high as f64)?.to_dtype(dtype)?;
    let lo = r.lt(1.0 - clip.low as f64)?.to_dtype(dtype)?;
    let pos = a.gt(0.0)?.to_dtype(dtype)?;
    let neg = a.lt(0.0)?.to_dtype(dtype)?;
    let clipped = pos.mul(&hi)?.add(&neg.mul(&lo)?)?;
    let kept = clipped.affine(-1.0, 1.0)?;
    let n = advantages.len().max(1) as f64;
    let grad_part = (ratio.mul(&a)?.mul(&kept)?.mul(&w)?.sum_all()? / n)?;
    let value = (r
        .clamp(1.0 - clip.low, 1.0 + clip.high)?
        .mul(&a)?
        .minimum(&r.mul(&a)?)?
        .mul(&w)?
        .sum_all()?
        / n)?;
    let loss = grad_part.sub(&grad_part.detach())?.add(&value)?.neg()?;
    let every = Tensor::ones_like(&r)?;
    Ok((loss, ratio_stats(&r, &clipped, &every)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    fn grad(loss: &Tensor, var: &Var) -> Vec<Vec<f32>> {
        let g = loss.backward().unwrap();
        g.get(var.as_tensor()).unwrap().to_vec2::<f32>().unwrap()
    }

    /// Caption 0 (3 tokens) has log-ratios 0.3, 0, 0 → s₀ = e^0.1; caption 1 (2 tokens, one
    /// padded) has −0.4, 0 → s₁ = e^−0.2. With A = (1, 1) and a clip of 0.15 on both sides,
    /// caption 1 is inside (its ratio is below 1 with a positive advantage: PPO does not clip
    /// that side), caption 0 inside too; with A = (1, −1), caption 1 is clipped (0.82 < 0.85).
    #[test]
    fn the_ratio_is_the_length_normalised_caption_ratio_and_clips_per_caption() {
        let dev = Device::Cpu;
        let logp = Var::from_slice(&[-0.7f32, -1.0, -1.0, -1.4, -1.0, 5.0], (2, 3), &dev).unwrap();
        let old =
            Tensor::from_slice(&[-1.0f32, -1.0, -1.0, -1.0, -1.0, 0.0], (2, 3), &dev).unwrap();
        let mask = Tensor::from_slice(&[1.0f32, 1.0, 1.0, 1.0, 1.0, 0.0], (2, 3), &dev).unwrap();
        let clip = ClipRange {
            low: 0.15,
            high: 0.15,
        };
        let (s0, s1) = (0.1f32.exp(), (-0.2f32).exp());

        let (l, stats) =
            sequence_clipped_loss(logp.as_tensor(), &old, &mask, &[1.0, 1.0], None, clip).unwrap();
        assert!((l.to_scalar::<f32>().unwrap() + (s0 + s1) / 2.0).abs() < 1e-5);
        // ∂L/∂log π(wᵢₜ) = −sᵢ Aᵢ / (N |yᵢ|), every token of a caption alike.
        let g = grad(&l, &logp);
        let want = [[-s0 / 6.0; 3], [-s1 / 4.0, -s1 / 4.0, 0.0]];
        for (r, w) in g.iter().zip(want) {
            for (x, y) in r.iter().zip(w) {
                assert!((x - y).abs() < 1e-5, "{g:?}");
            }
        }
        assert_eq!(stats.clip_fraction, 0.0);
        assert!((stats.max - s0 as f64).abs() < 1e-5 && (stats.min - s1 as f64).abs() < 1e-5);

        let (l, stats) =
            sequence_clipped_loss(logp.as_tensor(), &old, &mask, &[1.0, -1.0], None, clip).unwrap();
        let g = grad(&l, &logp);
        assert_eq!(g[1], vec![0.0; 3], "the clipped caption moved: {g:?}");
        assert!((g[0][0] + s0 / 6.0).abs() < 1e-5);
        assert!((stats.clip_fraction - 0.5).abs() < 1e-9);
        // Value: −(s₀ + min(−s₁, −0.85)) / 2.
        assert!((l.to_scalar::<f32>().unwrap() + (s0 - 0.85) / 2.0).abs() < 1e-5);
    }

    /// A caption's weight is the mean of its tokens' weights, and scales its gradient.
    #[test]
    fn weights_scale_each_captions_gradient() {
        let dev = Device::Cpu;
        let logp = Var::from_slice(&[-1.0f32, -1.0, -2.0, 0.0], (2, 2), &dev).unwrap();
        let old = logp.as_tensor().detach();
        let mask = Tensor::from_slice(&[1.0f32, 1.0, 1.0, 0.0], (2, 2), &dev).unwrap();
        let w = Tensor::from_slice(&[0.5f32, 1.5, 0.25, 9.0], (2, 2), &dev).unwrap();
        let clip = ClipRange {
            low: 0.2,
            high: 0.2,
        };
        let (l, _) =
            sequence_clipped_loss(logp.as_tensor(), &old, &mask, &[1.0, 2.0], Some(&w), clip)
                .unwrap();
        // s = 1: ∂L/∂log π = −w̄ᵢ Aᵢ / (N |yᵢ|) with w̄ = (1, 0.25).
        let g = grad(&l, &logp);
        assert!(
            (g[0][0] + 0.25).abs() < 1e-6 && (g[0][1] + 0.25).abs() < 1e-6,
            "{g:?}"
        );
        assert!((g[1][0] + 0.25).abs() < 1e-6 && g[1][1] == 0.0, "{g:?}");
    }
}
