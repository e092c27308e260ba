//! `LSE(x/τ) = log Σ e^{xⱼ/τ}` for the contrastive rewards, vectorised: a caption's
//! denominators hold a hundred or so similarities, and one libm `expf` call per term costs
//! more than the dot products that made them. [`exp_f32`] is branch-free, so the compiler runs
//! it on every lane of the vector unit.

use caprl_kernels::fastmath::exp_f32 as exp;

/// `log Σⱼ e^{xⱼ/τ}` over every `j` but `skip`; `None` when no term is left.
pub fn log_sum_exp(xs: &[f32], skip: Option<usize>, tau: f32) -> Option<f32> {
    let (head, tail) = match skip {
        Some(s) if s < xs.len() => (&xs[..s], &xs[s + 1..]),
        _ => (xs, &[][..]),
    };
    if head.is_empty() && tail.is_empty() {
        return None;
    }
    let m = max(head).max(max(tail));
    let inv = 1.0 / tau;
    Some(m * inv + (sum_exp(head, m, inv) + sum_exp(tail, m, inv)).ln())
}

/// `Σ e^{(x−m)·inv}` in eight fixed lanes.
fn sum_exp(xs: &[f32], m: f32, inv: f32) -> f32 {
    let mut lanes = [0f32; 8];
    let chunks = xs.chunks_exact(8);
    let tail: f32 = chunks.remainder().iter().map(|&x| exp((x - m) * inv)).sum();
    for c in chunks {
        for k in 0..8 {
            lanes[k] += exp((c[k] - m) * inv);
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// The largest of `xs` (−∞ for none), in eight lanes the compiler vectorises.
fn max(xs: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; 8];
    let chunks = xs.chunks_exact(8);
    let tail = chunks
        .remainder()
        .iter()
        .copied()
        .fold(f32::NEG_INFINITY, f32::max);
    for c in chunks {
        for k in 0..8 {
            lanes[k] = if c[k] > lanes[k] { c[k] } else { lanes[k] };
        }
    }
    lanes.into_iter().fold(tail, f32::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_sum_exp_matches_the_direct_sum() {
        let xs: Vec<f32> = (0..37)
            .map(|i| ((i * 13) % 17) as f32 / 17.0 - 0.4)
            .collect();
        for tau in [0.05f32, 0.3, 1.0] {
            let want = xs
                .iter()
                .map(|&x| (x as f64 / tau as f64).exp())
                .sum::<f64>()
                .ln();
            let got = log_sum_exp(&xs, None, tau).unwrap() as f64;
            assert!(
                (got - want).abs() < 1e-5 * want.abs().max(1.0),
                "τ {tau}: {got} vs {want}"
            );
        }
        // Skipping a term equals leaving it out, at either end or inside.
        for skip in [0, 5, 36] {
            let mut rest = xs.clone();
            rest.remove(skip);
            let want = log_sum_exp(&rest, None, 0.05).unwrap();
            let got = log_sum_exp(&xs, Some(skip), 0.05).unwrap();
            assert!((got - want).abs() < 1e-6, "skip {skip}: {got} vs {want}");
        }
        assert_eq!(log_sum_exp(&[], None, 0.1), None);
        assert_eq!(log_sum_exp(&[0.4], Some(0), 0.1), None);
        // One term: its own value over τ.
        assert!((log_sum_exp(&[0.2], None, 0.1).unwrap() - 2.0).abs() < 1e-6);
        assert!((log_sum_exp(&[0.2, 0.9], Some(1), 0.1).unwrap() - 2.0).abs() < 1e-6);
    }
}
