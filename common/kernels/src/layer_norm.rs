//! The Annotated Transformer's layer norm over the last dimension as one graph node (CPU,
//! f32/f64): `y = g · (x − μ) / (σ + ε) + b`, `σ` the unbiased std. As candle ops it is ten
//! nodes (mean, subtract, square, sum, scale, sqrt, add, divide, multiply, add), each with its
//! own output and zero-filled gradient.
//!
//! Backward, per row of `d` values with `xc = x − μ`, `s = σ + ε`, `x̂ = xc / s`, `ĝ = dy ⊙ g`:
//! `dxc = ĝ / s + xc · dσ / (σ (d − 1))` with `dσ = −Σ ĝ ⊙ xc / s²`, then
//! `dx = dxc − mean(dxc)`; `dg = Σ_rows dy ⊙ x̂`, `db = Σ_rows dy`.

use std::sync::Mutex;

use candle_core::{CpuStorage, CustomOp3, Layout, Shape, Storage, Tensor, D};

use super::real::{
    by_dtype, by_storage_dtype, contiguous, err, lock_saved, no_forward_pass, Real, Saved,
};
use crate::kernels_enabled;
use candle_core::Result;

/// `g · (x − mean) / (std + eps) + b` over the last dimension of `x`, `g` and `b` `[d]`.
pub fn layer_norm(x: &Tensor, gain: &Tensor, bias: &Tensor, eps: f64) -> Result<Tensor> {
    let native = kernels_enabled(x.device(), x.dtype())
        && gain.dtype() == x.dtype()
        && bias.dtype() == x.dtype();
    if !native {
        return composite(x, gain, bias, eps);
    }
    let op = LayerNorm {
        eps,
        saved: Mutex::new(None),
    };
    let (x, gain, bias) = (x.contiguous()?, gain.contiguous()?, bias.contiguous()?);
    let track = x.track_op() || gain.track_op() || bias.track_op();
    Ok(match track {
        true => x.apply_op3(&gain, &bias, op)?,
        false => x.apply_op3_no_bwd(&gain, &bias, &op)?,
    })
}

/// The same as candle ops (other devices and dtypes, and the generic-ops mode).
fn composite(x: &Tensor, gain: &Tensor, bias: &Tensor, eps: f64) -> Result<Tensor> {
    let d = x.dim(D::Minus1)?;
    let mean = x.mean_keepdim(D::Minus1)?;
    let xc = x.broadcast_sub(&mean)?;
    let var = (xc.sqr()?.sum_keepdim(D::Minus1)? / (d.max(2) - 1) as f64)?;
    let std = (var.sqrt()? + eps)?;
    xc.broadcast_div(&std)?
        .broadcast_mul(gain)?
        .broadcast_add(bias)
}

/// One row's norm `g · x̂ + b`, `x̂ = (x − μ) / (σ + eps)`, into `y` (and each `x̂` into
/// `xhat` when given); returns `(σ, σ + eps)`. The statistics are accumulated in f64
/// ([`lane_sum`]). The one place the formula is written: the graph node and the host decoding
/// steps both run it, through [`norm_rows`].
#[inline(always)]
fn norm_row<T: Real>(
    row: &[T],
    g: &[T],
    b: &[T],
    eps: f64,
    y: &mut [T],
    xhat: Option<&mut [T]>,
) -> (f64, f64) {
    let d = row.len();
    let mean = lane_sum(row, |v| v) / d as f64;
    let var = lane_sum(row, |v| (v - mean) * (v - mean)) / (d.max(2) - 1) as f64;
    let sigma = var.sqrt();
    let s = sigma + eps;
    let inv = 1.0 / s;
    let x_hat = |v: &T| T::from_f64((v.to_f64() - mean) * inv);
    match xhat {
        Some(xh) => {
            for ((((yi, hi), v), gi), bi) in y.iter_mut().zip(xh).zip(row).zip(g).zip(b) {
                *hi = x_hat(v);
                *yi = *gi * *hi + *bi;
            }
        }
        None => {
            for (((yi, v), gi), bi) in y.iter_mut().zip(row).zip(g).zip(b) {
                *yi = *gi * x_hat(v) + *bi;
            }
        }
    }
    (sigma, s)
}

/// Partial sums of [`lane_sum`].
const LANES: usize = 8;

/// `Σ f(vᵢ)` in f64, in [`LANES`] partial sums added in a fixed order: independent additions
/// instead of one chain, so the row's statistics cost a fraction of a serial sum.
#[inline(always)]
fn lane_sum<T: Real>(row: &[T], f: impl Fn(f64) -> f64) -> f64 {
    let mut acc = [0f64; LANES];
    let chunks = row.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for (a, v) in acc.iter_mut().zip(c) {
            *a += f(v.to_f64());
        }
    }
    let tail = rest.iter().fold(0f64, |s, v| s + f(v.to_f64()));
    acc.iter().fold(tail, |s, &a| s + a)
}

/// Every row of `d = g.len()` values of `x` normed into `y`, with each row's `x̂` into `xhat`
/// and `(σ, σ + eps)` into `stats` when given (the graph node keeps them for its backward pass;
/// decoding does not); compiled for the level in use (`fastmath::vectorised!`).
pub fn norm_rows<T: Real>(
    x: &[T],
    g: &[T],
    b: &[T],
    eps: f64,
    y: &mut [T],
    xhat: Option<&mut [T]>,
    stats: Option<&mut [f64]>,
) {
    crate::fastmath::vectorised!(norm_rows_plain(x, g, b, eps, y, xhat, stats))
}

/// `(dx, dg, db)` from `dy` and the forward pass's `x̂` and stats (module docs); `dg`, `db` are
/// added to; compiled for the level in use.
fn norm_grads<T: Real>(
    dy: &[T],
    g: &[T],
    xhat: &[T],
    stats: &[f64],
    dx: &mut [T],
    dg: &mut [T],
    db: &mut [T],
) {
    crate::fastmath::vectorised!(norm_grads_plain(dy, g, xhat, stats, dx, dg, db))
}

#[inline(always)]
fn norm_rows_plain<T: Real>(
    x: &[T],
    g: &[T],
    b: &[T],
    eps: f64,
    y: &mut [T],
    mut xhat: Option<&mut [T]>,
    mut stats: Option<&mut [f64]>,
) {
    let d = g.len();
    for (r, (row, yr)) in x.chunks_exact(d).zip(y.chunks_exact_mut(d)).enumerate() {
        let hr = xhat.as_deref_mut().map(|h| &mut h[r * d..(r + 1) * d]);
        let (sigma, s) = norm_row(row, g, b, eps, yr, hr);
        if let Some(st) = stats.as_deref_mut() {
            st[2 * r] = sigma;
            st[2 * r + 1] = s;
        }
    }
}

#[inline(always)]
fn norm_grads_plain<T: Real>(
    dy: &[T],
    g: &[T],
    xhat: &[T],
    stats: &[f64],
    dx: &mut [T],
    dg: &mut [T],
    db: &mut [T],
) {
    let d = g.len();
    let denom = (d.max(2) - 1) as f64;
    let rows = dy
        .chunks_exact(d)
        .zip(xhat.chunks_exact(d))
        .zip(dx.chunks_exact_mut(d));
    for (r, ((dyr, hr), dxr)) in rows.enumerate() {
        let (sigma, s) = (stats[2 * r], stats[2 * r + 1]);
        // With ĝ = dy ⊙ g: Σ ĝ, Σ ĝ ⊙ x̂ and Σ x̂ in 8 f64 lanes each.
        let (mut sg, mut sgh, mut sh) = ([0f64; LANES], [0f64; LANES], [0f64; LANES]);
        let lanes = dyr.chunks(LANES).zip(g.chunks(LANES)).zip(hr.chunks(LANES));
        for ((cy, cg), ch) in lanes {
            for (l, ((&u, &w), &h)) in cy.iter().zip(cg).zip(ch).enumerate() {
                let (gh, h) = ((u * w).to_f64(), h.to_f64());
                sg[l] += gh;
                sgh[l] += gh * h;
                sh[l] += h;
            }
        }
        let total = |a: [f64; LANES]| a.iter().fold(0f64, |t, &v| t + v);
        let (sg, sgh, sh) = (total(sg), total(sgh), total(sh));
        // xc = x̂ · s, so dσ = −Σ ĝ ⊙ xc / s² = −Σ ĝ ⊙ x̂ / s, and
        // dxc = ĝ / s + x̂ · s · dσ / (σ (d − 1)) = ĝ / s + k x̂; a constant row (σ = 0) passes
        // ĝ / s only. dx = dxc − mean(dxc).
        let inv = 1.0 / s;
        let k = if sigma > 0.0 {
            -sgh / (sigma * denom)
        } else {
            0.0
        };
        let mean = (sg * inv + sh * k) / d as f64;
        for ((((o, &u), &w), &h), (a, c)) in dxr
            .iter_mut()
            .zip(dyr)
            .zip(g)
            .zip(hr)
            .zip(dg.iter_mut().zip(db.iter_mut()))
        {
            *o = T::from_f64((u * w).to_f64() * inv + h.to_f64() * k - mean);
            *a += u * h;
            *c += u;
        }
    }
}

struct LayerNorm {
    eps: f64,
    /// From the forward pass: each row's `x̂` and `(σ, s)`.
    saved: Mutex<Option<(Saved, Saved)>>,
}

impl LayerNorm {
    /// The rows' statistics are accumulated in f64 whatever `T` is.
    fn forward<T: Real>(&self, x: &[T], g: &[T], b: &[T]) -> candle_core::Result<Vec<T>> {
        let d = g.len();
        if d == 0 || b.len() != d || !x.len().is_multiple_of(d) {
            return Err(err(format!(
                "layer norm: {} values for rows of {d} (bias {})",
                x.len(),
                b.len()
            )));
        }
        let mut y = vec![T::ZERO; x.len()];
        let mut xhat = vec![T::ZERO; x.len()];
        let mut stats = vec![0f64; 2 * x.len() / d];
        norm_rows(x, g, b, self.eps, &mut y, Some(&mut xhat), Some(&mut stats));
        *lock_saved(&self.saved, "layer norm")? = Some((T::wrap(xhat), f64::wrap(stats)));
        Ok(y)
    }

    /// `(dx, dg, db)` from `dy`.
    fn backward<T: Real>(
        &self,
        dy: &[T],
        g: &[T],
    ) -> candle_core::Result<(Vec<T>, Vec<T>, Vec<T>)> {
        let guard = lock_saved(&self.saved, "layer norm")?;
        let (xhat, stats) = guard
            .as_ref()
            .ok_or_else(|| no_forward_pass("layer norm"))?;
        let xhat = T::unwrap(xhat).ok_or_else(|| err("layer norm: saved dtype".into()))?;
        let stats = f64::unwrap(stats).ok_or_else(|| err("layer norm: saved dtype".into()))?;
        let d = g.len();
        if dy.len() != xhat.len() || stats.len() != 2 * dy.len() / d {
            return Err(err(format!(
                "layer norm: a gradient of {} values for {} normed ones",
                dy.len(),
                xhat.len()
            )));
        }
        let mut dx = vec![T::ZERO; dy.len()];
        let mut dg = vec![T::ZERO; d];
        let mut db = vec![T::ZERO; d];
        norm_grads(dy, g, xhat, stats, &mut dx, &mut dg, &mut db);
        Ok((dx, dg, db))
    }
}

impl CustomOp3 for LayerNorm {
    fn name(&self) -> &'static str {
        "layer-norm"
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
        let out = by_storage_dtype!(s1, "layer norm", T => self.forward(
            contiguous::<T>(s1, l1, "x")?,
            contiguous::<T>(s2, l2, "gain")?,
            contiguous::<T>(s3, l3, "bias")?,
        ))?;
        Ok((out, l1.shape().clone()))
    }

    fn bwd(
        &self,
        x: &Tensor,
        gain: &Tensor,
        _bias: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let grad = grad.contiguous()?;
        let (gs, gl) = grad.storage_and_layout();
        let (ws, wl) = gain.storage_and_layout();
        let (Storage::Cpu(g), Storage::Cpu(w)) = (&*gs, &*ws) else {
            return Err(err("layer norm: backward expects CPU tensors".into()));
        };
        let (dx, dg, db) = by_dtype!(grad.dtype(), "layer norm", T => {
            let (dx, dg, db) = self.backward(
                contiguous::<T>(g, gl, "gradient")?,
                contiguous::<T>(w, wl, "gain")?,
            )?;
            Ok((
                Tensor::from_vec(dx, x.shape(), x.device())?,
                Tensor::from_vec(dg, gain.shape(), gain.device())?,
                Tensor::from_vec(db, gain.shape(), gain.device())?,
            ))
        })?;
        Ok((Some(dx), Some(dg), Some(db)))
    }
}

#[cfg(test)]
mod tests {
    use candle_core::{DType, Device, Var};

    use super::*;

    /// The node and the ten candle ops agree on values and on the gradients of every input;
    /// on a constant row the node's gradient stays finite.
    #[test]
    fn the_layer_norm_node_matches_candle_ops_with_gradients() {
        let dev = Device::Cpu;
        let mut vals: Vec<f64> = (0..4 * 6)
            .map(|i| ((i * 37 % 11) as f64 - 5.0) / 3.0)
            .collect();
        vals[18..24].fill(0.5);
        let x = Var::from_tensor(&Tensor::from_vec(vals, (4, 6), &dev).unwrap()).unwrap();
        let g = Var::from_tensor(
            &Tensor::from_vec((0..6).map(|i| 0.5 + i as f64 / 7.0).collect(), 6, &dev).unwrap(),
        )
        .unwrap();
        let b = Var::from_tensor(&Tensor::from_vec(vec![0.1f64; 6], 6, &dev).unwrap()).unwrap();
        let w = Tensor::from_vec(
            (0..24).map(|i| (i as f64 * 0.3).sin()).collect(),
            (4, 6),
            &dev,
        )
        .unwrap();
        let run = |node: bool| {
            let y = match node {
                true => layer_norm(&x, &g, &b, 1e-6).unwrap(),
                false => composite(&x, &g, &b, 1e-6).unwrap(),
            };
            let grads = (&y * &w).unwrap().sum_all().unwrap().backward().unwrap();
            let flat = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f64>().unwrap();
            let grad = |v: &Var| flat(grads.get(v.as_tensor()).unwrap());
            (flat(&y), grad(&x), grad(&g), grad(&b))
        };
        let (a, c) = (run(true), run(false));
        for (name, p, q) in [
            ("y", &a.0, &c.0),
            ("dx", &a.1, &c.1),
            ("dg", &a.2, &c.2),
            ("db", &a.3, &c.3),
        ] {
            for (i, (u, v)) in p.iter().zip(q.iter()).enumerate() {
                if name == "dx" && i >= 18 {
                    // The constant row: candle's sqrt backward at 0 gives NaN; the node passes
                    // the gradient through x̂ = xc / eps only, which stays finite.
                    assert!(
                        u.is_finite() && v.is_nan(),
                        "constant row: node {u}, ops {v}"
                    );
                    continue;
                }
                assert!((u - v).abs() < 1e-9, "{name}[{i}]: node {u} vs ops {v}");
            }
        }
        assert_eq!(x.dtype(), DType::F64);
    }
}
