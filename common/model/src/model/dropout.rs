//! Inverted dropout driven by the project RNG (reproducible; candle's CPU RNG cannot be seeded).

use candle_core::{CpuStorage, CustomOp1, Layout, Shape, Tensor};

use crate::model::error::Result;
use crate::model::rng::CaprlRng;
use caprl_kernels::kernels_enabled;
use caprl_kernels::real::{by_dtype, contiguous, err, host_map1, HostMap1, Real};

/// `x ⊙ m / (1 - p)` with `m ~ Bernoulli(1 - p)` drawn from `rng`; identity when `rng` is `None`
/// (evaluation) or `p == 0`.
///
/// The mask is drawn on the host (in `x`'s row-major element order) and copied to `x`'s device
/// (once per call; in a two-layer att model's training pass, once per step): the seeded host
/// RNG is what makes a run reproducible and identical across devices.
pub(crate) fn dropout(x: &Tensor, p: f32, rng: Option<&mut CaprlRng>) -> Result<Tensor> {
    match rng {
        Some(rng) if p > 0.0 => {
            let mask = rng.dropout_mask(x.elem_count(), p);
            apply_mask(x, mask)
        }
        _ => Ok(x.clone()),
    }
}

/// `x ⊙ mask`, `mask` in `x`'s row-major element order. On the CPU in f32/f64 one graph node
/// whose backward is `dy ⊙ mask` (candle's `mul` would also compute and store the gradient of
/// the mask, zero-filled buffers included).
pub(crate) fn apply_mask(x: &Tensor, mask: Vec<f32>) -> Result<Tensor> {
    if kernels_enabled(x.device(), x.dtype()) {
        return Ok(x.contiguous()?.apply_op1(MaskMul { mask })?);
    }
    let m = Tensor::from_vec(mask, x.shape(), x.device())?.to_dtype(x.dtype())?;
    Ok(x.mul(&m)?)
}

struct MaskMul {
    mask: Vec<f32>,
}

impl MaskMul {
    #[inline(always)]
    fn times<T: Real>(&self, x: &[T]) -> candle_core::Result<Vec<T>> {
        if x.len() != self.mask.len() {
            return Err(err(format!(
                "dropout: {} values but a mask of {}",
                x.len(),
                self.mask.len()
            )));
        }
        Ok(x.iter()
            .zip(&self.mask)
            .map(|(&v, &m)| v * T::from_f64(m as f64))
            .collect())
    }
}

impl HostMap1 for MaskMul {
    #[inline(always)]
    fn apply<T: Real>(&self, x: &[T], _: &Shape) -> candle_core::Result<Vec<T>> {
        self.times(x)
    }
}

impl CustomOp1 for MaskMul {
    fn name(&self) -> &'static str {
        "dropout"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        host_map1(self, s, l, "dropout")
    }

    fn bwd(
        &self,
        _x: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        let grad = grad.contiguous()?;
        let (s, l) = grad.storage_and_layout();
        let candle_core::Storage::Cpu(c) = &*s else {
            return Err(err("dropout: backward expects a CPU gradient".into()));
        };
        let out = by_dtype!(grad.dtype(), "dropout", T => Tensor::from_vec(
            caprl_kernels::fastmath::vectorised!(self.times(contiguous::<T>(c, l, "dy")?))?,
            l.shape(),
            grad.device(),
        ))?;
        Ok(Some(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Var;
    use caprl_kernels::op_check::{assert_same_with_gradients, values};

    /// The mask node gives `x ⊙ m` and `dx = dy ⊙ m`, as candle's `mul` does, also on a
    /// transposed (strided) input.
    #[test]
    fn mask_node_matches_mul_forward_and_backward() {
        let x = Var::from_tensor(&values(&[5, 6], 1, 2.0)).unwrap();
        let up = values(&[6, 5], 2, 2.0);
        let mask: Vec<f32> = (0..30).map(|i| [0.0, 1.25][i % 3 % 2]).collect();
        let xt = x.as_tensor().t().unwrap();
        let node = apply_mask(&xt, mask.clone()).unwrap();
        let m = Tensor::from_vec(mask, (6, 5), &candle_core::Device::Cpu)
            .unwrap()
            .to_dtype(candle_core::DType::F64)
            .unwrap();
        let graph = xt.mul(&m).unwrap();
        assert_same_with_gradients(&node, &graph, &up, &[&x]);
    }
}
