//! The Transformer's building blocks as graph ops: projections, the layer norm, attention,
//! the feed-forward sublayer and the sinusoidal positions. The same functions serve teacher
//! forcing (with gradients) and the graph path of decoding (detached weights).

use candle_core::{DType, Device, Tensor, D};

use super::FeedForward;
use crate::model::error::Result;
use crate::model::kernels;
use crate::model::kernels::dropout::dropout;
use crate::model::kernels::linear::linear;
use crate::model::rng::CaprlRng;

/// Added to the std in the layer norm (the Annotated Transformer's `eps`).
pub(crate) const NORM_EPS: f64 = 1e-6;

/// `x Wᵀ + b`, `W` `[out, in]` as PyTorch stores it.
pub(crate) struct Linear {
    pub w: Tensor,
    pub b: Tensor,
}

impl Linear {
    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        linear(x, &self.w, &self.b)
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
    kernels::layer_norm::layer_norm(x, &n.gain, &n.bias, NORM_EPS)
}

/// Softmax over the last dimension, with gradients (candle's fused softmax has none). The
/// maximum subtracted for stability is a constant for the gradient, as it cancels.
pub(crate) fn softmax(x: &Tensor) -> Result<Tensor> {
    let max = x.max_keepdim(D::Minus1)?.detach();
    let e = x.broadcast_sub(&max)?.exp()?;
    Ok(e.broadcast_div(&e.sum_keepdim(D::Minus1)?)?)
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

/// `softmax(Q Kᵀ / √dk + mask) V` per head, `q` `[B, h, Tq, dk]`, `k`, `v` `[B, h, Tk, dk]`,
/// `mask` `[Tq, Tk]` added to the scores (the causal mask), dropout on the attention weights.
pub(crate) fn attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    p: f32,
    drop: Option<&mut CaprlRng>,
) -> Result<Tensor> {
    let dk = q.dim(D::Minus1)?;
    let q = (q * (1.0 / (dk as f64).sqrt()))?;
    let mut scores = q.matmul(&k.t()?)?;
    if let Some(m) = mask {
        scores = scores.broadcast_add(m)?;
    }
    let weights = dropout(&softmax(&scores)?, p, drop)?;
    Ok(weights.matmul(v)?)
}

/// The causal mask `[T, T]`: 0 on and below the diagonal, a large negative above it (finite,
/// so that an f16 pass stays finite).
pub(crate) fn causal_mask(t: usize, dtype: DType, device: &Device) -> Result<Tensor> {
    let never = if dtype == DType::F16 { -1e4f32 } else { -1e9 };
    let m: Vec<f32> = (0..t * t)
        .map(|i| if i % t > i / t { never } else { 0.0 })
        .collect();
    Ok(Tensor::from_vec(m, (t, t), device)?.to_dtype(dtype)?)
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
        let h = self.w1.forward(x)?.relu()?;
        self.w2.forward(&dropout(&h, p, drop)?)
    }
}
