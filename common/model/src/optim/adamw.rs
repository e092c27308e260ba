//! AdamW (Loshchilov & Hutter, decoupled weight decay) with checkpointable state.
//!
//! For each parameter θ with gradient g, at step t (starting at 1):
//! `m ← β1 m + (1-β1) g`, `v ← β2 v + (1-β2) g²`, `m̂ = m / (1-β1^t)`, `v̂ = v / (1-β2^t)`,
//! `θ ← θ (1 - lr·λ) - lr · m̂ / (√v̂ + ε)`.

use candle_core::backprop::GradStore;
use candle_core::{CpuStorage, Storage, Tensor, Var};
use candle_nn::VarMap;

use super::error::{OptimError, Result};
use caprl_kernels::kernels_enabled;

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
        let data = crate::model::params::locked(varmap)?;
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

    /// Steps taken so far (feature `test-support`).
    #[cfg(any(test, feature = "test-support"))]
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
        self.step_with(grads, lr, |t| kernels_enabled(t.device(), t.dtype()))
    }

    /// [`AdamW::step`], taking the fused host update for the parameters `fused` accepts (when
    /// their tensors allow it) and Candle's ops for the others.
    pub(crate) fn step_with(
        &mut self,
        grads: &GradStore,
        lr: f64,
        fused: impl Fn(&Tensor) -> bool,
    ) -> Result<()> {
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
            if fused(s.var.as_tensor()) && fused_update(&g, s, p, lr, bc1, bc2)? {
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

/// Parameters of at least four such chunks are updated on rayon's threads, a chunk each (every
/// element is computed the same way either way).
const PARALLEL_CHUNK: usize = 16 * 1024;

/// The same update in one pass over host slices (CPU f32/f64, contiguous tensors), writing θ, m
/// and v in place, instead of a dozen whole-tensor ops; `false` when the tensors do not qualify
/// (the caller uses the ops).
fn fused_update(g: &Tensor, s: &Slot, p: AdamWParams, lr: f64, bc1: f64, bc2: f64) -> Result<bool> {
    let theta = s.var.as_tensor();
    let n = theta.elem_count();
    let host = |t: &Tensor| t.device().is_cpu() && t.is_contiguous() && t.elem_count() == n;
    if g.shape() != theta.shape() || ![g, theta, &s.m, &s.v].into_iter().all(host) {
        return Ok(false);
    }
    let (gs, gl) = g.storage_and_layout();
    let Storage::Cpu(gc) = &*gs else {
        return Ok(false);
    };
    let (ga, gb) = gl.contiguous_offsets().unwrap_or((0, 0));
    // m, v and θ are locked for writing one inside the other (three distinct storages).
    let mut done = false;
    with_host_mut(&s.m, |mc, (ma, mb)| {
        with_host_mut(&s.v, |vc, (va, vb)| {
            with_host_mut(theta, |tc, (ta, tb)| {
                macro_rules! update {
                    ($t:ty, $g:expr, $th:expr, $m:expr, $v:expr) => {{
                        let g = &$g[ga..gb];
                        let (th, m, v) = (&mut $th[ta..tb], &mut $m[ma..mb], &mut $v[va..vb]);
                        let (b1, b2) = (p.beta1 as $t, p.beta2 as $t);
                        let (c1, c2) = ((1.0 - p.beta1) as $t, (1.0 - p.beta2) as $t);
                        let (ibc1, ibc2) = ((1.0 / bc1) as $t, (1.0 / bc2) as $t);
                        let decay = (1.0 - lr * p.weight_decay) as $t;
                        let (lr_, eps) = (lr as $t, p.eps as $t);
                        // Compiled for the level in use (the same bits at every level).
                        let kernel = |g: &[$t], th: &mut [$t], m: &mut [$t], v: &mut [$t]| {
                            caprl_kernels::fastmath::vectorised!(for i in 0..th.len() {
                                let mi = b1 * m[i] + c1 * g[i];
                                let vi = b2 * v[i] + c2 * g[i] * g[i];
                                th[i] =
                                    th[i] * decay - lr_ * (mi * ibc1) / ((vi * ibc2).sqrt() + eps);
                                m[i] = mi;
                                v[i] = vi;
                            })
                        };
                        if rayon::current_num_threads() > 1 && n >= 4 * PARALLEL_CHUNK {
                            use rayon::prelude::*;
                            g.par_chunks(PARALLEL_CHUNK)
                                .zip(th.par_chunks_mut(PARALLEL_CHUNK))
                                .zip(m.par_chunks_mut(PARALLEL_CHUNK))
                                .zip(v.par_chunks_mut(PARALLEL_CHUNK))
                                .for_each(|(((g, th), m), v)| kernel(g, th, m, v));
                        } else {
                            kernel(g, th, m, v);
                        }
                        done = true;
                    }};
                }
                match (gc, tc, mc, vc) {
                    (
                        CpuStorage::F32(g),
                        CpuStorage::F32(t),
                        CpuStorage::F32(m),
                        CpuStorage::F32(v),
                    ) => update!(f32, g, t, m, v),
                    (
                        CpuStorage::F64(g),
                        CpuStorage::F64(t),
                        CpuStorage::F64(m),
                        CpuStorage::F64(v),
                    ) => update!(f64, g, t, m, v),
                    _ => {}
                }
                Ok(())
            })
        })
    })?;
    Ok(done)
}

/// Runs `f` on the host storage of `t` locked for writing, with the range of `t`'s elements
/// (`t` contiguous on the CPU), through candle's in-place op hook.
fn with_host_mut(
    t: &Tensor,
    f: impl FnOnce(&mut CpuStorage, (usize, usize)) -> candle_core::Result<()>,
) -> candle_core::Result<()> {
    struct Hook<F>(std::sync::Mutex<Option<F>>);
    impl<F: FnOnce(&mut CpuStorage, (usize, usize)) -> candle_core::Result<()>>
        candle_core::InplaceOp1 for Hook<F>
    {
        fn name(&self) -> &'static str {
            "adamw-in-place"
        }
        fn cpu_fwd(&self, s: &mut CpuStorage, l: &candle_core::Layout) -> candle_core::Result<()> {
            let range = l.contiguous_offsets().ok_or_else(|| {
                candle_core::Error::Msg("adamw: a state tensor is not contiguous".into())
            })?;
            let f = self.0.lock().ok().and_then(|mut f| f.take());
            f.map_or(Ok(()), |f| f(s, range))
        }
    }
    t.inplace_op1(&Hook(std::sync::Mutex::new(Some(f))))
}

#[cfg(test)]
mod tests {
    use candle_core::{DType, Device, Tensor};
    use candle_nn::VarMap;

    use super::*;

    /// Two optimizers over identical vars of several sizes (one large enough for the chunked
    /// parallel update), stepped by the same gradients; the largest difference of the weights
    /// after `steps` steps, `fused_a`/`fused_b` choosing each one's path.
    fn run(dtype: DType, steps: usize, fused_a: bool, fused_b: bool) -> f64 {
        let sizes = [7usize, 300, 5 * PARALLEL_CHUNK + 3];
        let make = || {
            let vm = VarMap::new();
            for (i, &n) in sizes.iter().enumerate() {
                let vals: Vec<f64> = (0..n)
                    .map(|j| ((i * 31 + j) as f64 * 0.173).sin())
                    .collect();
                let t = Tensor::new(vals, &Device::Cpu)
                    .unwrap()
                    .to_dtype(dtype)
                    .unwrap();
                let var = candle_core::Var::from_tensor(&t).unwrap();
                vm.data().lock().unwrap().insert(format!("p{i}"), var);
            }
            vm
        };
        let (va, vb) = (make(), make());
        let p = AdamWParams {
            weight_decay: 0.05,
            ..AdamWParams::default()
        };
        let mut oa = AdamW::new(&va, p).unwrap();
        let mut ob = AdamW::new(&vb, p).unwrap();
        for step in 0..steps {
            // loss = Σ c ⊙ θ + ½ Σ θ², so g = c + θ: the gradient follows the weights.
            let grads = |opt: &AdamW| {
                let mut loss: Option<Tensor> = None;
                for (i, var) in opt.vars().iter().enumerate() {
                    let theta = var.as_tensor();
                    let n = theta.elem_count();
                    let c: Vec<f64> = (0..n)
                        .map(|j| ((step * 7 + i * 13 + j) as f64 * 0.311).cos() * 0.5)
                        .collect();
                    let c = Tensor::new(c, &Device::Cpu)
                        .unwrap()
                        .to_dtype(dtype)
                        .unwrap();
                    let term = ((theta * &c).unwrap().sum_all().unwrap()
                        + (theta.sqr().unwrap().sum_all().unwrap() * 0.5).unwrap())
                    .unwrap();
                    loss = Some(match loss {
                        Some(l) => (l + term).unwrap(),
                        None => term,
                    });
                }
                loss.unwrap().backward().unwrap()
            };
            let (ga, gb) = (grads(&oa), grads(&ob));
            oa.step_with(&ga, 1e-2, |_| fused_a).unwrap();
            ob.step_with(&gb, 1e-2, |_| fused_b).unwrap();
        }
        let mut worst = 0f64;
        for (a, b) in oa.vars().iter().zip(ob.vars()) {
            let d = (a.as_tensor() - b.as_tensor())
                .unwrap()
                .abs()
                .unwrap()
                .to_dtype(DType::F64)
                .unwrap()
                .max_all()
                .unwrap()
                .to_scalar::<f64>()
                .unwrap();
            worst = worst.max(d);
        }
        worst
    }

    /// The fused host update and Candle's op-based update (the one CUDA runs) are the same
    /// AdamW: after several steps their weights agree within 1e-6.
    #[test]
    fn fused_and_op_based_adamw_agree_after_several_steps() {
        for dtype in [DType::F32, DType::F64] {
            let d = run(dtype, 6, true, false);
            assert!(d < 1e-6, "{dtype:?}: fused vs ops differ by {d:e}");
            assert!(
                run(dtype, 6, true, true) == 0.0,
                "{dtype:?}: a run repeats exactly"
            );
        }
    }
}
