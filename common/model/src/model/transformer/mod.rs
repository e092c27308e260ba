//! The Transformer captioner (`kind = "transformer"`): self-critical.pytorch's
//! `TransformerModel` (the Annotated Transformer), layer for layer.
//!
//! - Regions `[B, R, D]` (the `fc` feature as one region when the data set has none, or as one
//!   more with `global_region`) go through `relu(W_src x + b)` and dropout, then `enc_layers`
//!   encoder layers (self-attention, feed-forward; none is allowed) and a final layer norm: the
//!   memory.
//! - Words: `√d_model · E[w] + PE(pos)` (sinusoidal), dropout, then `dec_layers` decoder layers
//!   (causal self-attention, cross-attention over the memory, feed-forward) and a final layer
//!   norm: the decoder states (what a value head reads).
//! - Output: `logits = W_out s + b`, `W_out` its own matrix or the word embedding
//!   (`tie_embed`); PAD and BOS are never predicted.
//! - Every sublayer is pre-norm, `x + dropout(sublayer(LN(x)))`, and the layer norm is the
//!   Annotated Transformer's: `g · (x − mean) / (std + 1e-6) + b` with the unbiased std.
//!
//! Files: this one holds the parameters (names, initialisation) and the seam; [`layers`] the
//! building blocks, [`forward`] the encoder and the whole-sequence decoder, [`teacher`] teacher
//! forcing, [`decode`] the key/value-cached step decoder and [`host_decode`] its host-array
//! fast path on the CPU.

mod decode;
mod forward;
mod host_decode;
mod layers;
mod teacher;

use std::collections::HashMap;

use candle_core::{Device, Tensor};
use candle_nn::VarMap;

use self::layers::{Linear, Norm};
use crate::model::config::{CaptionerConfig, ModelConfig};
use crate::model::error::{ModelError, Result};
use crate::model::params::{self, Init};
use crate::model::params::{ParamOrigin, ParamSource};
use crate::model::seam::{CaptionModel, ModelBase, StepDecoder};

/// The Transformer captioner. Owns its weights in a [`VarMap`] under the names that
/// [`Weights::visit`] lists.
pub(crate) struct TransformerCaptioner {
    pub(crate) base: ModelBase,
    /// Handles on the parameters by name (they share storage with the `VarMap`'s vars), so
    /// that a pass reads them without locking the `VarMap`.
    params: HashMap<String, Tensor>,
}

/// What [`Weights::visit`] asks for each parameter: its name, shape and initialisation in, the
/// tensor out.
type ParamFn<'a> = dyn FnMut(&str, &[usize], Init) -> Result<Tensor> + 'a;

/// Self-attention of one layer: `q, k, v` as one `[3d, d]` projection, and the output.
pub(crate) struct SelfAttention {
    pub qkv: Linear,
    pub out: Linear,
}

/// Attention over the memory: the query from the decoder, `k, v` as one `[2d, d]` projection of
/// the memory, and the output.
pub(crate) struct CrossAttention {
    pub q: Linear,
    pub kv: Linear,
    pub out: Linear,
}

/// `W_2 dropout(relu(W_1 x + b_1)) + b_2`.
pub(crate) struct FeedForward {
    pub w1: Linear,
    pub w2: Linear,
}

pub(crate) struct EncoderLayer {
    pub norm1: Norm,
    pub attn: SelfAttention,
    pub norm2: Norm,
    pub ff: FeedForward,
}

pub(crate) struct DecoderLayer {
    pub norm1: Norm,
    pub attn: SelfAttention,
    pub norm2: Norm,
    pub cross: CrossAttention,
    pub norm3: Norm,
    pub ff: FeedForward,
}

/// Every weight of the model: the stored parameters, or the same prepared for a pass (cast to
/// the compute dtype, detached for decoding, PAD and BOS banned in the output bias).
pub(crate) struct Weights {
    pub src: Linear,
    /// The `fc` feature's projection when it is one more region (`global_region`).
    pub src_fc: Option<Linear>,
    pub encoder: Vec<EncoderLayer>,
    pub enc_norm: Norm,
    pub embed: Tensor,
    pub decoder: Vec<DecoderLayer>,
    pub dec_norm: Norm,
    /// The output layer; its weight is `embed` when tied.
    pub logit: Linear,
}

impl Weights {
    /// Lists every parameter once — name, shape, initialisation — and builds the weights from
    /// what `param` returns for each: a fresh draw (initialisation) or the stored tensor (a
    /// handle on the `VarMap`, or a prepared copy).
    fn visit(cfg: &CaptionerConfig, param: &mut ParamFn) -> Result<Self> {
        let s = &cfg.model;
        let d = s.d_model;
        let mut linear = |name: &str, out: usize, inp: usize, blocks: usize| -> Result<Linear> {
            Ok(Linear {
                w: param(
                    &format!("{name}.weight"),
                    &[out, inp],
                    Init::xavier(inp, out / blocks),
                )?,
                b: param(&format!("{name}.bias"), &[out], Init::fan_in(inp))?,
            })
        };
        let src_dim = source_dim(cfg);
        let src = linear("src", d, src_dim, 1)?;
        let src_fc = match s.global_region && cfg.att.is_some() {
            true => Some(linear("src_fc", d, cfg.fc_dim, 1)?),
            false => None,
        };
        let mut enc_parts = Vec::with_capacity(s.enc_layers);
        for l in 0..s.enc_layers {
            let p = format!("enc.{l}");
            enc_parts.push((
                linear(&format!("{p}.attn.qkv"), 3 * d, d, 3)?,
                linear(&format!("{p}.attn.out"), d, d, 1)?,
                linear(&format!("{p}.ff.w1"), s.d_ff, d, 1)?,
                linear(&format!("{p}.ff.w2"), d, s.d_ff, 1)?,
            ));
        }
        let mut dec_parts = Vec::with_capacity(s.dec_layers);
        for l in 0..s.dec_layers {
            let p = format!("dec.{l}");
            dec_parts.push((
                linear(&format!("{p}.attn.qkv"), 3 * d, d, 3)?,
                linear(&format!("{p}.attn.out"), d, d, 1)?,
                linear(&format!("{p}.cross.q"), d, d, 1)?,
                linear(&format!("{p}.cross.kv"), 2 * d, d, 2)?,
                linear(&format!("{p}.cross.out"), d, d, 1)?,
                linear(&format!("{p}.ff.w1"), s.d_ff, d, 1)?,
                linear(&format!("{p}.ff.w2"), d, s.d_ff, 1)?,
            ));
        }
        let v = cfg.vocab_size;
        let logit_w = match s.tie_embed {
            true => None,
            false => Some(param("logit.weight", &[v, d], Init::xavier(d, v))?),
        };
        let logit_b = param("logit.bias", &[v], Init::fan_in(d))?;
        let embed = param("embed.weight", &[v, d], Init::xavier(d, v))?;
        let mut norm = |name: &str| -> Result<Norm> {
            Ok(Norm {
                gain: param(&format!("{name}.gain"), &[d], Init::Const(1.0))?,
                bias: param(&format!("{name}.bias"), &[d], Init::Const(0.0))?,
            })
        };
        let encoder = enc_parts
            .into_iter()
            .enumerate()
            .map(|(l, (qkv, out, w1, w2))| {
                Ok(EncoderLayer {
                    norm1: norm(&format!("enc.{l}.norm1"))?,
                    attn: SelfAttention { qkv, out },
                    norm2: norm(&format!("enc.{l}.norm2"))?,
                    ff: FeedForward { w1, w2 },
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let enc_norm = norm("enc.norm")?;
        let decoder = dec_parts
            .into_iter()
            .enumerate()
            .map(|(l, (qkv, out, q, kv, cross_out, w1, w2))| {
                Ok(DecoderLayer {
                    norm1: norm(&format!("dec.{l}.norm1"))?,
                    attn: SelfAttention { qkv, out },
                    norm2: norm(&format!("dec.{l}.norm2"))?,
                    cross: CrossAttention {
                        q,
                        kv,
                        out: cross_out,
                    },
                    norm3: norm(&format!("dec.{l}.norm3"))?,
                    ff: FeedForward { w1, w2 },
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let dec_norm = norm("dec.norm")?;
        Ok(Weights {
            src,
            src_fc,
            encoder,
            enc_norm,
            logit: Linear {
                w: logit_w.unwrap_or_else(|| embed.clone()),
                b: logit_b,
            },
            embed,
            decoder,
            dec_norm,
        })
    }
}

/// Size of one region's feature: the `att` features' when the data set has them, else `fc`'s.
pub(crate) fn source_dim(cfg: &CaptionerConfig) -> usize {
    match cfg.att {
        Some((_, d)) => d,
        None => cfg.fc_dim,
    }
}

impl TransformerCaptioner {
    /// A Transformer on `device` with loaded weights, or weights drawn from a seed (Xavier-uniform
    /// matrices, PyTorch-style biases, unit layer-norm gains) so that two runs with the same seed
    /// start identically.
    pub(crate) fn new(
        cfg: &CaptionerConfig,
        device: &Device,
        origin: &ParamOrigin,
    ) -> Result<Self> {
        cfg.validate()?;
        let varmap = VarMap::new();
        {
            let mut source = ParamSource::new(origin, device, cfg.dtype);
            let mut data = params::locked(&varmap)?;
            Weights::visit(cfg, &mut |name, shape, init| {
                let var = source.param(name, shape, init)?;
                let handle = var.as_tensor().clone();
                data.insert(name.to_string(), var);
                Ok(handle)
            })?;
        }
        Self::on_varmap(cfg, device, varmap)
    }

    /// The model over `varmap`'s variables; fails when one is missing.
    fn on_varmap(cfg: &CaptionerConfig, device: &Device, varmap: VarMap) -> Result<Self> {
        let mut params = HashMap::new();
        {
            let data = params::locked(&varmap)?;
            Weights::visit(cfg, &mut |name, _, _| {
                let t = data
                    .get(name)
                    .map(|v| v.as_tensor().clone())
                    .ok_or_else(|| ModelError::Internal(format!("missing parameter `{name}`")))?;
                params.insert(name.to_string(), t.clone());
                Ok(t)
            })?;
        }
        Ok(Self {
            base: ModelBase {
                cfg: cfg.clone(),
                device: device.clone(),
                varmap,
            },
            params,
        })
    }

    /// The shape of the layers.
    pub(crate) fn shape(&self) -> &ModelConfig {
        &self.base.cfg.model
    }

    /// The weights for one pass: cast to the compute dtype (a graph node when not detached, so
    /// a bf16 pass's gradients reach the f32 parameters), detached for decoding, and PAD and
    /// BOS banned in the output bias (a large finite negative: `0 · log p` must stay 0).
    pub(crate) fn prepare(&self, detach: bool) -> Result<Weights> {
        let compute = self.base.cfg.compute_dtype;
        let mut w = Weights::visit(&self.base.cfg, &mut |name, _, _| {
            let t = self
                .params
                .get(name)
                .cloned()
                .ok_or_else(|| ModelError::Internal(format!("missing parameter `{name}`")))?;
            let t = if detach { t.detach() } else { t };
            Ok(t.to_dtype(compute)?)
        })?;
        w.logit.b = w.logit.b.add(&self.base.never_emitted_bias(compute)?)?;
        Ok(w)
    }

    /// Another handle on the same weights (their storage is shared).
    pub(crate) fn share(&self) -> Result<Self> {
        Self::on_varmap(&self.base.cfg, &self.base.device, self.base.varmap.clone())
    }
}

impl CaptionModel for TransformerCaptioner {
    fn base(&self) -> &ModelBase {
        &self.base
    }

    fn base_mut(&mut self) -> &mut ModelBase {
        &mut self.base
    }

    fn step_decoder(&self) -> Result<Box<dyn StepDecoder>> {
        Ok(Box::new(decode::TransformerSteps::new(self)?))
    }
}
