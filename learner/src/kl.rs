//! The KL regulariser to the reference model (the XE model RL starts from), which keeps the RL
//! policy near the fluent XE model: the usual remedy for SCST's collapse onto a few phrasings.
//!
//! `train.kl_estimator` picks how `KL(π ‖ π_ref)` is measured at each step `t`:
//! - `full`: `Σ_w π(w)(log π(w) − log π_ref(w))` over the whole vocabulary ([`full`]);
//! - `k1`, `k2`, `k3`: Schulman's estimators ("Approximating KL divergence", 2020) at the taken
//!   token, with `log r = log π_ref(wₜ) − log π(wₜ)` ([`estimate`], [`per_token`]):
//!   `k1 = −log r`, `k2 = ½ (log r)²`, `k3 = (r − 1) − log r`.
//!
//! `train.kl_in` puts it in the loss (`+ β·mean KL`, differentiated; [`full`] or [`estimate`])
//! or in the reward (`r ← r − β·Σₜ kₜ` of each sampled caption, from the actors' log-probs,
//! before the advantages: [`sequence_penalty`]), as OpenRLHF and TRL do.

use candle_core::{Tensor, D};
use caprl_common::config::KlEstimator;

/// `KL(π ‖ π_ref)` per step, averaged over unmasked steps, from the full log-softmax outputs
/// `[N, T, V]` (`reference_full` gets no gradient).
pub fn full(
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

/// The mean of estimator `k` (k1, k2 or k3) over unmasked steps, from the taken tokens'
/// log-probs `logp` and `reference` (`[N, T]`; the reference gets no gradient).
pub fn estimate(
    logp: &Tensor,
    reference: &Tensor,
    mask: &Tensor,
    k: KlEstimator,
) -> candle_core::Result<Tensor> {
    let log_r = reference.detach().to_dtype(logp.dtype())?.sub(logp)?;
    let per_step = match k {
        KlEstimator::K1 | KlEstimator::Full => log_r.neg()?,
        KlEstimator::K2 => (log_r.sqr()? * 0.5)?,
        KlEstimator::K3 => (log_r.exp()? - 1.0)?.sub(&log_r)?,
    };
    let tokens = mask.sum_all()?.maximum(1.0)?;
    per_step.mul(mask)?.sum_all()?.div(&tokens)
}

/// Estimator `k` at one token with log-probs `logp` (policy) and `reference`.
pub fn per_token(logp: f32, reference: f32, k: KlEstimator) -> f32 {
    let log_r = reference - logp;
    match k {
        KlEstimator::K1 | KlEstimator::Full => -log_r,
        KlEstimator::K2 => 0.5 * log_r * log_r,
        KlEstimator::K3 => log_r.exp_m1() - log_r,
    }
}

/// `Σₜ kₜ` over one caption's tokens: the KL penalty of its reward (before the coefficient).
pub fn sequence_penalty(logp: &[f32], reference: &[f32], k: KlEstimator) -> f32 {
    logp.iter()
        .zip(reference)
        .map(|(&p, &r)| per_token(p, r, k))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn estimators_match_their_formulas_at_one_token() {
        let (p, q) = (0.5f32.ln(), 0.25f32.ln()); // π = 0.5, π_ref = 0.25: r = 0.5
        let log_r = 0.5f32.ln();
        assert!((per_token(p, q, KlEstimator::K1) - (-log_r)).abs() < 1e-6);
        assert!((per_token(p, q, KlEstimator::K2) - 0.5 * log_r * log_r).abs() < 1e-6);
        assert!((per_token(p, q, KlEstimator::K3) - (0.5 - 1.0 - log_r)).abs() < 1e-6);
        assert_eq!(per_token(p, p, KlEstimator::K3), 0.0);
    }

    /// Sampling from π, the mean of k1 and of k3 is KL(π ‖ π_ref) (both unbiased); k3 is
    /// never negative.
    #[test]
    fn k1_and_k3_average_to_the_exact_kl() {
        let pi = [0.6f32, 0.3, 0.1];
        let reference = [0.2f32, 0.5, 0.3];
        let exact: f32 = pi
            .iter()
            .zip(&reference)
            .map(|(p, q)| p * (p / q).ln())
            .sum();
        for k in [KlEstimator::K1, KlEstimator::K3] {
            let expected: f32 = pi
                .iter()
                .zip(&reference)
                .map(|(p, q)| p * per_token(p.ln(), q.ln(), k))
                .sum();
            assert!(
                (expected - exact).abs() < 1e-6,
                "{k:?}: {expected} vs {exact}"
            );
        }
        for (p, q) in pi.iter().zip(&reference) {
            assert!(per_token(p.ln(), q.ln(), KlEstimator::K3) >= 0.0);
        }
    }

    #[test]
    fn tensor_estimate_is_the_masked_mean_of_the_token_estimates() {
        let dev = Device::Cpu;
        let logp = [-0.5f32, -1.0, -2.0, -0.1];
        let reference = [-0.7f32, -0.4, -1.0, -3.0];
        let mask = [1.0f32, 1.0, 1.0, 0.0];
        let t = |v: &[f32]| Tensor::from_slice(v, (2, 2), &dev).unwrap();
        for k in [KlEstimator::K1, KlEstimator::K2, KlEstimator::K3] {
            let got = estimate(&t(&logp), &t(&reference), &t(&mask), k)
                .unwrap()
                .to_scalar::<f32>()
                .unwrap();
            let want = sequence_penalty(&logp[..3], &reference[..3], k) / 3.0;
            assert!((got - want).abs() < 1e-6, "{k:?}: {got} vs {want}");
        }
    }
}
