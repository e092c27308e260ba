//! A cache-blocked transpose of a 2-D CPU tensor into a new contiguous tensor, without a graph
//! node (for detached weights): candle's strided copy walks one element at a time.

use candle_core::{CpuStorage, Storage, Tensor};

use crate::kernels_enabled;
use candle_core::Result;

/// `wᵀ` as a contiguous detached tensor; falls back to candle's copy off the CPU, for other
/// dtypes and for non-contiguous inputs.
pub fn transposed_copy(w: &Tensor) -> Result<Tensor> {
    let w = w.detach();
    let fallback = |w: &Tensor| -> Result<Tensor> { w.t()?.contiguous() };
    if !kernels_enabled(w.device(), w.dtype()) {
        return fallback(&w);
    }
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

/// `out[j, i] = x[i, j]` for `x` `[r, c]` row-major, in 16 × 16 tiles; bands of 16 output rows
/// go to rayon's threads when the matrix is large (a plain copy: the same bits either way).
fn blocked<T: Copy + Default + Send + Sync>(x: &[T], r: usize, c: usize) -> Vec<T> {
    const TILE: usize = 16;
    const PARALLEL_MIN: usize = 256 * 1024;
    let mut out = vec![T::default(); r * c];
    if r == 0 || c == 0 {
        return out;
    }
    // Output rows j0..j0 + TILE (columns of x), one tile of x's rows at a time, compiled for
    // the level in use.
    let band = |(k, rows): (usize, &mut [T])| {
        crate::fastmath::vectorised!({
            let j0 = k * TILE;
            for i0 in (0..r).step_by(TILE) {
                let i1 = (i0 + TILE).min(r);
                for (dj, col) in rows.chunks_exact_mut(r).enumerate() {
                    let j = j0 + dj;
                    for (o, i) in col[i0..i1].iter_mut().zip(i0..i1) {
                        *o = x[i * c + j];
                    }
                }
            }
        })
    };
    if r * c >= PARALLEL_MIN && rayon::current_num_threads() > 1 {
        use rayon::prelude::*;
        out.par_chunks_mut(TILE * r).enumerate().for_each(band);
    } else {
        out.chunks_mut(TILE * r).enumerate().for_each(band);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::blocked;

    #[test]
    fn blocked_transpose_matches_the_definition_on_one_and_two_threads() {
        for (r, c) in [(1, 1), (3, 17), (40, 33), (600, 515)] {
            let x: Vec<u32> = (0..(r * c) as u32).collect();
            let one = blocked(&x, r, c);
            for i in 0..r {
                for j in 0..c {
                    assert_eq!(one[j * r + i], x[i * c + j]);
                }
            }
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(2)
                .build()
                .unwrap();
            assert_eq!(pool.install(|| blocked(&x, r, c)), one);
        }
    }
}
