//! `max(x, 0)` as a graph node whose backward is one pass, `dx = dy` where the output is
//! positive and 0 elsewhere (CPU, f32/f64; at exactly 0 the gradient is 0, as in PyTorch, where
//! candle's passes it). Candle's relu backward builds a zero tensor, a comparison, its
//! conversion and a product, each a full-size buffer.

use candle_core::{CpuStorage, CustomOp1, Layout, Shape, Tensor};

use super::real::{host_map1, host_map2, HostMap1, HostMap2, Real};
use crate::kernels_enabled;
use candle_core::Result;

/// `max(x, 0)` elementwise.
pub fn relu(x: &Tensor) -> Result<Tensor> {
    if !kernels_enabled(x.device(), x.dtype()) {
        return x.relu();
    }
    x.contiguous()?.apply_op1(Relu)
}

struct Relu;

impl HostMap1 for Relu {
    #[inline(always)]
    fn apply<T: Real>(&self, x: &[T], _: &Shape) -> candle_core::Result<Vec<T>> {
        Ok(x.iter().map(|&v| v.max_(T::ZERO)).collect())
    }
}

impl HostMap2 for Relu {
    /// `dx` from the output `y` and its gradient `dy`.
    #[inline(always)]
    fn apply<T: Real>(&self, y: &[T], dy: &[T], _: &Shape) -> candle_core::Result<Vec<T>> {
        Ok(y.iter()
            .zip(dy)
            .map(|(&v, &g)| if v > T::ZERO { g } else { T::ZERO })
            .collect())
    }
}

impl CustomOp1 for Relu {
    fn name(&self) -> &'static str {
        "relu"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        host_map1(self, s, l, "relu")
    }

    fn bwd(&self, _x: &Tensor, y: &Tensor, dy: &Tensor) -> candle_core::Result<Option<Tensor>> {
        Ok(Some(host_map2(self, y, dy, "relu")?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op_check::{assert_same_with_gradients, values};
    use candle_core::Var;

    /// The node gives candle's relu and its gradient, also on a transposed (strided) input.
    #[test]
    fn node_matches_candle_relu_forward_and_backward() {
        // Shifted off 0, where candle's gradient and this one differ.
        let x = Var::from_tensor(&(values(&[5, 7], 2, 1.0) + 1e-3).unwrap()).unwrap();
        let xt = x.as_tensor().t().unwrap();
        let up = values(&[7, 5], 4, 1.0);
        let node = relu(&xt).unwrap();
        let ops = xt.relu().unwrap();
        assert_same_with_gradients(&node, &ops, &up, &[&x]);
    }
}
