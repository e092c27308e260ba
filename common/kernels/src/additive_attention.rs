//! Additive (Bahdanau) attention as one graph node (CPU, f32/f64):
//! `e = tanh(key + q)`, `s = e w`, `α = softmax(s)`, `out = α · values`, from the query term
//! `q` `[B, A]`, the score weights `w` `[A, 1]` and each image's regions as one tensor `kv`
//! `[U, R, A + D]`: per region its key (the region projection, `A` wide) then its value (`D`
//! wide). Row `i` of the batch attends over image `image[i]`'s regions, so an image shared by
//! several rows (its captions, samples or beams) is stored and differentiated once, and
//! reordering rows only remaps `image`. As graph ops this was a broadcast add, a tanh, a product,
//! a softmax and a batched product per decoder step, each with its own buffers and gradient
//! sums, and the att model's teacher-forced pass ran at half PyTorch's speed; here a step is one
//! pass over each row's regions forward and one backward, with the tanh of `fastmath` and `e`
//! and `α` kept between them.
//!
//! Backward: `dα = dout · valuesᵀ`, `ds = α ⊙ (dα − Σ α dα)`, `dw = Σ ds e`,
//! `dkey = ds wᵀ ⊙ (1 − e²)`, `dq = Σ_r dkey`, `dvalue = α dout`; the key and value gradients
//! of rows that share an image add up in that image's rows of `dkv`.

use std::sync::Mutex;

use candle_core::{CpuStorage, CustomOp3, Layout, Shape, Tensor};

use super::attention_softmax::softmax_in_place;
use super::real::{
    by_dtype, by_storage_dtype, contiguous, dot, err, host_values, lock_saved, no_forward_pass,
    Real, Saved,
};
use crate::kernels_enabled;
use candle_core::Result;

/// The attended values `[B, D]` for the keys of width `a` in `kv` `[U, R, a + D]`, or `None`
/// where the graph ops must run (other devices and dtypes).
pub fn additive_attention(
    kv: &Tensor,
    a: usize,
    image: &[u32],
    q: &Tensor,
    w: &Tensor,
) -> Result<Option<Tensor>> {
    let native = kernels_enabled(kv.device(), kv.dtype())
        && [q, w]
            .iter()
            .all(|t| t.dtype() == kv.dtype() && t.device().is_cpu());
    if !native {
        return Ok(None);
    }
    let op = Attention {
        a,
        image: image.to_vec(),
        saved: Mutex::new(None),
    };
    Ok(Some(kv.contiguous()?.apply_op3(
        &q.contiguous()?,
        &w.contiguous()?,
        op,
    )?))
}

struct Attention {
    /// Width of a key: the values start at column `a` of `kv`.
    a: usize,
    /// The image (row of `kv`) each row of the batch attends over.
    image: Vec<u32>,
    /// `e` `[B, R, A]` and `α` `[B, R]`, kept by the forward pass for the backward one.
    saved: Mutex<Option<(Saved, Saved)>>,
}

/// Sizes of one call: `b` rows, `u` images of `r` regions, keys `a` and values `d` wide.
#[derive(Clone, Copy)]
pub struct Dims {
    pub b: usize,
    pub u: usize,
    pub r: usize,
    pub a: usize,
    pub d: usize,
}

impl Attention {
    fn dims(&self, kv: &Layout, q: &Layout, w: &Layout) -> candle_core::Result<Dims> {
        let (u, r, width) = kv.shape().dims3()?;
        let (b, a) = q.shape().dims2()?;
        let fits = a == self.a
            && width > a
            && w.shape().elem_count() == a
            && self.image.len() == b
            && self.image.iter().all(|&i| (i as usize) < u);
        if !fits {
            return Err(err(format!(
                "attention: shapes kv {:?} (keys {} wide), q {:?}, w {:?} and {} row images do \
                 not fit",
                kv.shape(),
                self.a,
                q.shape(),
                w.shape(),
                self.image.len()
            )));
        }
        Ok(Dims {
            b,
            u,
            r,
            a,
            d: width - a,
        })
    }

    fn fwd_typed<T: Real>(
        &self,
        (s1, l1): (&CpuStorage, &Layout),
        (s2, l2): (&CpuStorage, &Layout),
        (s3, l3): (&CpuStorage, &Layout),
    ) -> candle_core::Result<Vec<T>> {
        let dims = self.dims(l1, l2, l3)?;
        let kv = contiguous::<T>(s1, l1, "kv")?;
        let q = contiguous::<T>(s2, l2, "q")?;
        let w = contiguous::<T>(s3, l3, "w")?;
        let Dims { b, r, a, d, .. } = dims;
        let (mut out, mut e, mut alpha) = (
            vec![T::ZERO; b * d],
            vec![T::ZERO; b * r * a],
            vec![T::ZERO; b * r],
        );
        rows_forward(kv, q, w, &self.image, dims, (&mut out, &mut e, &mut alpha));
        *lock_saved(&self.saved, "attention")? = Some((T::wrap(e), T::wrap(alpha)));
        Ok(out)
    }

    fn bwd_typed<T: Real>(
        &self,
        kv: &Tensor,
        q: &Tensor,
        w: &Tensor,
        dout: &Tensor,
    ) -> candle_core::Result<(Tensor, Tensor, Tensor)> {
        let dims = self.dims(kv.layout(), q.layout(), w.layout())?;
        let saved = lock_saved(&self.saved, "attention")?;
        let missing = || no_forward_pass("attention");
        let (e, alpha) = saved.as_ref().ok_or_else(missing)?;
        let (e, alpha) = (
            T::unwrap(e).ok_or_else(missing)?,
            T::unwrap(alpha).ok_or_else(missing)?,
        );
        let dout = dout.contiguous()?;
        let Dims { b, u, r, a, d } = dims;
        let (mut dkv, mut dq, mut dw) = (
            vec![T::ZERO; u * r * (a + d)],
            vec![T::ZERO; b * a],
            vec![T::ZERO; a],
        );
        let (skv, lkv) = kv.storage_and_layout();
        let (sw, lw) = w.storage_and_layout();
        let (sg, lg) = dout.storage_and_layout();
        rows_backward(
            e,
            alpha,
            host_values::<T>(&skv, lkv, "attention: kv")?,
            host_values::<T>(&sw, lw, "attention: w")?,
            host_values::<T>(&sg, lg, "attention: output gradient")?,
            &self.image,
            dims,
            (&mut dkv[..], &mut dq[..], &mut dw[..]),
        );
        Ok((
            Tensor::from_vec(dkv, kv.shape(), kv.device())?,
            Tensor::from_vec(dq, q.shape(), q.device())?,
            Tensor::from_vec(dw, w.shape(), w.device())?,
        ))
    }
}

/// `(out [B, D], e [B, R, A], α [B, R])`, written by [`rows_forward`].
pub type Outputs<'o, T> = (&'o mut [T], &'o mut [T], &'o mut [T]);
/// `(dkv [U, R, A + D], dq [B, A], dw [A])`: [`rows_backward`] adds into `dkv` and
/// `dw` and writes `dq`.
pub type Grads<'o, T> = (&'o mut [T], &'o mut [T], &'o mut [T]);

/// The forward passes over the rows, compiled for the level in use
/// (`fastmath::vectorised!`): the tanh and the value sums run over whole vectors, and every dot
/// product over `A` or `D` keeps [`dot`]'s partial sums, added in a fixed order (so every
/// level gives the same bits). Also run by the att model's fused recurrent layer, one step at
/// a time.
pub fn rows_forward<T: Real>(
    kv: &[T],
    q: &[T],
    w: &[T],
    image: &[u32],
    dims: Dims,
    out: Outputs<T>,
) {
    crate::fastmath::vectorised!(forward_plain(kv, q, w, image, dims, out))
}

/// The gradients from the saved `e`, `α` and the output's gradient `g` (module docs), compiled
/// for the level in use.
#[allow(clippy::too_many_arguments)]
pub fn rows_backward<T: Real>(
    e: &[T],
    alpha: &[T],
    kv: &[T],
    w: &[T],
    g: &[T],
    image: &[u32],
    dims: Dims,
    grads: Grads<T>,
) {
    crate::fastmath::vectorised!(backward_plain(e, alpha, kv, w, g, image, dims, grads))
}

/// Row `i`'s image: its `r` regions, each `[key | value]`.
#[inline(always)]
fn regions_of<'k, T>(kv: &'k [T], image: &[u32], i: usize, Dims { r, a, d, .. }: Dims) -> &'k [T] {
    let at = image[i] as usize * r * (a + d);
    &kv[at..at + r * (a + d)]
}

#[inline(always)]
fn forward_plain<T: Real>(
    kv: &[T],
    q: &[T],
    w: &[T],
    image: &[u32],
    dims: Dims,
    (out, e, alpha): Outputs<T>,
) {
    let Dims { b, r, a, d, .. } = dims;
    for i in 0..b {
        let regions = regions_of(kv, image, i, dims);
        let qi = &q[i * a..(i + 1) * a];
        let al = &mut alpha[i * r..(i + 1) * r];
        for ((s, region), ej) in al
            .iter_mut()
            .zip(regions.chunks_exact(a + d))
            .zip(e[i * r * a..(i + 1) * r * a].chunks_exact_mut(a))
        {
            for ((x, &k), &qa) in ej.iter_mut().zip(&region[..a]).zip(qi) {
                *x = (k + qa).tanh_();
            }
            *s = dot(ej, w);
        }
        softmax_in_place(al, T::exp_);
        let oi = &mut out[i * d..(i + 1) * d];
        oi.fill(T::ZERO);
        for (&s, region) in al.iter().zip(regions.chunks_exact(a + d)) {
            for (o, &v) in oi.iter_mut().zip(&region[a..]) {
                *o += s * v;
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn backward_plain<T: Real>(
    e: &[T],
    alpha: &[T],
    kv: &[T],
    w_v: &[T],
    g: &[T],
    image: &[u32],
    dims: Dims,
    (dkv, dq, dw): Grads<T>,
) {
    let Dims { b, r, a, d, .. } = dims;
    let mut ds = vec![T::ZERO; r];
    for i in 0..b {
        let regions = regions_of(kv, image, i, dims);
        let gi = &g[i * d..(i + 1) * d];
        let al = &alpha[i * r..(i + 1) * r];
        let mut mean = T::ZERO;
        for ((s, region), &aj) in ds.iter_mut().zip(regions.chunks_exact(a + d)).zip(al) {
            *s = dot(&region[a..], gi);
            mean += aj * *s;
        }
        let at = image[i] as usize * r * (a + d);
        let dregions = &mut dkv[at..at + r * (a + d)];
        let dqi = &mut dq[i * a..(i + 1) * a];
        dqi.fill(T::ZERO);
        for (((s, dregion), &aj), ej) in ds
            .iter_mut()
            .zip(dregions.chunks_exact_mut(a + d))
            .zip(al)
            .zip(e[i * r * a..(i + 1) * r * a].chunks_exact(a))
        {
            *s = aj * (*s - mean);
            let (dkey, dvalue) = dregion.split_at_mut(a);
            for ((((dk, dqa), dwa), &x), &wa) in dkey
                .iter_mut()
                .zip(dqi.iter_mut())
                .zip(dw.iter_mut())
                .zip(ej)
                .zip(w_v)
            {
                let dp = *s * wa * (T::ONE - x * x);
                *dwa += *s * x;
                *dk += dp;
                *dqa += dp;
            }
            for (dv, &gd) in dvalue.iter_mut().zip(gi) {
                *dv += aj * gd;
            }
        }
    }
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
        let Dims { b, d, .. } = self.dims(l1, l2, l3)?;
        let args = ((s1, l1), (s2, l2), (s3, l3));
        let out =
            by_storage_dtype!(s1, "attention", T => self.fwd_typed::<T>(args.0, args.1, args.2))?;
        Ok((out, Shape::from((b, d))))
    }

    fn bwd(
        &self,
        kv: &Tensor,
        q: &Tensor,
        w: &Tensor,
        _res: &Tensor,
        dout: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let (dkv, dq, dw) =
            by_dtype!(kv.dtype(), "attention", T => self.bwd_typed::<T>(kv, q, w, dout))?;
        Ok((Some(dkv), Some(dq), Some(dw)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op_check::{assert_same_with_gradients, values};
    use candle_core::{Var, D};

    #[test]
    fn fused_attention_matches_the_graph_ops_with_gradients() {
        // Sizes below one vector of partial sums, and whole vectors plus a remainder; rows with
        // an image each, and images shared by several rows in any order.
        check_against_graph_ops(5, 4, 6, &[0, 1, 2]);
        check_against_graph_ops(7, 37, 70, &[1, 0, 1, 1, 0]);
    }

    fn check_against_graph_ops(r: usize, a: usize, d: usize, image: &[u32]) {
        let b = image.len();
        let u = *image.iter().max().unwrap() as usize + 1;
        let kv = Var::from_tensor(&values(&[u, r, a + d], 1, 1.0)).unwrap();
        let q = Var::from_tensor(&values(&[b, a], 2, 1.0)).unwrap();
        let w = Var::from_tensor(&values(&[a, 1], 3, 1.0)).unwrap();
        let up = values(&[b, d], 5, 1.0);
        let fused = additive_attention(kv.as_tensor(), a, image, q.as_tensor(), w.as_tensor())
            .unwrap()
            .unwrap();
        let rows = Tensor::from_slice(image, b, &candle_core::Device::Cpu).unwrap();
        let regions = kv.as_tensor().index_select(&rows, 0).unwrap();
        let keys = regions.narrow(2, 0, a).unwrap();
        let vals = regions.narrow(2, a, d).unwrap();
        let e = keys
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
        let graph = alpha.matmul(&vals).unwrap().squeeze(1).unwrap();
        assert_same_with_gradients(&fused, &graph, &up, &[&kv, &q, &w]);
    }

    #[test]
    fn attention_refuses_shapes_that_do_not_fit() {
        let kv = values(&[2, 3, 9], 1, 1.0);
        let q = values(&[2, 4], 2, 1.0);
        let w = values(&[4, 1], 3, 1.0);
        assert!(additive_attention(&kv, 4, &[0, 1], &q, &w).is_ok());
        let bad_q = values(&[2, 3], 2, 1.0);
        assert!(additive_attention(&kv, 4, &[0, 1], &bad_q, &w).is_err());
        // An image past the stored ones, and one image for two rows' queries.
        assert!(additive_attention(&kv, 4, &[0, 2], &q, &w).is_err());
        assert!(additive_attention(&kv, 4, &[0], &q, &w).is_err());
    }
}
