//! A cache-blocked transpose of a 2-D CPU tensor into a new contiguous tensor, without a graph
//! node (for detached weights): candle's strided copy walks one element at a time.

use candle_core::{CpuStorage, Storage, Tensor};

use super::error::Result;

/// `wᵀ` as a contiguous detached tensor; falls back to candle's copy off the CPU, for other
/// dtypes and for non-contiguous inputs.
pub(crate) fn transposed_copy(w: &Tensor) -> Result<Tensor> {
    let w = w.detach();
    let fallback = |w: &Tensor| -> Result<Tensor> { Ok(w.t()?.contiguous()?) };
    let Ok((r, c)) = w.dims2() else {
        return fallback(&w);
    };
    let out = {
        let (st, l) = w.storage_and_layout();
        let Some((a, b)) = l.contiguous_offsets() else {
            drop(st);
            return fallback(&w);
        };
        match &*st {
            Storage::Cpu(CpuStorage::F32(v)) => {
                Tensor::from_vec(blocked(&v[a..b], r, c), (c, r), w.device())?
            }
            Storage::Cpu(CpuStorage::F64(v)) => {
                Tensor::from_vec(blocked(&v[a..b], r, c), (c, r), w.device())?
            }
            _ => {
                drop(st);
                return fallback(&w);
            }
        }
    };
    Ok(out)
}

/// `out[j, i] = x[i, j]` for `x` `[r, c]` row-major, in 32 × 32 tiles.
fn blocked<T: Copy + Default>(x: &[T], r: usize, c: usize) -> Vec<T> {
    const TILE: usize = 16;
    let mut out = vec![T::default(); r * c];
    for i0 in (0..r).step_by(TILE) {
        let i1 = (i0 + TILE).min(r);
        for j0 in (0..c).step_by(TILE) {
            let j1 = (j0 + TILE).min(c);
            for (j, col) in out.chunks_exact_mut(r).enumerate().take(j1).skip(j0) {
                for (o, i) in col[i0..i1].iter_mut().zip(i0..i1) {
                    *o = x[i * c + j];
                }
            }
        }
    }
    out
}
