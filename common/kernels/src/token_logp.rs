//! The log-probability of given tokens under the output layer, as one graph node (CPU, f32/f64):
//! `log p(y_n) = z_n[y_n] − log Σ_v exp z_n[v]` with `z_n = h_n Wᵀ + b`.
//!
//! A matmul, bias add, log-softmax (five ops) and gather would be eight nodes over `[N, V]`, each
//! with a zero-filled gradient plus an add in the backward pass. Backward:
//! `dz_n = g_n (onehot(y_n) − softmax(z_n))`, then `dh = dz W`, `dW = dzᵀ h`, `db = Σ_n dz_n`.
//!
//! The node also reads the first `H` values of wider rows (an LSTM's packed `[h, c]` states)
//! and applies the output layer's dropout mask, so the decoder's states go in as they come out
//! of the recurrent layer: no narrow, transpose, mask multiply or copy nodes over `[N, H]`.

use std::sync::Mutex;

use candle_core::{CpuStorage, CustomOp3, Layout, Shape, Tensor};

use super::linear::{self, WLayout};
use super::real::{
    by_dtype, by_storage_dtype, contiguous, err, host_values, lock_saved, no_forward_pass, Real,
    Saved,
};
use crate::kernels_enabled;
use candle_core::Result;

/// `log p(targets[n])` `[N]` from the top hidden states `h` `[.., S]`, `N` rows in all (the
/// first `H` values of each row are read, `S ≥ H`), the output weights `W` `[V, H]` and bias `b` `[V]`; `mask`
/// `[N, H]` (row-major), when given, multiplies the states read (dropout). `None` when the
/// tensors are not CPU f32/f64 of one dtype (the caller takes candle's ops). Targets must be
/// below `V` (checked).
pub fn token_log_softmax(
    h: &Tensor,
    w: &Tensor,
    b: &Tensor,
    targets: Vec<u32>,
    mask: Option<Vec<f32>>,
) -> Result<Option<Tensor>> {
    let native = kernels_enabled(h.device(), h.dtype())
        && w.dtype() == h.dtype()
        && b.dtype() == h.dtype()
        && w.device().is_cpu()
        && b.device().is_cpu();
    if !native {
        return Ok(None);
    }
    let h = h.contiguous()?;
    let w = w.contiguous()?;
    let b = b.contiguous()?;
    let save = h.track_op() || w.track_op() || b.track_op();
    let op = TokenLogSoftmax {
        targets,
        mask,
        save,
        probs: Mutex::new(None),
        input: Mutex::new(None),
    };
    Ok(Some(if save {
        h.apply_op3(&w, &b, op)?
    } else {
        h.apply_op3_no_bwd(&w, &b, &op)?
    }))
}

struct TokenLogSoftmax {
    targets: Vec<u32>,
    /// Dropout mask `[N, H]` on the states read.
    mask: Option<Vec<f32>>,
    save: bool,
    /// `softmax(z)` `[N, V]`, kept by the forward pass for the backward one.
    probs: Mutex<Option<Saved>>,
    /// The output layer's input `[N, H]` when it is not `h` itself (wider rows or a mask).
    input: Mutex<Option<Saved>>,
}

/// Sizes of one call: `N` rows, `S` values per row of `h`, of which the first `K` are read,
/// `V` words.
#[derive(Clone, Copy)]
struct Sizes {
    n: usize,
    s: usize,
    k: usize,
    v: usize,
}

/// The sizes for the layouts of `h`, `W`, `b`.
fn sizes(
    lh: &Layout,
    lw: &Layout,
    lb: &Layout,
    targets: usize,
    mask: Option<usize>,
) -> candle_core::Result<Sizes> {
    let s = lh.shape().dims().last().copied().unwrap_or(0);
    let n = lh.shape().elem_count() / s.max(1);
    let (v, k) = lw.shape().dims2()?;
    if lh.shape().rank() < 2
        || s < k
        || lb.shape().elem_count() != v
        || targets != n
        || v == 0
        || mask.is_some_and(|m| m != n * k)
    {
        return Err(err(format!(
            "token log-softmax: shapes h {:?}, w {:?}, b {:?} and {targets} targets do not fit",
            lh.shape(),
            lw.shape(),
            lb.shape()
        )));
    }
    Ok(Sizes { n, s, k, v })
}

impl TokenLogSoftmax {
    fn fwd_typed<T: Real>(
        &self,
        (s1, l1): (&CpuStorage, &Layout),
        (s2, l2): (&CpuStorage, &Layout),
        (s3, l3): (&CpuStorage, &Layout),
    ) -> candle_core::Result<Vec<T>> {
        let Sizes { n, s, k, v } = self.sizes(l1, l2, l3)?;
        if let Some(bad) = self.targets.iter().find(|&&y| y as usize >= v) {
            return Err(err(format!(
                "token log-softmax: target {bad} outside a vocabulary of {v}"
            )));
        }
        let h = contiguous::<T>(s1, l1, "h")?;
        let w = contiguous::<T>(s2, l2, "w")?;
        let b = contiguous::<T>(s3, l3, "b")?;
        let read = self.read(h, s, k);
        // The logits, turned into probabilities in place row by row.
        let mut z = linear::forward(read.as_deref().unwrap_or(h), w, b, n, k, v, WLayout::Rows);
        let out = crate::fastmath::vectorised!(softmax_rows(&mut z, v, &self.targets));
        if self.save {
            *lock_saved(&self.probs, "token log-softmax")? = Some(T::wrap(z));
            if let Some(x) = read {
                *lock_saved(&self.input, "token log-softmax")? = Some(T::wrap(x));
            }
        }
        Ok(out)
    }

    fn sizes(&self, lh: &Layout, lw: &Layout, lb: &Layout) -> candle_core::Result<Sizes> {
        let mask = self.mask.as_ref().map(Vec::len);
        sizes(lh, lw, lb, self.targets.len(), mask)
    }

    /// The output layer's input `[N, K]`: the first `K` of each row of `h` `[N, S]` times the
    /// mask; `None` when that is `h` itself.
    fn read<T: Real>(&self, h: &[T], s: usize, k: usize) -> Option<Vec<T>> {
        if s == k && self.mask.is_none() {
            return None;
        }
        let mut x: Vec<T> = h
            .chunks_exact(s)
            .flat_map(|row| &row[..k])
            .copied()
            .collect();
        if let Some(mask) = &self.mask {
            for (a, &m) in x.iter_mut().zip(mask) {
                *a *= T::from_f64(m as f64);
            }
        }
        Some(x)
    }

    fn bwd_typed<T: Real>(
        &self,
        h: &Tensor,
        w: &Tensor,
        b: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Tensor, Tensor, Tensor)> {
        let Sizes { n, s, k, v } = self.sizes(h.layout(), w.layout(), b.layout())?;
        let missing = || no_forward_pass("token log-softmax");
        let slot = lock_saved(&self.probs, "token log-softmax")?;
        let probs = slot.as_ref().and_then(T::unwrap).ok_or_else(missing)?;
        let input = lock_saved(&self.input, "token log-softmax")?;
        let grad = grad.contiguous()?;
        let (sh, lh) = h.storage_and_layout();
        let (sw, lw) = w.storage_and_layout();
        let (sg, lg) = grad.storage_and_layout();
        let g = host_values::<T>(&sg, lg, "token log-softmax: output gradient")?;
        let dz = crate::fastmath::vectorised!(logit_grads(probs, g, v, &self.targets));
        let x = match input.as_ref() {
            Some(saved) => T::unwrap(saved).ok_or_else(missing)?,
            None => host_values::<T>(&sh, lh, "token log-softmax: h")?,
        };
        let mut grads = linear::backward(
            x,
            host_values::<T>(&sw, lw, "token log-softmax: w")?,
            &dz,
            n,
            k,
            v,
            1,
            WLayout::Rows,
        );
        if let Some(mask) = &self.mask {
            for (a, &m) in grads.dx.iter_mut().zip(mask) {
                *a *= T::from_f64(m as f64);
            }
        }
        if s != k {
            // The gradient of the values not read (an LSTM's cell states) is zero.
            let mut dh = vec![T::ZERO; n * s];
            for (row, dx) in dh.chunks_exact_mut(s).zip(grads.dx.chunks_exact(k)) {
                row[..k].copy_from_slice(dx);
            }
            grads.dx = dh;
        }
        grads.into_tensors(h, w, b)
    }
}

/// Turns each row of logits `z` `[N, V]` into probabilities in place and returns each row's
/// `log p(target)`; the exponentials are the library's (exact).
#[inline(always)]
fn softmax_rows<T: Real>(z: &mut [T], v: usize, targets: &[u32]) -> Vec<T> {
    let mut out = Vec::with_capacity(targets.len());
    for (row, &y) in z.chunks_exact_mut(v).zip(targets) {
        let max = row.iter().copied().fold(T::NEG_INFINITY, T::max_);
        let zy = row[y as usize] - max;
        let mut sum = T::ZERO;
        for x in row.iter_mut() {
            *x = (*x - max).exp_();
            sum += *x;
        }
        // log p(y) = z_y − max − log Σ exp(z − max)
        out.push(zy - sum.ln_());
        let inv = T::ONE / sum;
        for x in row.iter_mut() {
            *x *= inv;
        }
    }
    out
}

/// `dz_n = g_n (onehot(y_n) − p_n)` for every row of the probabilities `p` `[N, V]`.
#[inline(always)]
fn logit_grads<T: Real>(probs: &[T], g: &[T], v: usize, targets: &[u32]) -> Vec<T> {
    let mut dz = Vec::with_capacity(probs.len());
    for ((p, &gn), &y) in probs.chunks_exact(v).zip(g).zip(targets) {
        let at = dz.len();
        dz.extend(p.iter().map(|&q| T::ZERO - gn * q));
        dz[at + y as usize] += gn;
    }
    dz
}

impl CustomOp3 for TokenLogSoftmax {
    fn name(&self) -> &'static str {
        "token-log-softmax"
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
        let args = ((s1, l1), (s2, l2), (s3, l3));
        let out = by_storage_dtype!(s1, "token log-softmax", T => {
            self.fwd_typed::<T>(args.0, args.1, args.2)
        })?;
        Ok((out, Shape::from(self.targets.len())))
    }

    fn bwd(
        &self,
        h: &Tensor,
        w: &Tensor,
        b: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let (dh, dw, db) =
            by_dtype!(h.dtype(), "token log-softmax", T => self.bwd_typed::<T>(h, w, b, grad))?;
        Ok((Some(dh), Some(dw), Some(db)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op_check::{assert_close as close, grads_of_weighted_sum, values};
    use candle_core::{DType, Device, Var, D};

    /// The node's log-probabilities of `targets`.
    fn node(h: &Tensor, w: &Var, b: &Var, targets: &[u32], mask: Option<Vec<f32>>) -> Tensor {
        token_log_softmax(h, w.as_tensor(), b.as_tensor(), targets.to_vec(), mask)
            .unwrap()
            .unwrap()
    }

    /// `a` and `b` give the same gradients of `Σ y ⊙ up` to every parameter.
    fn same_grads(a: &Tensor, b: &Tensor, up: &Tensor, params: [&Var; 3]) {
        let (ga, gb) = (grads_of_weighted_sum(a, up), grads_of_weighted_sum(b, up));
        for p in params {
            close(
                ga.get(p.as_tensor()).unwrap(),
                gb.get(p.as_tensor()).unwrap(),
            );
        }
    }

    #[test]
    fn taken_token_logprobs_and_gradients_match_log_softmax_and_gather() {
        let (n, k, v) = (7, 4, 6);
        let h = Var::from_tensor(&values(&[n, k], 1, 2.0)).unwrap();
        let w = Var::from_tensor(&values(&[v, k], 2, 2.0)).unwrap();
        let b = Var::from_tensor(&values(&[v], 3, 2.0)).unwrap();
        let targets: Vec<u32> = (0..n as u32).map(|i| (i * 5 + 1) % v as u32).collect();
        let up = values(&[n], 4, 2.0);
        let fused = node(h.as_tensor(), &w, &b, &targets, None);
        let logits = h
            .as_tensor()
            .matmul(&w.as_tensor().t().unwrap())
            .unwrap()
            .broadcast_add(b.as_tensor())
            .unwrap();
        let idx = Tensor::from_vec(targets, (n, 1), &Device::Cpu).unwrap();
        let graph = candle_nn::ops::log_softmax(&logits, D::Minus1)
            .unwrap()
            .gather(&idx, 1)
            .unwrap()
            .squeeze(1)
            .unwrap();
        close(&fused, &graph);
        same_grads(&fused, &graph, &up, [&h, &w, &b]);
    }

    #[test]
    fn a_target_outside_the_vocabulary_is_an_error() {
        let err = token_log_softmax(
            &values(&[2, 3], 1, 2.0),
            &values(&[4, 3], 2, 2.0),
            &values(&[4], 3, 2.0),
            vec![1, 4],
            None,
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("outside a vocabulary of 4"),
            "{err}"
        );
    }

    /// Wider rows (an LSTM's `[h, c]`) and a dropout mask: the same values and gradients as
    /// narrowing, multiplying by the mask and taking the plain node; no gradient reaches the
    /// values not read.
    #[test]
    fn wide_rows_and_a_mask_match_narrow_and_multiply() {
        let (n, s, k, v) = (5, 7, 4, 6);
        let h = Var::from_tensor(&values(&[n, s], 1, 2.0)).unwrap();
        let w = Var::from_tensor(&values(&[v, k], 2, 2.0)).unwrap();
        let b = Var::from_tensor(&values(&[v], 3, 2.0)).unwrap();
        let targets: Vec<u32> = (0..n as u32).map(|i| (i * 5 + 2) % v as u32).collect();
        let mask: Vec<f32> = (0..n * k).map(|i| [1.25, 0.0, 1.25][i % 3]).collect();
        let up = values(&[n], 4, 2.0);
        let fused = node(h.as_tensor(), &w, &b, &targets, Some(mask.clone()));
        let m = Tensor::from_vec(mask, (n, k), &Device::Cpu)
            .unwrap()
            .to_dtype(DType::F64)
            .unwrap();
        let x = h.as_tensor().narrow(1, 0, k).unwrap().mul(&m).unwrap();
        let plain = node(&x, &w, &b, &targets, None);
        close(&fused, &plain);
        same_grads(&fused, &plain, &up, [&h, &w, &b]);
        let gf = grads_of_weighted_sum(&fused, &up);
        let dh = gf.get(h.as_tensor()).unwrap();
        let unread = dh.narrow(1, k, s - k).unwrap().abs().unwrap();
        assert_eq!(unread.sum_all().unwrap().to_scalar::<f64>().unwrap(), 0.0);
    }
}
