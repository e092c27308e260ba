//! Log-softmax of one row of logits on the host, as every decoding strategy reads it.
//!
//! At COCO's vocabulary (10,000 words) a decoding step's per-row work is a visible share of
//! the step, so nothing here builds the whole log-probability row unless asked to: the
//! log-sum-exp reads the logits twice (max, then the exponentials summed in eight f64 lanes) and
//! an entry is `l_w · (1/T) − lse`. The loops are compiled for the level in use
//! ([`caprl_kernels::fastmath::Simd`]).

use caprl_kernels::fastmath::{exp_f32, vectorised};

/// Lanes of the exponential sums (and so the order in which they are added).
const LANES: usize = 8;

/// Host-side `log_softmax` of one row, in f64 for stable sums.
pub(crate) fn host_log_softmax(logits: &[f32], inv_temp: f64) -> Vec<f64> {
    let lse = host_log_sum_exp(logits, inv_temp);
    logits.iter().map(|&v| v as f64 * inv_temp - lse).collect()
}

/// Entry `w` of [`host_log_softmax`], without building the whole vector.
pub(crate) fn host_logprob(logits: &[f32], inv_temp: f64, w: usize) -> f32 {
    (logits[w] as f64 * inv_temp - host_log_sum_exp(logits, inv_temp)) as f32
}

/// `log Σ_w exp(l_w / T)` of one row.
pub(crate) fn host_log_sum_exp(logits: &[f32], inv_temp: f64) -> f64 {
    let max = scaled_max(logits, inv_temp);
    sum_exp(logits, inv_temp, max).ln() + max
}

/// `max_w l_w / T` (`T > 0`, so the largest logit gives it).
fn scaled_max(logits: &[f32], inv_temp: f64) -> f64 {
    max(logits) as f64 * inv_temp
}

/// The largest value, NaNs ignored.
fn max(logits: &[f32]) -> f32 {
    vectorised!(max_plain(logits))
}

/// The largest value (NaNs ignored), in eight lanes so that it vectorises.
#[inline(always)]
fn max_plain(logits: &[f32]) -> f32 {
    let mut m = [f32::NEG_INFINITY; LANES];
    let chunks = logits.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for (m, &x) in m.iter_mut().zip(c) {
            *m = if x > *m { x } else { *m };
        }
    }
    rest.iter()
        .chain(&m)
        .fold(f32::NEG_INFINITY, |a, &x| a.max(x))
}

/// `Σ_w exp(l_w / T − max)` in f64, eight lanes added in a fixed order.
fn sum_exp(logits: &[f32], inv_temp: f64, max: f64) -> f64 {
    vectorised!(sum_exp_plain(logits, inv_temp, max))
}

#[inline(always)]
fn sum_exp_plain(logits: &[f32], inv_temp: f64, max: f64) -> f64 {
    // The differences in f64 (exact enough for any temperature), their exponentials with the
    // f32 polynomial (all ≤ 0, so e^d ∈ (0, 1], relative error ~2e-7).
    let e = |x: f32| exp_f32((x as f64 * inv_temp - max) as f32) as f64;
    let chunks = logits.chunks_exact(LANES);
    let rest = chunks.remainder();
    let mut acc = [0f64; LANES];
    for c in chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a += e(x);
        }
    }
    acc.iter().sum::<f64>() + rest.iter().map(|&x| e(x)).sum::<f64>()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference_lse(logits: &[f32], inv_temp: f64) -> f64 {
        let max = logits
            .iter()
            .fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64 * inv_temp));
        logits
            .iter()
            .map(|&v| (v as f64 * inv_temp - max).exp())
            .sum::<f64>()
            .ln()
            + max
    }

    #[test]
    fn log_sum_exp_matches_the_plain_formula_at_every_length() {
        for n in [1, 7, 8, 9, 66, 10_000] {
            let logits: Vec<f32> = (0..n)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
                .collect();
            for inv_temp in [1.0, 0.5, 2.0] {
                let got = host_log_sum_exp(&logits, inv_temp);
                let want = reference_lse(&logits, inv_temp);
                assert!((got - want).abs() < 1e-6, "n {n}: {got} vs {want}");
            }
        }
        let with_neg_inf = [0.0f32, f32::NEG_INFINITY, 1.0];
        let want = (1.0f64 + 1f64.exp()).ln();
        assert!((host_log_sum_exp(&with_neg_inf, 1.0) - want).abs() < 1e-6);
    }
}
