//! The learned value of a decoder state, shared by two objectives: mc-pg's baseline `b_φ(s_t)`
//! (paper 003) and actor-critic's critic `v_θ(s_t)` (paper 001). Both train it by MSE to a
//! per-token target `y_t` (mc-pg: the Monte-Carlo estimate of `Q(s_t, w_t)`; actor-critic: the
//! sequence return) and weight `log p(w_t)` by the advantage `A_t = y_t − v(s_t)`.
//!
//! The head reads detached hidden states (see [`ValueHead`]), and the advantage is detached from
//! the head, so the value loss trains only the head and the policy loss only the decoder.

use std::path::Path;

use candle_core::Tensor;
use caprl_model::model::{Device, ValueHead};
use caprl_model::optim::{AdamW, AdamWParams};

use crate::error::LearnerError;

/// The value head and its own optimizer (its learning rate is `optim.value_lr`; it never
/// decays its weights).
pub struct Critic {
    pub head: ValueHead,
    pub(crate) opt: AdamW,
}

impl Critic {
    /// A fresh head for decoder hidden size `hidden`.
    pub fn new(
        hidden: usize,
        device: &Device,
        adam: AdamWParams,
        seed: u64,
    ) -> Result<Self, LearnerError> {
        let head = ValueHead::new(hidden, device, seed)?;
        let opt = AdamW::new(head.varmap(), no_decay(adam))?;
        Ok(Self { head, opt })
    }

    /// A head and optimizer state saved by `Critic::save_files`.
    pub fn load(
        weights: &Path,
        optim: &Path,
        hidden: usize,
        device: &Device,
        adam: AdamWParams,
    ) -> Result<Self, LearnerError> {
        let head = ValueHead::load(weights, hidden, device)?;
        let mut opt = AdamW::new(head.varmap(), no_decay(adam))?;
        opt.load(optim)?;
        Ok(Self { head, opt })
    }
}

fn no_decay(adam: AdamWParams) -> AdamWParams {
    AdamWParams {
        weight_decay: 0.0,
        ..adam
    }
}

/// Per-token targets `[N][len_i]` as a zero-padded `[N, T]` tensor.
pub fn targets_tensor(
    targets: &[Vec<f32>],
    t: usize,
    device: &Device,
) -> Result<Tensor, LearnerError> {
    let mut flat = vec![0f32; targets.len() * t];
    for (row, y) in flat.chunks_mut(t).zip(targets) {
        let n = y.len().min(t);
        row[..n].copy_from_slice(&y[..n]);
    }
    Ok(Tensor::from_vec(flat, (targets.len(), t), device)?)
}

/// `A_t = y_t − v(s_t)` with no gradient into the head.
pub fn advantages(targets: &Tensor, values: &Tensor) -> candle_core::Result<Tensor> {
    targets.sub(&values.detach())
}

/// `Σ m (v − y)² / Σ m`: the head's regression loss over unmasked steps.
pub fn value_loss(values: &Tensor, targets: &Tensor, mask: &Tensor) -> candle_core::Result<Tensor> {
    let mask = mask.to_dtype(values.dtype())?;
    let tokens = mask.sum_all()?.maximum(1.0)?;
    values
        .sub(targets)?
        .sqr()?
        .mul(&mask)?
        .sum_all()?
        .div(&tokens)
}
