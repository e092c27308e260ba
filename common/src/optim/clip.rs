//! Global-norm gradient clipping: `‖g‖ = √(Σ_p ‖g_p‖²)`; when `‖g‖ > max_norm` every gradient
//! is scaled by `max_norm / ‖g‖`.

use candle_core::backprop::GradStore;
use candle_core::{CpuStorage, DType, Storage, Tensor, Var};

use super::error::Result;

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
    let (st, l) = g.storage_and_layout();
    let (a, b) = l.contiguous_offsets()?;
    match &*st {
        Storage::Cpu(CpuStorage::F32(v)) => {
            Some(v[a..b].iter().map(|&x| (x as f64) * (x as f64)).sum())
        }
        Storage::Cpu(CpuStorage::F64(v)) => Some(v[a..b].iter().map(|&x| x * x).sum()),
        _ => None,
    }
}
