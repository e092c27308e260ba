//! Global-norm gradient clipping: `‖g‖ = √(Σ_p ‖g_p‖²)`; when `‖g‖ > max_norm` every gradient
//! is scaled by `max_norm / ‖g‖`.

use candle_core::backprop::GradStore;
use candle_core::{CpuStorage, DType, Storage, Tensor, Var};

use super::error::Result;
use caprl_kernels::kernels_enabled;

/// The global L2 norm of the gradients of `vars` (vars without a gradient count as zero).
///
/// Off the CPU the squares are summed on the device and read back once per step: the host needs
/// the norm to decide clipping and whether to skip a non-finite batch.
pub fn grad_norm(grads: &GradStore, vars: &[Var]) -> Result<f64> {
    let mut sq = 0f64;
    let mut on_device: Option<Tensor> = None;
    for v in vars {
        if let Some(g) = grads.get(v.as_tensor()) {
            match host_sum_sq(g) {
                Some(s) => sq += s,
                None => {
                    let s = g.to_dtype(DType::F64)?.sqr()?.sum_all()?;
                    on_device = Some(match on_device {
                        Some(acc) => (acc + s)?,
                        None => s,
                    });
                }
            }
        }
    }
    if let Some(s) = on_device {
        sq += s.to_scalar::<f64>()?;
    }
    Ok(sq.sqrt())
}

/// Clips the gradients of `vars` in place to global norm `max_norm` (0 = off) and returns the
/// norm before clipping. A non-finite norm is returned as is and nothing is scaled: the caller
/// should skip the batch.
pub fn clip_grad_norm(grads: &mut GradStore, vars: &[Var], max_norm: f64) -> Result<f64> {
    let norm = grad_norm(grads, vars)?;
    if max_norm > 0.0 && norm.is_finite() && norm > max_norm {
        let scale = max_norm / norm;
        for v in vars {
            if let Some(g) = grads.get(v.as_tensor()) {
                let scaled = (g * scale)?;
                grads.insert(v.as_tensor(), scaled);
            }
        }
    }
    Ok(norm)
}

/// `Σ g²` in f64 straight from a contiguous CPU f32/f64 tensor; `None` for anything else.
fn host_sum_sq(g: &Tensor) -> Option<f64> {
    if !kernels_enabled(g.device(), g.dtype()) {
        return None;
    }
    let (st, l) = g.storage_and_layout();
    let (a, b) = l.contiguous_offsets()?;
    match &*st {
        Storage::Cpu(CpuStorage::F32(v)) => Some(chunked_sum_sq(&v[a..b])),
        Storage::Cpu(CpuStorage::F64(v)) => Some(chunked_sum_sq(&v[a..b])),
        _ => None,
    }
}

/// Values per chunk of [`chunked_sum_sq`]; large gradients spread their chunks over rayon's
/// threads.
const CHUNK: usize = 16 * 1024;

/// `Σ x²` in f64: per chunk in eight lanes (vector adds; one running sum could not be reordered
/// into them), then the chunk sums in order, so the result does not depend on the thread count.
fn chunked_sum_sq<T: Copy + Into<f64> + Sync>(v: &[T]) -> f64 {
    /// One chunk's sum, compiled for the level in use.
    fn lanes<T: Copy + Into<f64>>(c: &[T]) -> f64 {
        caprl_kernels::fastmath::vectorised!(lanes_plain(c))
    }
    #[inline(always)]
    fn lanes_plain<T: Copy + Into<f64>>(c: &[T]) -> f64 {
        let mut acc = [0f64; 8];
        let mut blocks = c.chunks_exact(8);
        for block in &mut blocks {
            for (a, &x) in acc.iter_mut().zip(block) {
                let x: f64 = x.into();
                *a += x * x;
            }
        }
        let rest: f64 = blocks
            .remainder()
            .iter()
            .map(|&x| x.into() * x.into())
            .sum();
        acc.iter().sum::<f64>() + rest
    }
    if v.len() < 4 * CHUNK || rayon::current_num_threads() < 2 {
        return v.chunks(CHUNK).map(lanes).sum();
    }
    use rayon::prelude::*;
    let sums: Vec<f64> = v.par_chunks(CHUNK).map(lanes).collect();
    sums.iter().sum()
}

#[cfg(test)]
mod tests {
    use super::chunked_sum_sq;

    #[test]
    fn chunked_sum_of_squares_matches_the_plain_sum() {
        let v: Vec<f32> = (0..200_003)
            .map(|i| ((i % 977) as f32 - 488.0) * 1e-3)
            .collect();
        let plain: f64 = v.iter().map(|&x| (x as f64) * (x as f64)).sum();
        let got = chunked_sum_sq(&v);
        assert!((got - plain).abs() <= 1e-12 * plain, "{got} vs {plain}");
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        assert_eq!(pool.install(|| chunked_sum_sq(&v)).to_bits(), got.to_bits());
    }
}
