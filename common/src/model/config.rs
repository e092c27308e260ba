//! The captioner's shape, as read from the `[model]` section plus what the data set fixes.
//!
//! [`ModelKind`], [`RnnKind`] and [`Dtype`] are also the config's types: the run config
//! deserialises straight into them (`model.kind`, `model.rnn`, `dtype`).

use candle_core::DType;
use serde::{Deserialize, Serialize};

use super::error::{ModelError, Result};

/// `fc`: global feature only; `att`: additive attention over region features; `crnn`: the
/// CRNN audio encoder (paper 000) over log-mel frames (the `att` features), its embedding used
/// like the `fc` model's feature; `transformer`: an encoder over the regions (the `fc` feature
/// as one region when there are none) and a decoder of masked self-attention and
/// cross-attention (self-critical.pytorch's `transformer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModelKind {
    Fc,
    Att,
    Crnn,
    Transformer,
}

/// The recurrent cell of the decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RnnKind {
    Gru,
    Lstm,
}

/// Compute dtype of the forward passes (the config's `dtype`): `f32`, `bf16` or `f16`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Dtype {
    F32,
    Bf16,
    F16,
}

impl std::str::FromStr for Dtype {
    type Err = ModelError;

    fn from_str(s: &str) -> Result<Dtype> {
        match s.trim() {
            "f32" => Ok(Dtype::F32),
            "bf16" => Ok(Dtype::Bf16),
            "f16" => Ok(Dtype::F16),
            other => Err(ModelError::Config {
                key: "dtype",
                value: other.to_string(),
                expected: "f32, bf16 or f16".into(),
            }),
        }
    }
}

impl From<Dtype> for DType {
    fn from(d: Dtype) -> DType {
        match d {
            Dtype::F32 => DType::F32,
            Dtype::Bf16 => DType::BF16,
            Dtype::F16 => DType::F16,
        }
    }
}

impl RnnKind {
    /// Number of gates stacked in one projection: GRU `r, z, n`; LSTM `i, f, g, o`.
    pub(crate) fn gates(self) -> usize {
        match self {
            RnnKind::Gru => 3,
            RnnKind::Lstm => 4,
        }
    }
}

/// The Transformer's shape (`kind = "transformer"`; the other kinds ignore it).
#[derive(Debug, Clone, PartialEq)]
pub struct TransformerShape {
    /// Encoder layers; with none the memory is the projected regions, layer-normed.
    pub enc_layers: usize,
    /// Decoder layers.
    pub dec_layers: usize,
    /// Width of every layer's input and output.
    pub d_model: usize,
    /// Attention heads; each reads `d_model / heads` values.
    pub heads: usize,
    /// Inner size of the feed-forward sublayers.
    pub d_ff: usize,
    /// The output projection is the word embedding (transposed, plus its own bias).
    pub tie_embed: bool,
    /// With region features, the `fc` feature is one more region (its own projection); the
    /// reference reads the regions only.
    pub global_region: bool,
}

impl Default for TransformerShape {
    /// The run config's defaults: 2 + 2 layers, width 128, 4 heads, feed-forward 512 (`caprl
    /// run` on the synthetic task takes under 3 minutes on 2 cores).
    fn default() -> Self {
        Self {
            enc_layers: 2,
            dec_layers: 2,
            d_model: 128,
            heads: 4,
            d_ff: 512,
            tie_embed: false,
            global_region: false,
        }
    }
}

/// Everything that fixes the captioner's parameters and limits.
#[derive(Debug, Clone, PartialEq)]
pub struct CaptionerConfig {
    pub kind: ModelKind,
    pub rnn: RnnKind,
    /// Decoder layers, 1 or 2.
    pub layers: usize,
    /// Word embedding size.
    pub embed: usize,
    /// Decoder hidden size.
    pub hidden: usize,
    /// Attention MLP size (att only).
    pub att_hidden: usize,
    /// CRNN width `W` (crnn only): channels of convolutions 2–5 and GRU size per direction;
    /// the embedding has `2W` values (the paper: 128, so 256).
    pub crnn_width: usize,
    /// The Transformer's layers and sizes (`transformer` only).
    pub transformer: TransformerShape,
    /// Dropout probability in `[0, 1)`, used only when a dropout RNG is given.
    pub dropout: f32,
    /// Vocabulary size including PAD/BOS/EOS/UNK.
    pub vocab_size: usize,
    /// Size of the global feature vector.
    pub fc_dim: usize,
    /// `(regions, dim)` of region features; required for `att`.
    pub att: Option<(usize, usize)>,
    /// Maximum caption words, excluding BOS/EOS (decoders emit at most `max_len + 1` tokens).
    pub max_len: usize,
    /// Dtype of the parameters (the master weights the optimizer updates and checkpoints
    /// store): f32 normally, f64 for gradient checks.
    pub dtype: DType,
    /// Dtype of the forward passes (learner and actors): f32, bf16 or f16 (f64 for gradient
    /// checks). Each pass casts the weights to it once, in [`Captioner`](super::Captioner)'s
    /// weight preparation, so gradients flow back through the cast into the `dtype` parameters.
    /// Log-softmax and everything after it run in `dtype`.
    pub compute_dtype: DType,
}

impl CaptionerConfig {
    /// The defaults of the run config (`embed 256`, `hidden 512`, GRU, one layer).
    pub fn new(
        kind: ModelKind,
        vocab_size: usize,
        fc_dim: usize,
        att: Option<(usize, usize)>,
    ) -> Self {
        Self {
            kind,
            rnn: RnnKind::Gru,
            layers: 1,
            embed: 256,
            hidden: 512,
            att_hidden: 256,
            crnn_width: 128,
            transformer: TransformerShape::default(),
            dropout: 0.2,
            vocab_size,
            fc_dim,
            att,
            max_len: 16,
            dtype: DType::F32,
            compute_dtype: DType::F32,
        }
    }

    /// Checks every field; the error names the key and the allowed values.
    pub fn validate(&self) -> Result<()> {
        let bad = |key: &'static str, value: String, expected: &str| {
            Err(ModelError::Config {
                key,
                value,
                expected: expected.to_string(),
            })
        };
        if !(1..=2).contains(&self.layers) {
            return bad("model.layers", self.layers.to_string(), "must be 1 or 2");
        }
        if !(1..=4096).contains(&self.embed) {
            return bad("model.embed", self.embed.to_string(), "must be in 1..=4096");
        }
        if !(1..=8192).contains(&self.hidden) {
            return bad(
                "model.hidden",
                self.hidden.to_string(),
                "must be in 1..=8192",
            );
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return bad(
                "model.dropout",
                self.dropout.to_string(),
                "must be in [0, 1)",
            );
        }
        if self.vocab_size < 4 {
            return bad(
                "vocab_size",
                self.vocab_size.to_string(),
                "must be at least 4 (PAD, BOS, EOS, UNK)",
            );
        }
        if self.fc_dim == 0 {
            return bad(
                "fc_dim",
                "0".into(),
                "the data set's fc features must be non-empty",
            );
        }
        if !(1..=64).contains(&self.max_len) {
            return bad(
                "data.max_len",
                self.max_len.to_string(),
                "must be in 1..=64",
            );
        }
        if !matches!(self.dtype, DType::F32 | DType::F64) {
            return bad(
                "model parameter dtype",
                format!("{:?}", self.dtype),
                "must be f32 or f64 (lower precision is set with `dtype`, the compute dtype; \
                 master weights stay f32)",
            );
        }
        if !matches!(
            self.compute_dtype,
            DType::F32 | DType::F64 | DType::BF16 | DType::F16
        ) {
            return bad(
                "dtype",
                format!("{:?}", self.compute_dtype),
                "must be f32, bf16 or f16",
            );
        }
        if self.kind == ModelKind::Att {
            match self.att {
                Some((r, d)) if r > 0 && d > 0 => {}
                _ => {
                    return bad(
                        "model.kind",
                        "\"att\"".into(),
                        "needs region features: the data set has none, use kind = \"fc\"",
                    )
                }
            }
            if self.att_hidden == 0 {
                return bad("model.att_hidden", "0".into(), "must be >= 1");
            }
        }
        if self.kind == ModelKind::Transformer {
            self.transformer.validate()?;
        }
        if self.kind == ModelKind::Crnn {
            match self.att {
                Some((frames, mels)) if frames >= 4 && mels > 0 && mels % super::rnn::crnn::FREQ_DIVISOR == 0 => {}
                _ => {
                    return bad(
                        "model.kind",
                        "\"crnn\"".into(),
                        "needs log-mel frames (att features [N, frames >= 4, 64·k]); prepare audio with `caprl data audio` or `caprl data synth-audio`",
                    )
                }
            }
            if !(1..=1024).contains(&self.crnn_width) {
                return bad(
                    "model.crnn_width",
                    self.crnn_width.to_string(),
                    "must be in 1..=1024",
                );
            }
        }
        Ok(())
    }

    /// Width of the decoder state a value head reads: `hidden` for the recurrent models,
    /// `d_model` for the Transformer.
    pub fn state_dim(&self) -> usize {
        match self.kind {
            ModelKind::Transformer => self.transformer.d_model,
            ModelKind::Fc | ModelKind::Att | ModelKind::Crnn => self.hidden,
        }
    }

    /// Whether the model reads the `att` features: region features (`att`, and `transformer`
    /// when the data set has them) or log-mel frames (`crnn`).
    pub(crate) fn reads_att(&self) -> bool {
        match self.kind {
            ModelKind::Fc => false,
            ModelKind::Att | ModelKind::Crnn => true,
            ModelKind::Transformer => self.att.is_some(),
        }
    }

    /// Size of the vector the decoder's image projection reads: `2W` for crnn, else `fc_dim`.
    pub(crate) fn feature_dim(&self) -> usize {
        match self.kind {
            ModelKind::Crnn => 2 * self.crnn_width,
            _ => self.fc_dim,
        }
    }
}

impl TransformerShape {
    /// Checks the sizes; the error names the key and what would work.
    fn validate(&self) -> Result<()> {
        let bad = |key: &'static str, value: String, expected: String| {
            Err(ModelError::Config {
                key,
                value,
                expected,
            })
        };
        if !(0..=24).contains(&self.enc_layers) {
            return bad(
                "model.enc_layers",
                self.enc_layers.to_string(),
                "must be in 0..=24".into(),
            );
        }
        if !(1..=24).contains(&self.dec_layers) {
            return bad(
                "model.dec_layers",
                self.dec_layers.to_string(),
                "must be in 1..=24".into(),
            );
        }
        if !(1..=64).contains(&self.heads) {
            return bad(
                "model.heads",
                self.heads.to_string(),
                "must be in 1..=64".into(),
            );
        }
        if !(8..=4096).contains(&self.d_model) {
            return bad(
                "model.d_model",
                self.d_model.to_string(),
                "must be in 8..=4096".into(),
            );
        }
        if !self.d_model.is_multiple_of(self.heads) {
            let lower = self.d_model / self.heads * self.heads;
            return bad(
                "model.d_model",
                format!("{} with heads = {}", self.d_model, self.heads),
                format!(
                    "must be a multiple of model.heads (each head reads d_model / heads values): \
                     use d_model = {} or {}, or change heads",
                    lower.max(self.heads),
                    lower + self.heads
                ),
            );
        }
        if !(1..=16384).contains(&self.d_ff) {
            return bad(
                "model.d_ff",
                self.d_ff.to_string(),
                "must be in 1..=16384".into(),
            );
        }
        Ok(())
    }
}
