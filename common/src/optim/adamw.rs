//! AdamW (Loshchilov & Hutter, decoupled weight decay) with checkpointable state.
//!
//! For each parameter θ with gradient g, at step t (starting at 1):
//! `m ← β1 m + (1-β1) g`, `v ← β2 v + (1-β2) g²`, `m̂ = m / (1-β1^t)`, `v̂ = v / (1-β2^t)`,
//! `θ ← θ (1 - lr·λ) - lr · m̂ / (√v̂ + ε)`.

use candle_core::backprop::GradStore;
use candle_core::{Tensor, Var};
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
