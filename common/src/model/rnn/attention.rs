//! Additive (Bahdanau) attention over region features, as in Show, Attend and Tell.
//!
//! `e_r = w_aᵀ tanh(W_f a_r + b_f + W_h h)`, `α = softmax(e)`, `ctx = Σ_r α_r a_r`.
//! The region projection `W_f a_r + b_f` is computed once per batch ([`AttKeys`]).

use candle_core::{Tensor, D};
use candle_nn::ops::softmax;

use crate::model::error::Result;
use crate::model::kernels::attention::additive_attention;

/// Attention weights, transposed once per pass.
#[derive(Debug, Clone)]
pub(crate) struct AttWeights {
    /// `W_hᵀ` `[H, A]`.
    pub w_hid_t: Tensor,
    /// `w_a` as `[A, 1]`.
    pub w_score_t: Tensor,
}

/// Per-batch attention inputs: the regions `a` `[B, R, Da]` and their projection `[B, R, A]`.
#[derive(Debug, Clone)]
pub(crate) struct AttKeys {
    pub feats: Tensor,
    pub proj: Tensor,
}

impl AttKeys {
    /// Keeps rows `idx` of the batch.
    pub fn select(&self, idx: &Tensor) -> Result<Self> {
        Ok(Self {
            feats: self.feats.index_select(idx, 0)?,
            proj: self.proj.index_select(idx, 0)?,
        })
    }
}

/// Context vector `[B, Da]` for the query `h` `[B, H]`: one fused node on the CPU
/// ([`additive_attention`]), graph ops elsewhere.
pub(crate) fn attend(keys: &AttKeys, w: &AttWeights, h: &Tensor) -> Result<Tensor> {
    let (b, r, a) = keys.proj.dims3()?;
    let q = h.matmul(&w.w_hid_t)?; // [B, A]
    if let Some(ctx) = additive_attention(&keys.proj, &q, &w.w_score_t, &keys.feats)? {
        return Ok(ctx);
    }
    let q = q.unsqueeze(1)?; // [B, 1, A]
    let e = keys.proj.broadcast_add(&q)?.tanh()?; // [B, R, A]
    let scores = e
        .reshape((b * r, a))?
        .matmul(&w.w_score_t)?
        .reshape((b, 1, r))?;
    let alpha = softmax(&scores, D::Minus1)?; // [B, 1, R]
    Ok(alpha.matmul(&keys.feats)?.squeeze(1)?)
}
