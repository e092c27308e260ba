//! Inverted dropout driven by the project RNG (reproducible; candle's CPU RNG cannot be seeded).

use candle_core::{Shape, Tensor};

use super::error::Result;
use super::rng::CaprlRng;

/// `x ⊙ m / (1 - p)` with `m ~ Bernoulli(1 - p)` drawn from `rng`; identity when `rng` is `None`
/// (evaluation) or `p == 0`.
///
/// The mask is drawn on the host and copied to `x`'s device (once per call; in a two-layer att
/// model's training pass, once per step): the seeded host RNG is what makes a run reproducible
/// and identical across devices.
pub(crate) fn dropout(x: &Tensor, p: f32, rng: Option<&mut CaprlRng>) -> Result<Tensor> {
    match rng {
        Some(rng) if p > 0.0 => {
            let shape: Shape = x.shape().clone();
            let mask = rng.dropout_mask(shape.elem_count(), p);
            let mask = Tensor::from_vec(mask, shape, x.device())?.to_dtype(x.dtype())?;
            Ok(x.mul(&mask)?)
        }
        _ => Ok(x.clone()),
    }
}
