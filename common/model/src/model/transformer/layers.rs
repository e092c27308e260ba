//! The Transformer's building blocks as graph ops: projections, the layer norm, attention,
//! the feed-forward sublayer and the sinusoidal positions. The same functions serve teacher
//! forcing (with gradients) and the graph path of decoding (detached weights).

use candle_core::{Tensor, D};

use super::FeedForward;
use crate::model::dropout::dropout;
use crate::model::error::Result;
use crate::model::rng::CaprlRng;
use caprl_kernels::attention_softmax::attention_weights;
use caprl_kernels::linear::linear;
use caprl_kernels::relu::relu;

/// Added to the std in the layer norm (the Annotated Transformer's `eps`).
pub(crate) const NORM_EPS: f64 = 1e-6;

/// `x Wᵀ + b`, `W` `[out, in]` as PyTorch stores it.
pub(crate) struct Linear {
    pub w: Tensor,
    pub b: Tensor,
}

impl Linear {
    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(linear(x, &self.w, &self.b)?)
    }
}

/// The layer norm's gain and bias `[d]`.
pub(crate) struct Norm {
    pub gain: Tensor,
    pub bias: Tensor,
}

/// `g · (x − mean) / (std + eps) + b` over the last dimension, with the unbiased std (the
/// Annotated Transformer's, which self-critical.pytorch uses; `torch.nn.LayerNorm` divides by
/// `√(biased var + eps)` instead).
pub(crate) fn layer_norm(x: &Tensor, n: &Norm) -> Result<Tensor> {
    Ok(caprl_kernels::layer_norm::layer_norm(
        x, &n.gain, &n.bias, NORM_EPS,
    )?)
}

/// `[B, T, h·dk]` → `[B, h, T, dk]` (contiguous).
pub(crate) fn split_heads(x: &Tensor, heads: usize) -> Result<Tensor> {
    let (b, t, d) = x.dims3()?;
    Ok(x.reshape((b, t, heads, d / heads))?
        .transpose(1, 2)?
        .contiguous()?)
}

/// `[B, h, T, dk]` → `[B, T, h·dk]`.
pub(crate) fn merge_heads(x: &Tensor) -> Result<Tensor> {
    let (b, h, t, dk) = x.dims4()?;
    Ok(x.transpose(1, 2)?.contiguous()?.reshape((b, t, h * dk))?)
}

/// `softmax(Q Kᵀ / √dk) V` per head, `q` `[B, h, Tq, dk]`, `k`, `v` `[B, h, Tk, dk]`, each query
/// seeing only the keys up to its own position when `causal` (teacher forcing's mask), dropout
/// on the attention weights.
pub(crate) fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    causal: bool,
    p: f32,
    drop: Option<&mut CaprlRng>,
) -> Result<Tensor> {
    let dk = q.dim(D::Minus1)?;
    let scores = q.matmul(&k.t()?)?;
    let weights = attention_weights(&scores, 1.0 / (dk as f64).sqrt(), causal)?;
    Ok(dropout(&weights, p, drop)?.matmul(v)?)
}

/// The sinusoidal positions `PE[pos, 2i] = sin(pos / 10000^(2i/d))`, `PE[pos, 2i+1] = cos(…)`
/// of positions `first..first + n`, `[n, d]` row-major.
pub(crate) fn positions(first: usize, n: usize, d: usize) -> Vec<f32> {
    let mut pe = vec![0f32; n * d];
    for (row, pos) in pe.chunks_mut(d).zip(first..) {
        for i in (0..d).step_by(2) {
            let angle = pos as f64 / 10000f64.powf(i as f64 / d as f64);
            row[i] = angle.sin() as f32;
            if i + 1 < d {
                row[i + 1] = angle.cos() as f32;
            }
        }
    }
    pe
}

impl FeedForward {
    /// `W_2 dropout(relu(W_1 x + b_1)) + b_2`.
    pub(crate) fn forward(
        &self,
        x: &Tensor,
        p: f32,
        drop: Option<&mut CaprlRng>,
    ) -> Result<Tensor> {
        let h = relu(&self.w1.forward(x)?)?;
        self.w2.forward(&dropout(&h, p, drop)?)
    }
}
