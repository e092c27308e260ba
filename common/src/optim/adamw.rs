//! AdamW (Loshchilov & Hutter, decoupled weight decay) with checkpointable state.
//!
//! For each parameter θ with gradient g, at step t (starting at 1):
//! `m ← β1 m + (1-β1) g`, `v ← β2 v + (1-β2) g²`, `m̂ = m / (1-β1^t)`, `v̂ = v / (1-β2^t)`,
//! `θ ← θ (1 - lr·λ) - lr · m̂ / (√v̂ + ε)`.

use candle_core::backprop::GradStore;
use candle_core::{CpuStorage, Storage, Tensor, Var};
use candle_nn::VarMap;

use super::error::{OptimError, Result};

/// Hyper-parameters (`[optim]` beta1, beta2, eps, weight_decay).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamWParams {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

impl Default for AdamWParams {
    fn default() -> Self {
        Self {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        }
    }
}

impl AdamWParams {
    fn validate(&self) -> Result<()> {
        let bad = |key, value: f64, expected| {
            Err(OptimError::Param {
                key,
                value: value.to_string(),
                expected,
            })
        };
        if !(0.0..1.0).contains(&self.beta1) {
            return bad("beta1", self.beta1, "must be in [0, 1)");
        }
        if !(0.0..1.0).contains(&self.beta2) {
            return bad("beta2", self.beta2, "must be in [0, 1)");
        }
        if self.eps.is_nan() || self.eps <= 0.0 {
            return bad("eps", self.eps, "must be > 0");
        }
        if self.weight_decay.is_nan() || self.weight_decay < 0.0 {
            return bad("weight_decay", self.weight_decay, "must be >= 0");
        }
        Ok(())
    }
}

/// One parameter's slot: its var and first/second moments.
pub(crate) struct Slot {
    pub name: String,
    pub var: Var,
    pub m: Tensor,
    pub v: Tensor,
}

/// AdamW over the vars of a `VarMap`, ordered by name.
pub struct AdamW {
    pub(crate) params: AdamWParams,
    pub(crate) slots: Vec<Slot>,
    pub(crate) t: u64,
}

impl AdamW {
    /// An optimizer for every var of `varmap` with zero moments.
    pub fn new(varmap: &VarMap, params: AdamWParams) -> Result<Self> {
        params.validate()?;
        let data = varmap.data().lock().map_err(|_| OptimError::Param {
            key: "varmap",
            value: "poisoned".into(),
            expected: "a VarMap whose lock was not poisoned by a panic",
        })?;
        let mut slots: Vec<Slot> = data
            .iter()
            .map(|(name, var)| {
                Ok(Slot {
                    name: name.clone(),
                    var: var.clone(),
                    m: var.as_tensor().zeros_like()?,
                    v: var.as_tensor().zeros_like()?,
                })
            })
            .collect::<Result<_>>()?;
        slots.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Self {
            params,
            slots,
            t: 0,
        })
    }

    /// Steps taken so far.
    pub fn step_count(&self) -> u64 {
        self.t
    }

    /// The hyper-parameters.
    pub fn params(&self) -> AdamWParams {
        self.params
    }

    /// The vars this optimizer updates, by name.
    pub fn vars(&self) -> Vec<Var> {
        self.slots.iter().map(|s| s.var.clone()).collect()
    }

    /// One AdamW update with learning rate `lr`; vars without a gradient are left unchanged
    /// (their moments too).
    pub fn step(&mut self, grads: &GradStore, lr: f64) -> Result<()> {
        if lr.is_nan() || lr < 0.0 {
            return Err(OptimError::Param {
                key: "lr",
                value: lr.to_string(),
                expected: "must be >= 0",
            });
        }
        self.t += 1;
        let p = self.params;
        let t = self.t as i32;
        let bc1 = 1.0 - p.beta1.powi(t);
        let bc2 = 1.0 - p.beta2.powi(t);
        for s in &mut self.slots {
            let Some(g) = grads.get(s.var.as_tensor()) else {
                continue;
            };
            let g = g.detach();
            if let Some((theta, m, v)) = fused_update(&g, s, p, lr, bc1, bc2)? {
                s.var.set(&theta)?;
                s.m = m;
                s.v = v;
                continue;
            }
            let m = ((&s.m * p.beta1)? + (&g * (1.0 - p.beta1))?)?;
            let v = ((&s.v * p.beta2)? + (g.sqr()? * (1.0 - p.beta2))?)?;
            let m_hat = (&m / bc1)?;
            let v_hat = (&v / bc2)?;
            let theta = s.var.as_tensor().detach();
            let decayed = (&theta * (1.0 - lr * p.weight_decay))?;
            let update = (m_hat / (v_hat.sqrt()? + p.eps)?)?;
            let next = (decayed - (update * lr)?)?;
            s.var.set(&next)?;
            s.m = m;
            s.v = v;
        }
        Ok(())
    }
}

/// The same update in one pass over host slices (CPU f32/f64, contiguous tensors) instead of a
/// dozen whole-tensor ops; `None` when the tensors do not qualify (the caller uses the ops).
fn fused_update(
    g: &Tensor,
    s: &Slot,
    p: AdamWParams,
    lr: f64,
    bc1: f64,
    bc2: f64,
) -> Result<Option<(Tensor, Tensor, Tensor)>> {
    let theta = s.var.as_tensor();
    if !theta.device().is_cpu() || g.shape() != theta.shape() {
        return Ok(None);
    }
    let (gs, gl) = g.storage_and_layout();
    let (ts, tl) = theta.storage_and_layout();
    let (ms, ml) = s.m.storage_and_layout();
    let (vs, vl) = s.v.storage_and_layout();
    let (Storage::Cpu(gc), Storage::Cpu(tc), Storage::Cpu(mc), Storage::Cpu(vc)) =
        (&*gs, &*ts, &*ms, &*vs)
    else {
        return Ok(None);
    };
    let range = |l: &candle_core::Layout| l.contiguous_offsets();
    let (Some(gr), Some(tr), Some(mr), Some(vr)) = (range(gl), range(tl), range(ml), range(vl))
    else {
        return Ok(None);
    };
    let shape = theta.shape().clone();
    let dev = theta.device().clone();
    macro_rules! update {
        ($t:ty, $g:expr, $th:expr, $m:expr, $v:expr) => {{
            let (g, th) = (&$g[gr.0..gr.1], &$th[tr.0..tr.1]);
            let (m0, v0) = (&$m[mr.0..mr.1], &$v[vr.0..vr.1]);
            let (b1, b2) = (p.beta1 as $t, p.beta2 as $t);
            let (c1, c2) = ((1.0 - p.beta1) as $t, (1.0 - p.beta2) as $t);
            let (ibc1, ibc2) = ((1.0 / bc1) as $t, (1.0 / bc2) as $t);
            let decay = (1.0 - lr * p.weight_decay) as $t;
            let (lr_, eps) = (lr as $t, p.eps as $t);
            let n = th.len();
            let (g, m0, v0) = (&g[..n], &m0[..n], &v0[..n]);
            let mut next: Vec<$t> = vec![0.0; n];
            let mut m1: Vec<$t> = vec![0.0; n];
            let mut v1: Vec<$t> = vec![0.0; n];
            for i in 0..n {
                let m = b1 * m0[i] + c1 * g[i];
                let v = b2 * v0[i] + c2 * g[i] * g[i];
                next[i] = th[i] * decay - lr_ * (m * ibc1) / ((v * ibc2).sqrt() + eps);
                m1[i] = m;
                v1[i] = v;
            }
            (
                Tensor::from_vec(next, shape.clone(), &dev)?,
                Tensor::from_vec(m1, shape.clone(), &dev)?,
                Tensor::from_vec(v1, shape, &dev)?,
            )
        }};
    }
    let out = match (gc, tc, mc, vc) {
        (CpuStorage::F32(g), CpuStorage::F32(t), CpuStorage::F32(m), CpuStorage::F32(v)) => {
            update!(f32, g, t, m, v)
        }
        (CpuStorage::F64(g), CpuStorage::F64(t), CpuStorage::F64(m), CpuStorage::F64(v)) => {
            update!(f64, g, t, m, v)
        }
        _ => return Ok(None),
    };
    Ok(Some(out))
}
