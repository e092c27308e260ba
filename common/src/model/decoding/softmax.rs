//! Log-softmax of one row of logits on the host, as every decoding strategy reads it.

use crate::fastmath::exp_f32;

/// Host-side `log_softmax` of one row, in f64 for stable sums.
pub(crate) fn host_log_softmax(logits: &[f32], inv_temp: f64) -> Vec<f64> {
    let lse = host_log_sum_exp(logits, inv_temp);
    logits.iter().map(|&v| v as f64 * inv_temp - lse).collect()
}

/// Entry `w` of [`host_log_softmax`], without building the whole vector.
pub(crate) fn host_logprob(logits: &[f32], inv_temp: f64, w: usize) -> f32 {
    (logits[w] as f64 * inv_temp - host_log_sum_exp(logits, inv_temp)) as f32
}

fn host_log_sum_exp(logits: &[f32], inv_temp: f64) -> f64 {
    let max = logits
        .iter()
        .fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64 * inv_temp));
    // The differences in f64 (exact enough for any temperature), their exponentials with the
    // f32 polynomial (all ≤ 0, so e^d ∈ (0, 1], relative error ~2e-7): every decoding step
    // calls this for every row, and a libm `exp` per logit was a visible share of a step.
    logits
        .iter()
        .map(|&v| exp_f32((v as f64 * inv_temp - max) as f32) as f64)
        .sum::<f64>()
        .ln()
        + max
}
