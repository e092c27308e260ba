//! `x + b` for a row vector `b` broadcast over the rows of `x`, as one graph node whose backward
//! sums the gradient's rows in one contiguous pass (candle's broadcast-add backward reduces over
//! the leading dims with a strided walk, which is slow for `[T·B, G]` gradients).
//!
//! `y[i, k] = x[i, k] + b[k]`; `dx = dy`, `db[k] = Σ_i dy[i, k]`.

use candle_core::{CpuStorage, CustomOp2, Layout, Shape, Tensor};

use super::real::{by_storage_dtype, contiguous};
use crate::kernels_enabled;
use candle_core::Result;

/// `x + b` with `b` `[K]` broadcast over the leading dims of `x` `[.., K]` (`x` may also be
/// `[N, M·K]`-shaped data given as `[N, M, K]` with `b` `[M, K]`: `b` covers the trailing dims).
pub fn add_row_bias(x: &Tensor, b: &Tensor) -> Result<Tensor> {
    let k = b.elem_count();
    if !kernels_enabled(x.device(), x.dtype())
        || x.dtype() != b.dtype()
        || k == 0
        || !x.elem_count().is_multiple_of(k)
        || !x.dims().ends_with(b.dims())
    {
        return x.broadcast_add(b);
    }
    x.contiguous()?.apply_op2(&b.contiguous()?, RowBias)
}

struct RowBias;

/// `x + b` row by row, compiled for the level in use.
fn add<T: Copy + std::ops::Add<Output = T>>(x: &[T], b: &[T]) -> Vec<T> {
    crate::fastmath::vectorised!(add_plain(x, b))
}

#[inline(always)]
fn add_plain<T: Copy + std::ops::Add<Output = T>>(x: &[T], b: &[T]) -> Vec<T> {
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks_exact(b.len()) {
        out.extend(row.iter().zip(b).map(|(&a, &c)| a + c));
    }
    out
}

/// The column sums of `g` `[.., k]`, compiled for the level in use.
fn col_sums<T: Copy + std::ops::AddAssign + Default>(g: &[T], k: usize) -> Vec<T> {
    crate::fastmath::vectorised!(col_sums_plain(g, k))
}

#[inline(always)]
fn col_sums_plain<T: Copy + std::ops::AddAssign + Default>(g: &[T], k: usize) -> Vec<T> {
    let mut s = vec![T::default(); k];
    for row in g.chunks_exact(k) {
        for (a, &v) in s.iter_mut().zip(row) {
            *a += v;
        }
    }
    s
}

impl CustomOp2 for RowBias {
    fn name(&self) -> &'static str {
        "row-bias-add"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let out = by_storage_dtype!(s1, "row bias", T => {
            Ok(add(contiguous::<T>(s1, l1, "x")?, contiguous::<T>(s2, l2, "b")?))
        })?;
        Ok((out, l1.shape().clone()))
    }

    fn bwd(
        &self,
        _x: &Tensor,
        b: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let k = b.elem_count();
        let g = grad.contiguous()?;
        let db = {
            let (st, l) = g.storage_and_layout();
            match &*st {
                candle_core::Storage::Cpu(c @ CpuStorage::F32(_)) => {
                    let dy = contiguous::<f32>(c, l, "gradient")?;
                    Tensor::from_vec(col_sums(dy, k), b.shape(), b.device())?
                }
                candle_core::Storage::Cpu(c @ CpuStorage::F64(_)) => {
                    let dy = contiguous::<f64>(c, l, "gradient")?;
                    Tensor::from_vec(col_sums(dy, k), b.shape(), b.device())?
                }
                _ => g
                    .flatten_to(g.rank() - 1 - b.rank())?
                    .sum(0)?
                    .reshape(b.shape())?,
            }
        };
        Ok((Some(g), Some(db)))
    }
}
