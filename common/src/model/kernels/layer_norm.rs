//! The Annotated Transformer's layer norm over the last dimension as one graph node (CPU,
//! f32/f64): `y = g · (x − μ) / (σ + ε) + b`, `σ` the unbiased std. As candle ops it is ten
//! nodes (mean, subtract, square, sum, scale, sqrt, add, divide, multiply, add), each with its
//! own output and zero-filled gradient.
//!
//! Backward, per row of `d` values with `xc = x − μ`, `s = σ + ε`, `x̂ = xc / s`, `ĝ = dy ⊙ g`:
//! `dxc = ĝ / s + xc · dσ / (σ (d − 1))` with `dσ = −Σ ĝ ⊙ xc / s²`, then
//! `dx = dxc − mean(dxc)`; `dg = Σ_rows dy ⊙ x̂`, `db = Σ_rows dy`.

use std::sync::Mutex;

use candle_core::{CpuStorage, CustomOp3, Layout, Shape, Tensor, D};

use super::kernels_enabled;
use super::real::{contiguous, err, Real, Saved};
use crate::model::error::Result;

/// `g · (x − mean) / (std + eps) + b` over the last dimension of `x`, `g` and `b` `[d]`.
pub(crate) fn layer_norm(x: &Tensor, gain: &Tensor, bias: &Tensor, eps: f64) -> Result<Tensor> {
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
    Ok(xc
        .broadcast_div(&std)?
        .broadcast_mul(gain)?
        .broadcast_add(bias)?)
}

/// Appends one row's norm `g · x̂ + b`, `x̂ = (x − μ) / (σ + eps)`, to `out`, hands each `x̂` to
/// `xhat`, and returns `(σ, σ + eps)`; the statistics are accumulated in f64 ([`lane_sum`]).
/// The one place the formula is written: the graph node and the host decoding steps both call
/// it.
pub(crate) fn norm_row<T: Real>(
    row: &[T],
    g: &[T],
    b: &[T],
    eps: f64,
    out: &mut Vec<T>,
    mut xhat: impl FnMut(T),
) -> (f64, f64) {
    let d = row.len();
    let mean = lane_sum(row, |v| v) / d as f64;
    let var = lane_sum(row, |v| (v - mean) * (v - mean)) / (d.max(2) - 1) as f64;
    let sigma = var.sqrt();
    let s = sigma + eps;
    for ((v, gi), bi) in row.iter().zip(g).zip(b) {
        let h = T::from_f64((v.to_f64() - mean) / s);
        xhat(h);
        out.push(*gi * h + *bi);
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
        let mut y = Vec::with_capacity(x.len());
        let mut xhat = Vec::with_capacity(x.len());
        let mut stats = Vec::with_capacity(2 * x.len() / d);
        for row in x.chunks_exact(d) {
            let (sigma, s) = norm_row(row, g, b, self.eps, &mut y, |h| xhat.push(h));
            stats.push(sigma);
            stats.push(s);
        }
        *self
            .saved
            .lock()
            .map_err(|_| err("layer norm: lock poisoned".into()))? =
            Some((T::wrap(xhat), f64::wrap(stats)));
        Ok(y)
    }

    /// `(dx, dg, db)` from `dy`.
    fn backward<T: Real>(
        &self,
        dy: &[T],
        g: &[T],
    ) -> candle_core::Result<(Vec<T>, Vec<T>, Vec<T>)> {
        let guard = self
            .saved
            .lock()
            .map_err(|_| err("layer norm: lock poisoned".into()))?;
        let (xhat, stats) = guard
            .as_ref()
            .ok_or_else(|| err("layer norm: backward before forward".into()))?;
        let xhat = T::unwrap(xhat).ok_or_else(|| err("layer norm: saved dtype".into()))?;
        let stats = f64::unwrap(stats).ok_or_else(|| err("layer norm: saved dtype".into()))?;
        let d = g.len();
        let denom = (d.max(2) - 1) as f64;
        let mut dx = Vec::with_capacity(dy.len());
        let mut dg = vec![T::ZERO; d];
        let mut db = vec![T::ZERO; d];
        let mut dxc = vec![0f64; d];
        for (r, (dyr, hr)) in dy.chunks_exact(d).zip(xhat.chunks_exact(d)).enumerate() {
            let (sigma, s) = (stats[2 * r], stats[2 * r + 1]);
            // xc = x̂ · s, so dσ = −Σ ĝ · xc / s² = −Σ ĝ · x̂ / s.
            let mut dsigma = 0f64;
            for i in 0..d {
                let gh = (dyr[i] * g[i]).to_f64();
                dsigma -= gh * hr[i].to_f64() / s;
                dg[i] += dyr[i] * hr[i];
                db[i] += dyr[i];
            }
            // dxc = ĝ/s + x̂ · s · dσ / (σ (d − 1)); a constant row (σ = 0) passes ĝ/s only.
            let k = if sigma > 0.0 {
                dsigma * s / (sigma * denom)
            } else {
                0.0
            };
            let mut mean = 0f64;
            for i in 0..d {
                dxc[i] = (dyr[i] * g[i]).to_f64() / s + hr[i].to_f64() * k;
                mean += dxc[i];
            }
            let mean = mean / d as f64;
            dx.extend(dxc.iter().map(|&v| T::from_f64(v - mean)));
        }
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
        let out = match s1 {
            CpuStorage::F32(_) => CpuStorage::F32(self.forward(
                contiguous::<f32>(s1, l1, "x")?,
                contiguous::<f32>(s2, l2, "gain")?,
                contiguous::<f32>(s3, l3, "bias")?,
            )?),
            CpuStorage::F64(_) => CpuStorage::F64(self.forward(
                contiguous::<f64>(s1, l1, "x")?,
                contiguous::<f64>(s2, l2, "gain")?,
                contiguous::<f64>(s3, l3, "bias")?,
            )?),
            _ => return Err(err("layer norm: f32 or f64 expected".into())),
        };
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
        let (dx, dg, db) = match (&*gs, &*ws) {
            (candle_core::Storage::Cpu(g @ CpuStorage::F32(_)), candle_core::Storage::Cpu(w)) => {
                let (dx, dg, db) = self.backward(
                    contiguous::<f32>(g, gl, "gradient")?,
                    contiguous::<f32>(w, wl, "gain")?,
                )?;
                (
                    Tensor::from_vec(dx, x.shape(), x.device())?,
                    Tensor::from_vec(dg, gain.shape(), gain.device())?,
                    Tensor::from_vec(db, gain.shape(), gain.device())?,
                )
            }
            (candle_core::Storage::Cpu(g @ CpuStorage::F64(_)), candle_core::Storage::Cpu(w)) => {
                let (dx, dg, db) = self.backward(
                    contiguous::<f64>(g, gl, "gradient")?,
                    contiguous::<f64>(w, wl, "gain")?,
                )?;
                (
                    Tensor::from_vec(dx, x.shape(), x.device())?,
                    Tensor::from_vec(dg, gain.shape(), gain.device())?,
                    Tensor::from_vec(db, gain.shape(), gain.device())?,
                )
            }
            _ => return Err(err("layer norm: CPU f32 or f64 gradient expected".into())),
        };
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
