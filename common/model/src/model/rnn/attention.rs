//! Additive (Bahdanau) attention over region features, as in Show, Attend and Tell.
//!
//! `e_r = w_aᵀ tanh(W_f a_r + b_f + W_h h)`, `α = softmax(e)`, `ctx = Σ_r α_r a_r`, and the
//! first layer's gates get `W_ctx ctx`. The region projection `W_f a_r + b_f` is computed once
//! per image ([`AttKeys`]). A pass with gradients on the CPU kernels attends over
//! `W_ctx a_r` instead of `a_r` (the same term, `W_ctx Σ_r α_r a_r = Σ_r α_r W_ctx a_r`): one
//! product over each image's regions per pass replaces one over every row's context per step,
//! and the weight gradient of `W_ctx` becomes one product too.

use candle_core::{Tensor, D};
use candle_nn::ops::softmax;

use crate::model::error::Result;
use caprl_kernels::additive_attention::additive_attention;

/// Attention weights, transposed once per pass.
#[derive(Debug, Clone)]
pub(crate) struct AttWeights {
    /// `W_hᵀ` `[H, A]`.
    pub w_hid_t: Tensor,
    /// `w_a` as `[A, 1]`.
    pub w_score_t: Tensor,
}

/// What a region's value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AttValues {
    /// The region `a_r`: attending gives the context, which the step multiplies by `W_ctx`.
    Regions,
    /// `W_ctx a_r`: attending gives the first layer's context term itself.
    ContextTerms,
}

/// Per-batch attention inputs: each image's regions once, `kv` `[U, R, A + Dv]` (the projection
/// `W_f a_r + b_f`, then the value), and the image each row of the batch shows.
#[derive(Debug, Clone)]
pub(crate) struct AttKeys {
    pub kv: Tensor,
    /// `A`: the keys' width.
    pub keys: usize,
    pub values: AttValues,
    pub image: Vec<u32>,
}

impl AttKeys {
    /// Keeps rows `rows` of the batch (repeats allowed): the images stay, only the map changes.
    pub fn select(&self, rows: &[u32]) -> Self {
        Self {
            image: rows.iter().map(|&r| self.image[r as usize]).collect(),
            ..self.clone()
        }
    }
}

/// The attended values `[B, Dv]` for the query `h` `[B, H]`: one fused node on the CPU
/// ([`additive_attention`]), graph ops elsewhere.
pub(crate) fn attend(keys: &AttKeys, w: &AttWeights, h: &Tensor) -> Result<Tensor> {
    let q = h.matmul(&w.w_hid_t)?; // [B, A]
    if let Some(out) = additive_attention(&keys.kv, keys.keys, &keys.image, &q, &w.w_score_t)? {
        return Ok(out);
    }
    let (_, r, width) = keys.kv.dims3()?;
    let (b, a) = (keys.image.len(), keys.keys);
    let rows = Tensor::from_slice(&keys.image, b, keys.kv.device())?;
    let regions = keys.kv.index_select(&rows, 0)?; // [B, R, A + Dv]
    let q = q.unsqueeze(1)?; // [B, 1, A]
    let e = regions.narrow(2, 0, a)?.broadcast_add(&q)?.tanh()?; // [B, R, A]
    let scores = e
        .reshape((b * r, a))?
        .matmul(&w.w_score_t)?
        .reshape((b, 1, r))?;
    let alpha = softmax(&scores, D::Minus1)?; // [B, 1, R]
    Ok(alpha
        .matmul(&regions.narrow(2, a, width - a)?.contiguous()?)?
        .squeeze(1)?)
}
