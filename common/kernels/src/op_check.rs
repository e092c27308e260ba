//! Test helpers for the hand-written graph nodes: deterministic f64 inputs, a tight comparison
//! with candle's ops, and the gradients of a weighted sum of an output.

use candle_core::backprop::GradStore;
use candle_core::{Device, Tensor, Var};

/// Deterministic values in `[-scale, scale)` of the given shape (f64, CPU).
pub fn values(shape: &[usize], seed: u64, scale: f64) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|i| {
            let h = ((i as u64 + 1) * (seed * 2654435761 + 97)) % 1000;
            h as f64 / 1000.0 * 2.0 * scale - scale
        })
        .collect();
    Tensor::from_vec(v, shape, &Device::Cpu).unwrap()
}

/// Panics unless `a` and `b` agree within 1e-10 everywhere.
pub fn assert_close(a: &Tensor, b: &Tensor) {
    let d = (a - b).unwrap().abs().unwrap().max_all().unwrap();
    assert!(d.to_scalar::<f64>().unwrap() < 1e-10, "{a} vs {b}");
}

/// The gradients of `Σ y ⊙ weights`.
pub fn grads_of_weighted_sum(y: &Tensor, weights: &Tensor) -> GradStore {
    y.mul(weights)
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap()
}

/// Panics unless node output `a` and graph output `b` agree, and so do the gradients of
/// `Σ a ⊙ up` and `Σ b ⊙ up` with respect to each of `vars`.
pub fn assert_same_with_gradients(a: &Tensor, b: &Tensor, up: &Tensor, vars: &[&Var]) {
    assert_close(a, b);
    let (ga, gb) = (grads_of_weighted_sum(a, up), grads_of_weighted_sum(b, up));
    for v in vars {
        assert_close(
            ga.get(v.as_tensor()).unwrap(),
            gb.get(v.as_tensor()).unwrap(),
        );
    }
}
