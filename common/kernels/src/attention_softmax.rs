//! Attention weights `softmax(scale · S)` over the last dimension, optionally causal, as one
//! graph node (CPU, f32/f64). As candle ops they are seven nodes (scale, mask add, max,
//! subtract, exp, sum, divide), each with its own output and zero-filled gradient.
//!
//! Causal: query `i` of `Tq` sees keys `0 ..= i + Tk − Tq` (teacher forcing has `Tq = Tk`); the
//! weights of the keys it does not see are exactly 0, as with a mask of −∞ added to the scores.
//! Backward, per row: `dS = scale · y ⊙ (dy − Σ dy ⊙ y)`.

use candle_core::{CpuStorage, CustomOp1, DType, Device, Layout, Shape, Tensor, D};

use super::real::{err, host_map1, host_map2, HostMap1, HostMap2, Real};
use crate::kernels_enabled;
use candle_core::Result;

/// `softmax(scale · scores)` over the last dimension of `scores` `[.., Tq, Tk]`, keys after
/// each query's position masked out when `causal`.
pub fn attention_weights(scores: &Tensor, scale: f64, causal: bool) -> Result<Tensor> {
    if !kernels_enabled(scores.device(), scores.dtype()) {
        return composite(scores, scale, causal);
    }
    let op = ScaledSoftmax { scale, causal };
    scores.contiguous()?.apply_op1(op)
}

/// The same as candle ops (other devices and dtypes, and the generic-ops mode).
fn composite(scores: &Tensor, scale: f64, causal: bool) -> Result<Tensor> {
    let mut s = (scores * scale)?;
    if causal {
        let (tq, tk) = (s.dim(D::Minus2)?, s.dim(D::Minus1)?);
        s = s.broadcast_add(&causal_mask(tq, tk, s.dtype(), s.device())?)?;
    }
    // The maximum subtracted for stability is a constant for the gradient, as it cancels.
    let max = s.max_keepdim(D::Minus1)?.detach();
    let e = s.broadcast_sub(&max)?.exp()?;
    e.broadcast_div(&e.sum_keepdim(D::Minus1)?)
}

/// The causal mask `[Tq, Tk]` added to the scores: 0 where a query sees a key, a large negative
/// elsewhere (finite, so that an f16 pass stays finite).
fn causal_mask(tq: usize, tk: usize, dtype: DType, device: &Device) -> Result<Tensor> {
    let never = if dtype == DType::F16 { -1e4f32 } else { -1e9 };
    let m: Vec<f32> = (0..tq * tk)
        .map(|i| match sees(i / tk, i % tk, tq, tk) {
            true => 0.0,
            false => never,
        })
        .collect();
    Tensor::from_vec(m, (tq, tk), device)?.to_dtype(dtype)
}

/// Whether query `i` of `tq` sees key `j` of `tk` under the causal mask.
fn sees(i: usize, j: usize, tq: usize, tk: usize) -> bool {
    j + tq <= i + tk
}

/// Turns scores into softmax weights in place: `w_j ← e^(w_j − max) / Σ_k e^(w_k − max)`,
/// `e` from `exp` ([`Real::exp_fast`] or the exact [`Real::exp_`]); inline it into a loop
/// built through `fastmath::simd_dispatch!`.
#[inline(always)]
pub fn softmax_in_place<T: Real>(w: &mut [T], exp: impl Fn(T) -> T) {
    let max = w.iter().fold(T::NEG_INFINITY, |m, &s| m.max_(s));
    let mut sum = T::ZERO;
    for s in w.iter_mut() {
        *s = exp(*s - max);
        sum += *s;
    }
    let inv = T::from_f64(1.0 / sum.to_f64());
    w.iter_mut().for_each(|s| *s *= inv);
}

struct ScaledSoftmax {
    scale: f64,
    causal: bool,
}

impl ScaledSoftmax {
    /// `(Tq, Tk)` of a `[.., Tq, Tk]` layout.
    fn dims(shape: &Shape) -> candle_core::Result<(usize, usize)> {
        let d = shape.dims();
        match d.len() {
            0 => Err(err("attention weights: scores need at least one dim".into())),
            1 => Ok((1, d[0])),
            n => Ok((d[n - 2], d[n - 1])),
        }
    }
}

impl HostMap1 for ScaledSoftmax {
    /// The weights from the scores `s`.
    #[inline(always)]
    fn apply<T: Real>(&self, s: &[T], shape: &Shape) -> candle_core::Result<Vec<T>> {
        let (tq, tk) = Self::dims(shape)?;
        let scale = T::from_f64(self.scale);
        let mut y: Vec<T> = s.iter().map(|&v| v * scale).collect();
        for (r, row) in y.chunks_exact_mut(tk.max(1)).enumerate() {
            let seen = match self.causal {
                true => (0..tk).take_while(|&j| sees(r % tq, j, tq, tk)).count(),
                false => tk,
            };
            softmax_in_place(&mut row[..seen], T::exp_fast);
            row[seen..].iter_mut().for_each(|w| *w = T::ZERO);
        }
        Ok(y)
    }
}

impl HostMap2 for ScaledSoftmax {
    /// `dS` from the weights `y` and their gradient `dy`.
    #[inline(always)]
    fn apply<T: Real>(&self, y: &[T], dy: &[T], shape: &Shape) -> candle_core::Result<Vec<T>> {
        let (_, tk) = Self::dims(shape)?;
        let scale = T::from_f64(self.scale);
        let mut ds = Vec::with_capacity(y.len());
        for (yr, gr) in y.chunks_exact(tk.max(1)).zip(dy.chunks_exact(tk.max(1))) {
            let dot = yr.iter().zip(gr).fold(T::ZERO, |a, (&w, &g)| a + w * g);
            ds.extend(yr.iter().zip(gr).map(|(&w, &g)| scale * w * (g - dot)));
        }
        Ok(ds)
    }
}

impl CustomOp1 for ScaledSoftmax {
    fn name(&self) -> &'static str {
        "attention-weights"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        host_map1(self, s, l, "attention weights")
    }

    fn bwd(&self, _s: &Tensor, y: &Tensor, dy: &Tensor) -> candle_core::Result<Option<Tensor>> {
        Ok(Some(host_map2(self, y, dy, "attention weights")?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op_check::{assert_same_with_gradients, values};
    use candle_core::Var;

    /// The node gives the weights and gradients of the candle ops, causal or not, for square
    /// and rectangular `[Tq, Tk]`, and a masked key's weight is exactly 0.
    #[test]
    fn node_matches_candle_ops_forward_and_backward() {
        for (dims, causal) in [
            ([2, 3, 5, 5], true),
            ([2, 3, 4, 6], true),
            ([2, 3, 5, 4], false),
            ([1, 1, 1, 7], true),
        ] {
            let s = Var::from_tensor(&values(&dims, 3, 4.0)).unwrap();
            let up = values(&dims, 5, 1.0);
            let node = attention_weights(s.as_tensor(), 0.35, causal).unwrap();
            let ops = composite(s.as_tensor(), 0.35, causal).unwrap();
            assert_same_with_gradients(&node, &ops, &up, &[&s]);
            if causal {
                let (tq, tk) = (dims[2], dims[3]);
                let w: Vec<f64> = node.flatten_all().unwrap().to_vec1().unwrap();
                for (n, &v) in w.iter().enumerate() {
                    let (i, j) = ((n / tk) % tq, n % tk);
                    assert_eq!(v == 0.0, !sees(i, j, tq, tk), "weight {n} = {v}");
                }
            }
        }
    }
}
