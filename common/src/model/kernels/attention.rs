//! Additive (Bahdanau) attention as one graph node (CPU, f32/f64):
//! `e = tanh(proj + q)`, `s = e w`, `α = softmax(s)`, `ctx = α · feats`, from the region
//! projections `proj` `[B, R, A]`, the query term `q` `[B, A]` and the score weights `w`
//! `[A, 1]`, over the regions `feats` `[B, R, D]` (a constant: no gradient). As graph ops this
//! was a broadcast add, a tanh, a product, a softmax and a batched product per decoder step,
//! each with its own buffers and gradient sums, and the att model's teacher-forced pass ran
//! at half PyTorch's speed; here a step is one pass over each image's regions forward and one
//! backward, with the tanh of `fastmath` and `e` and `α` kept between them.
//!
//! Backward: `dα = dctx · featsᵀ`, `ds = α ⊙ (dα − Σ α dα)`, `dw = Σ ds e`,
//! `dproj = ds wᵀ ⊙ (1 − e²)`, `dq = Σ_r dproj`.

use std::sync::Mutex;

use candle_core::{CpuStorage, CustomOp3, DType, Layout, Shape, Tensor};

use super::kernels_enabled;
use super::real::{contiguous, dot, err, Real, Saved};
use super::softmax::softmax_in_place;
use crate::model::error::Result;

/// The context `[B, D]`, or `None` where the graph ops must run (other devices and dtypes).
pub(crate) fn additive_attention(
    proj: &Tensor,
    q: &Tensor,
    w: &Tensor,
    feats: &Tensor,
) -> Result<Option<Tensor>> {
    let native = kernels_enabled(proj.device(), proj.dtype())
        && [q, w, feats]
            .iter()
            .all(|t| t.dtype() == proj.dtype() && t.device().is_cpu());
    if !native {
        return Ok(None);
    }
    let op = Attention {
        feats: feats.detach().contiguous()?,
        saved: Mutex::new(None),
    };
    Ok(Some(proj.contiguous()?.apply_op3(
        &q.contiguous()?,
        &w.contiguous()?,
        op,
    )?))
}

struct Attention {
    feats: Tensor,
    /// `e` `[B, R, A]` and `α` `[B, R]`, kept by the forward pass for the backward one.
    saved: Mutex<Option<(Saved, Saved)>>,
}

/// `(B, R, A, D)` of a call.
fn sizes(
    proj: &Layout,
    q: &Layout,
    w: &Layout,
    feats: &Tensor,
) -> candle_core::Result<(usize, usize, usize, usize)> {
    let (b, r, a) = proj.shape().dims3()?;
    let (fb, fr, d) = feats.dims3()?;
    if q.shape().dims() != [b, a] || w.shape().elem_count() != a || (fb, fr) != (b, r) {
        return Err(err(format!(
            "attention: shapes proj {:?}, q {:?}, w {:?}, feats {:?} do not fit",
            proj.shape(),
            q.shape(),
            w.shape(),
            feats.shape()
        )));
    }
    Ok((b, r, a, d))
}

/// `f` of the values of the contiguous CPU tensor `t`, read in place.
fn with_cpu<T: Real, R>(
    t: &Tensor,
    what: &str,
    f: impl FnOnce(&[T]) -> candle_core::Result<R>,
) -> candle_core::Result<R> {
    let (s, l) = t.storage_and_layout();
    match &*s {
        candle_core::Storage::Cpu(c) => f(contiguous::<T>(c, l, what)?),
        _ => Err(err(format!("attention: {what} is not on the CPU"))),
    }
}

impl Attention {
    fn fwd_typed<T: RowKernels>(
        &self,
        (s1, l1): (&CpuStorage, &Layout),
        (s2, l2): (&CpuStorage, &Layout),
        (s3, l3): (&CpuStorage, &Layout),
    ) -> candle_core::Result<Vec<T>> {
        let dims = sizes(l1, l2, l3, &self.feats)?;
        let proj = contiguous::<T>(s1, l1, "proj")?;
        let q = contiguous::<T>(s2, l2, "q")?;
        let w = contiguous::<T>(s3, l3, "w")?;
        let (ctx, e, alpha) = with_cpu::<T, _>(&self.feats, "feats", |feats| {
            Ok(T::forward(proj, q, w, feats, dims))
        })?;
        let mut saved = self
            .saved
            .lock()
            .map_err(|_| err("attention: lock poisoned".into()))?;
        *saved = Some((T::wrap(e), T::wrap(alpha)));
        Ok(ctx)
    }

    fn bwd_typed<T: RowKernels>(
        &self,
        proj: &Tensor,
        q: &Tensor,
        w: &Tensor,
        dctx: &Tensor,
    ) -> candle_core::Result<(Tensor, Tensor, Tensor)> {
        let (b, r, a, d) = sizes(proj.layout(), q.layout(), w.layout(), &self.feats)?;
        let saved = self
            .saved
            .lock()
            .map_err(|_| err("attention: lock poisoned".into()))?;
        let missing = || err("attention: backward without a forward pass".into());
        let (e, alpha) = saved.as_ref().ok_or_else(missing)?;
        let (e, alpha) = (
            T::unwrap(e).ok_or_else(missing)?,
            T::unwrap(alpha).ok_or_else(missing)?,
        );
        let dctx = dctx.contiguous()?;
        let (dproj, dq, dw) = with_cpu::<T, _>(&self.feats, "feats", |feats| {
            with_cpu::<T, _>(w, "w", |w| {
                with_cpu::<T, _>(&dctx, "output gradient", |g| {
                    Ok(T::backward(e, alpha, feats, w, g, (b, r, a, d)))
                })
            })
        })?;
        Ok((
            Tensor::from_vec(dproj, proj.shape(), proj.device())?,
            Tensor::from_vec(dq, q.shape(), q.device())?,
            Tensor::from_vec(dw, w.shape(), w.device())?,
        ))
    }
}

/// `(B, R, A, D)`: images, regions, attention size, region size.
type Dims = (usize, usize, usize, usize);

/// The passes over the rows, built for this CPU's widest vector unit (`fastmath::simd`): the
/// tanh and the context sums run over whole vectors, and every dot product over `A` or `D`
/// keeps [`dot`]'s partial sums, added in a fixed order (so a CPU gives the same bits whatever
/// its vector width).
trait RowKernels: Real {
    /// `(ctx, e, α)`.
    fn forward(
        proj: &[Self],
        q: &[Self],
        w: &[Self],
        feats: &[Self],
        dims: Dims,
    ) -> (Vec<Self>, Vec<Self>, Vec<Self>);
    /// `(dproj, dq, dw)` from the saved `e`, `α` and the context's gradient `g` (module docs).
    fn backward(
        e: &[Self],
        alpha: &[Self],
        feats: &[Self],
        w: &[Self],
        g: &[Self],
        dims: Dims,
    ) -> (Vec<Self>, Vec<Self>, Vec<Self>);
}

macro_rules! row_kernels {
    ($t:ty, $fwd:ident, $bwd:ident) => {
        crate::fastmath::simd_dispatch!(
            fn $fwd(proj: &[$t], q: &[$t], w: &[$t], feats: &[$t], dims: Dims)
                -> (Vec<$t>, Vec<$t>, Vec<$t>) = forward_plain
        );
        crate::fastmath::simd_dispatch!(
            fn $bwd(e: &[$t], alpha: &[$t], feats: &[$t], w: &[$t], g: &[$t], dims: Dims)
                -> (Vec<$t>, Vec<$t>, Vec<$t>) = backward_plain
        );
        impl RowKernels for $t {
            fn forward(proj: &[$t], q: &[$t], w: &[$t], feats: &[$t], dims: Dims)
                -> (Vec<$t>, Vec<$t>, Vec<$t>) {
                $fwd(proj, q, w, feats, dims)
            }
            fn backward(e: &[$t], alpha: &[$t], feats: &[$t], w: &[$t], g: &[$t], dims: Dims)
                -> (Vec<$t>, Vec<$t>, Vec<$t>) {
                $bwd(e, alpha, feats, w, g, dims)
            }
        }
    };
}
row_kernels!(f32, forward_f32, backward_f32);
row_kernels!(f64, forward_f64, backward_f64);

#[inline(always)]
fn forward_plain<T: Real>(
    proj: &[T],
    q: &[T],
    w: &[T],
    feats: &[T],
    (b, r, a, d): Dims,
) -> (Vec<T>, Vec<T>, Vec<T>) {
    let mut e = vec![T::ZERO; b * r * a];
    let mut alpha = vec![T::ZERO; b * r];
    let mut ctx = vec![T::ZERO; b * d];
    for i in 0..b {
        let qi = &q[i * a..(i + 1) * a];
        let al = &mut alpha[i * r..(i + 1) * r];
        for (j, s) in al.iter_mut().enumerate() {
            let at = (i * r + j) * a;
            let ej = &mut e[at..at + a];
            for ((x, &p), &qa) in ej.iter_mut().zip(&proj[at..at + a]).zip(qi) {
                *x = (p + qa).tanh_();
            }
            *s = dot(ej, w);
        }
        softmax_in_place(al, T::exp_);
        let ci = &mut ctx[i * d..(i + 1) * d];
        for (j, s) in al.iter().enumerate() {
            let f = &feats[(i * r + j) * d..(i * r + j + 1) * d];
            for (c, &x) in ci.iter_mut().zip(f) {
                *c += *s * x;
            }
        }
    }
    (ctx, e, alpha)
}

#[inline(always)]
fn backward_plain<T: Real>(
    e: &[T],
    alpha: &[T],
    feats: &[T],
    w_v: &[T],
    g: &[T],
    (b, r, a, d): Dims,
) -> (Vec<T>, Vec<T>, Vec<T>) {
    let mut dproj = vec![T::ZERO; b * r * a];
    let mut dq = vec![T::ZERO; b * a];
    let mut dw = vec![T::ZERO; a];
    let mut ds = vec![T::ZERO; r];
    for i in 0..b {
        let gi = &g[i * d..(i + 1) * d];
        let al = &alpha[i * r..(i + 1) * r];
        let mut mean = T::ZERO;
        for (j, s) in ds.iter_mut().enumerate() {
            let da = dot(&feats[(i * r + j) * d..(i * r + j + 1) * d], gi);
            *s = da;
            mean += al[j] * da;
        }
        let dqi = &mut dq[i * a..(i + 1) * a];
        for (j, s) in ds.iter_mut().enumerate() {
            *s = al[j] * (*s - mean);
            let at = (i * r + j) * a;
            let ej = &e[at..at + a];
            for ((((dp, dqa), dwa), &x), &wa) in dproj[at..at + a]
                .iter_mut()
                .zip(dqi.iter_mut())
                .zip(dw.iter_mut())
                .zip(ej)
                .zip(w_v)
            {
                *dwa += *s * x;
                *dp = *s * wa * (T::ONE - x * x);
                *dqa += *dp;
            }
        }
    }
    (dproj, dq, dw)
}

impl CustomOp3 for Attention {
    fn name(&self) -> &'static str {
        "additive-attention"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (b, _, _, d) = sizes(l1, l2, l3, &self.feats)?;
        let args = ((s1, l1), (s2, l2), (s3, l3));
        let out = match s1 {
            CpuStorage::F32(_) => CpuStorage::F32(self.fwd_typed::<f32>(args.0, args.1, args.2)?),
            CpuStorage::F64(_) => CpuStorage::F64(self.fwd_typed::<f64>(args.0, args.1, args.2)?),
            _ => return Err(err("attention: f32 or f64 expected".into())),
        };
        Ok((out, Shape::from((b, d))))
    }

    fn bwd(
        &self,
        proj: &Tensor,
        q: &Tensor,
        w: &Tensor,
        _res: &Tensor,
        dctx: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let (dp, dq, dw) = match proj.dtype() {
            DType::F32 => self.bwd_typed::<f32>(proj, q, w, dctx)?,
            DType::F64 => self.bwd_typed::<f64>(proj, q, w, dctx)?,
            other => return Err(err(format!("attention: dtype {other:?} (f32 or f64)"))),
        };
        Ok((Some(dp), Some(dq), Some(dw)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::op_check::{assert_close as close, grads_of_weighted_sum, values};
    use candle_core::{Var, D};

    #[test]
    fn fused_attention_matches_the_graph_ops_with_gradients() {
        // Sizes below one vector of partial sums, and whole vectors plus a remainder.
        for dims in [(3, 5, 4, 6), (2, 7, 37, 70)] {
            check_against_graph_ops(dims);
        }
    }

    fn check_against_graph_ops((b, r, a, d): Dims) {
        let proj = Var::from_tensor(&values(&[b, r, a], 1, 1.0)).unwrap();
        let q = Var::from_tensor(&values(&[b, a], 2, 1.0)).unwrap();
        let w = Var::from_tensor(&values(&[a, 1], 3, 1.0)).unwrap();
        let feats = values(&[b, r, d], 4, 1.0);
        let up = values(&[b, d], 5, 1.0);
        let fused = additive_attention(proj.as_tensor(), q.as_tensor(), w.as_tensor(), &feats)
            .unwrap()
            .unwrap();
        let e = proj
            .as_tensor()
            .broadcast_add(&q.as_tensor().unsqueeze(1).unwrap())
            .unwrap()
            .tanh()
            .unwrap();
        let s = e
            .reshape((b * r, a))
            .unwrap()
            .matmul(w.as_tensor())
            .unwrap()
            .reshape((b, 1, r))
            .unwrap();
        let alpha = candle_nn::ops::softmax(&s, D::Minus1).unwrap();
        let graph = alpha.matmul(&feats).unwrap().squeeze(1).unwrap();
        close(&fused, &graph);
        let gf = grads_of_weighted_sum(&fused, &up);
        let gg = grads_of_weighted_sum(&graph, &up);
        for v in [&proj, &q, &w] {
            close(
                gf.get(v.as_tensor()).unwrap(),
                gg.get(v.as_tensor()).unwrap(),
            );
        }
    }

    #[test]
    fn attention_refuses_shapes_that_do_not_fit() {
        let proj = values(&[2, 3, 4], 1, 1.0);
        let feats = values(&[2, 3, 5], 4, 1.0);
        let bad_q = values(&[2, 3], 2, 1.0);
        let w = values(&[4, 1], 3, 1.0);
        assert!(additive_attention(&proj, &bad_q, &w, &feats).is_err());
    }
}
