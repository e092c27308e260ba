//! The log-probability of given tokens under the output layer, as one graph node (CPU, f32/f64):
//! `log p(y_n) = z_n[y_n] − log Σ_v exp z_n[v]` with `z_n = h_n Wᵀ + b`.
//!
//! A matmul, bias add, log-softmax (five ops) and gather would be eight nodes over `[N, V]`, each
//! with a zero-filled gradient plus an add in the backward pass. Backward:
//! `dz_n = g_n (onehot(y_n) − softmax(z_n))`, then `dh = dz W`, `dW = dzᵀ h`, `db = Σ_n dz_n`.

use std::sync::Mutex;

use candle_core::{CpuStorage, CustomOp3, DType, Layout, Shape, Tensor};

use super::error::Result;
use super::fused_rnn::{contiguous, err, supported, Real, Saved};
use super::linear::{self, WLayout};

/// `log p(targets[n])` `[N]` from the top hidden states `h` `[N, H]`, the output weights `W`
/// `[V, H]` and bias `b` `[V]`; `None` when the tensors are not CPU f32/f64 of one dtype (the
/// caller takes candle's ops). Targets must be below `V` (checked).
pub(crate) fn token_log_softmax(
    h: &Tensor,
    w: &Tensor,
    b: &Tensor,
    targets: Vec<u32>,
) -> Result<Option<Tensor>> {
    let native = supported(h.device(), h.dtype())
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
        save,
        probs: Mutex::new(None),
    };
    Ok(Some(if save {
        h.apply_op3(&w, &b, op)?
    } else {
        h.apply_op3_no_bwd(&w, &b, &op)?
    }))
}

struct TokenLogSoftmax {
    targets: Vec<u32>,
    save: bool,
    /// `softmax(z)` `[N, V]`, kept by the forward pass for the backward one.
    probs: Mutex<Option<Saved>>,
}

/// `(N, H, V)` for the layouts of `h`, `W`, `b`.
fn sizes(
    lh: &Layout,
    lw: &Layout,
    lb: &Layout,
    targets: usize,
) -> candle_core::Result<(usize, usize, usize)> {
    let (n, k) = lh.shape().dims2()?;
    let (v, k2) = lw.shape().dims2()?;
    if k != k2 || lb.shape().elem_count() != v || targets != n || v == 0 {
        return Err(err(format!(
            "token log-softmax: shapes h {:?}, w {:?}, b {:?} and {targets} targets do not fit",
            lh.shape(),
            lw.shape(),
            lb.shape()
        )));
    }
    Ok((n, k, v))
}

impl TokenLogSoftmax {
    fn fwd_typed<T: Real>(
        &self,
        (s1, l1): (&CpuStorage, &Layout),
        (s2, l2): (&CpuStorage, &Layout),
        (s3, l3): (&CpuStorage, &Layout),
    ) -> candle_core::Result<Vec<T>> {
        let (n, k, v) = sizes(l1, l2, l3, self.targets.len())?;
        if let Some(bad) = self.targets.iter().find(|&&y| y as usize >= v) {
            return Err(err(format!(
                "token log-softmax: target {bad} outside a vocabulary of {v}"
            )));
        }
        let h = contiguous::<T>(s1, l1, "h")?;
        let w = contiguous::<T>(s2, l2, "w")?;
        let b = contiguous::<T>(s3, l3, "b")?;
        // The logits, turned into probabilities in place row by row.
        let mut z = linear::forward(h, w, b, n, k, v, WLayout::Rows);
        let mut out = Vec::with_capacity(n);
        for (row, &y) in z.chunks_exact_mut(v).zip(&self.targets) {
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
        if self.save {
            *self
                .probs
                .lock()
                .map_err(|_| err("token log-softmax: lock poisoned".into()))? = Some(T::wrap(z));
        }
        Ok(out)
    }

    fn bwd_typed<T: Real>(
        &self,
        h: &Tensor,
        w: &Tensor,
        b: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Tensor, Tensor, Tensor)> {
        let (n, k, v) = sizes(h.layout(), w.layout(), b.layout(), self.targets.len())?;
        let slot = self
            .probs
            .lock()
            .map_err(|_| err("token log-softmax: lock poisoned".into()))?;
        let probs = slot
            .as_ref()
            .and_then(T::unwrap)
            .ok_or_else(|| err("token log-softmax: backward without a forward pass".into()))?;
        let grad = grad.contiguous()?;
        let (sh, lh) = h.storage_and_layout();
        let (sw, lw) = w.storage_and_layout();
        let (sg, lg) = grad.storage_and_layout();
        let (
            candle_core::Storage::Cpu(ch),
            candle_core::Storage::Cpu(cw),
            candle_core::Storage::Cpu(cg),
        ) = (&*sh, &*sw, &*sg)
        else {
            return Err(err("token log-softmax: backward expects CPU tensors".into()));
        };
        let g = contiguous::<T>(cg, lg, "output gradient")?;
        let mut dz = Vec::with_capacity(n * v);
        for ((p, &gn), &y) in probs.chunks_exact(v).zip(g).zip(&self.targets) {
            let at = dz.len();
            dz.extend(p.iter().map(|&q| T::ZERO - gn * q));
            dz[at + y as usize] += gn;
        }
        let grads = linear::backward(
            contiguous::<T>(ch, lh, "h")?,
            contiguous::<T>(cw, lw, "w")?,
            &dz,
            n,
            k,
            v,
            1,
            WLayout::Rows,
        );
        grads.into_tensors(h, w, b)
    }
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
        let out = match s1 {
            CpuStorage::F32(_) => CpuStorage::F32(self.fwd_typed::<f32>(args.0, args.1, args.2)?),
            CpuStorage::F64(_) => CpuStorage::F64(self.fwd_typed::<f64>(args.0, args.1, args.2)?),
            _ => return Err(err("token log-softmax: f32 or f64 expected".into())),
        };
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
        let (dh, dw, db) = match h.dtype() {
            DType::F32 => self.bwd_typed::<f32>(h, w, b, grad)?,
            DType::F64 => self.bwd_typed::<f64>(h, w, b, grad)?,
            other => {
                return Err(err(format!(
                    "token log-softmax: dtype {other:?} (f32 or f64)"
                )))
            }
        };
        Ok((Some(dh), Some(dw), Some(db)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::op_check::{assert_close as close, grads_of_weighted_sum, values};
    use candle_core::{Device, Var, D};

    #[test]
    fn taken_token_logprobs_and_gradients_match_log_softmax_and_gather() {
        let (n, k, v) = (7, 4, 6);
        let h = Var::from_tensor(&values(&[n, k], 1, 2.0)).unwrap();
        let w = Var::from_tensor(&values(&[v, k], 2, 2.0)).unwrap();
        let b = Var::from_tensor(&values(&[v], 3, 2.0)).unwrap();
        let targets: Vec<u32> = (0..n as u32).map(|i| (i * 5 + 1) % v as u32).collect();
        let up = values(&[n], 4, 2.0);
        let fused = token_log_softmax(h.as_tensor(), w.as_tensor(), b.as_tensor(), targets.clone())
            .unwrap()
            .unwrap();
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
        let gf = grads_of_weighted_sum(&fused, &up);
        let gg = grads_of_weighted_sum(&graph, &up);
        for p in [&h, &w, &b] {
            close(
                gf.get(p.as_tensor()).unwrap(),
                gg.get(p.as_tensor()).unwrap(),
            );
        }
    }

    #[test]
    fn a_target_outside_the_vocabulary_is_an_error() {
        let err = token_log_softmax(
            &values(&[2, 3], 1, 2.0),
            &values(&[4, 3], 2, 2.0),
            &values(&[4], 3, 2.0),
            vec![1, 4],
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("outside a vocabulary of 4"),
            "{err}"
        );
    }
}
