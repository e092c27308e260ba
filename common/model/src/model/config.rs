//! The captioner's shape: the `[model]` section ([`ModelConfig`], its defaults and rules) plus
//! what the data set fixes ([`CaptionerConfig`]).
//!
//! [`ModelKind`], [`RnnKind`] and [`Dtype`] are also the config's types: the run config
//! deserialises straight into them (`model.kind`, `model.rnn`, `dtype`).

use candle_core::DType;
use serde::{Deserialize, Serialize};

use super::error::{ModelError, Result};
use caprl_data::Dataset;
use caprl_wire::check::{fails, first_violation, outside, Check};

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

/// Mel bands per GRU input group of the `crnn` encoder: its three pools divide frequency by
/// 4·4·4.
pub const FREQ_DIVISOR: usize = 64;

/// Whether log-mel input of `frames × mels` fits the `crnn` encoder: at least 4 frames (its time
/// pools divide by 4) and a positive multiple of [`FREQ_DIVISOR`] mel bands.
pub(crate) fn crnn_takes(frames: usize, mels: usize) -> bool {
    frames >= 4 && mels > 0 && mels.is_multiple_of(FREQ_DIVISOR)
}

/// What a `crnn` model reads and how to make it, for messages.
const CRNN_INPUT: &str =
    "log-mel frames; prepare audio with `caprl data audio` or `caprl data synth-audio`";

/// The most words a caption may have (`data.max_len`), excluding BOS and EOS.
pub const MAX_CAPTION_WORDS: usize = 64;
/// What `data.max_len` allows, for messages.
pub const MAX_CAPTION_WORDS_ALLOWED: &str = "1..=64";

/// `[model]`: the captioner's shape, as the config file writes it. [`ModelConfig::CHECKS`] is
/// the one rule for each key's range; the defaults below are the config's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelConfig {
    pub kind: ModelKind,
    pub rnn: RnnKind,
    /// Decoder layers of the recurrent models: 1 or 2.
    pub layers: usize,
    /// Word embedding size.
    pub embed: usize,
    /// Decoder hidden size of the recurrent models.
    pub hidden: usize,
    /// Attention MLP size (`att` only).
    pub att_hidden: usize,
    /// CRNN width `W` (`crnn` only): channels of convolutions 2–5 and GRU size per direction;
    /// the audio embedding has `2W` values. 128 is paper 000's encoder.
    pub crnn_width: usize,
    /// Dropout probability, used only when a dropout RNG is given. `f64` so that the value
    /// written back to TOML reads exactly as the user wrote it.
    pub dropout: f64,
    /// Transformer encoder layers; with none the memory is the projected regions, layer-normed.
    pub enc_layers: usize,
    /// Transformer decoder layers.
    pub dec_layers: usize,
    /// Transformer width of every layer's input and output.
    pub d_model: usize,
    /// Transformer attention heads; each reads `d_model / heads` values.
    pub heads: usize,
    /// Inner size of the Transformer's feed-forward sublayers.
    pub d_ff: usize,
    /// Transformer: the output projection is the word embedding (transposed, plus its own bias).
    pub tie_embed: bool,
    /// Transformer: with region features, the `fc` feature is one more region (its own
    /// projection); the reference reads the regions only.
    pub global_region: bool,
}

impl Default for ModelConfig {
    /// A one-layer GRU `fc` model (embed 256, hidden 512); for the Transformer 2 + 2 layers,
    /// width 128, 4 heads, feed-forward 512 (`caprl run` on the synthetic task takes under 3
    /// minutes on 2 cores).
    fn default() -> Self {
        ModelConfig {
            kind: ModelKind::Fc,
            rnn: RnnKind::Gru,
            layers: 1,
            embed: 256,
            hidden: 512,
            att_hidden: 256,
            crnn_width: 128,
            dropout: 0.2,
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

impl ModelConfig {
    /// The rule for each key, checked whatever the kind (a value for another kind is still
    /// written back to the run's config).
    #[rustfmt::skip]
    pub const CHECKS: &'static [Check<ModelConfig>] = &[
        Check { key: "model.layers", allowed: "1 or 2", violation: |m| outside(m.layers, 1..=2) },
        Check { key: "model.embed", allowed: "1..=4096", violation: |m| outside(m.embed, 1..=4096) },
        Check { key: "model.hidden", allowed: "1..=8192", violation: |m| outside(m.hidden, 1..=8192) },
        Check { key: "model.att_hidden", allowed: "1..=8192", violation: |m| outside(m.att_hidden, 1..=8192) },
        Check { key: "model.crnn_width", allowed: "1..=1024", violation: |m| outside(m.crnn_width, 1..=1024) },
        Check { key: "model.enc_layers", allowed: "0..=24", violation: |m| outside(m.enc_layers, 0..=24) },
        Check { key: "model.dec_layers", allowed: "1..=24", violation: |m| outside(m.dec_layers, 1..=24) },
        Check { key: "model.heads", allowed: "1..=64", violation: |m| outside(m.heads, 1..=64) },
        Check { key: "model.d_model", allowed: "8..=4096", violation: |m| outside(m.d_model, 8..=4096) },
        Check {
            key: "model.d_model",
            allowed: "a multiple of model.heads (each head reads d_model / heads values)",
            violation: |m| {
                (m.heads > 0 && !m.d_model.is_multiple_of(m.heads)).then(|| {
                    let lower = (m.d_model / m.heads * m.heads).max(m.heads);
                    format!("{} with heads = {} (try {lower} or {})", m.d_model, m.heads, lower + m.heads)
                })
            },
        },
        Check { key: "model.d_ff", allowed: "1..=16384", violation: |m| outside(m.d_ff, 1..=16384) },
        Check { key: "model.dropout", allowed: "[0, 1)", violation: |m| fails(m.dropout, |x| (0.0..1.0).contains(&x)) },
    ];

    /// Width of the decoder state (what a value head reads, what the Noam schedule scales by):
    /// `hidden` for the recurrent models, `d_model` for the Transformer.
    pub fn state_dim(&self) -> usize {
        match self.kind {
            ModelKind::Transformer => self.d_model,
            ModelKind::Fc | ModelKind::Att | ModelKind::Crnn => self.hidden,
        }
    }

    /// Checks every key against its rule; the error names the key and what is allowed.
    pub fn validate(&self) -> Result<()> {
        match first_violation(Self::CHECKS, self) {
            None => Ok(()),
            Some(v) => Err(ModelError::Config {
                key: v.key,
                value: v.value,
                expected: format!("must be {}", v.allowed),
            }),
        }
    }
}

/// Everything that fixes the captioner's parameters and limits: the `[model]` section plus what
/// the data set and the run fix.
#[derive(Debug, Clone, PartialEq)]
pub struct CaptionerConfig {
    /// The shape the `[model]` section gives.
    pub model: ModelConfig,
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
    /// A `kind` model of the config's default shape, for `vocab_size` words and these features.
    pub fn new(
        kind: ModelKind,
        vocab_size: usize,
        fc_dim: usize,
        att: Option<(usize, usize)>,
    ) -> Self {
        Self {
            model: ModelConfig {
                kind,
                ..ModelConfig::default()
            },
            vocab_size,
            fc_dim,
            att,
            max_len: 16,
            dtype: DType::F32,
            compute_dtype: DType::F32,
        }
    }

    /// The captioner a run trains: the `[model]` section, `data`'s vocabulary and features,
    /// captions of at most `max_len` words and forward passes in `compute` (master weights,
    /// optimizer moments and checkpoints stay f32 whatever it is); validated.
    pub fn for_dataset(
        model: &ModelConfig,
        data: &Dataset,
        max_len: usize,
        compute: Dtype,
    ) -> Result<Self> {
        let needs = match model.kind {
            ModelKind::Crnn => Some(("\"crnn\"", CRNN_INPUT)),
            ModelKind::Att => Some(("\"att\"", "region features; use model.kind = \"fc\"")),
            ModelKind::Fc | ModelKind::Transformer => None,
        };
        if let (Some((kind, needs)), None) = (needs, data.att_shape()) {
            return Err(ModelError::Config {
                key: "model.kind",
                value: kind.to_string(),
                expected: format!(
                    "needs {needs} ({} has only global (fc) features)",
                    data.dir().display()
                ),
            });
        }
        let c = CaptionerConfig {
            model: model.clone(),
            vocab_size: data.vocab.len(),
            fc_dim: data.fc_dim(),
            att: data.att_shape(),
            max_len,
            dtype: DType::F32,
            compute_dtype: compute.into(),
        };
        c.validate()?;
        Ok(c)
    }

    /// Checks the shape and what the data set fixes; the error names the key and what would
    /// work.
    pub fn validate(&self) -> Result<()> {
        self.model.validate()?;
        let bad = |key: &'static str, value: String, expected: &str| {
            Err(ModelError::Config {
                key,
                value,
                expected: expected.to_string(),
            })
        };
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
        if let Some(value) = outside(self.max_len, 1..=MAX_CAPTION_WORDS) {
            return bad(
                "data.max_len",
                value,
                &format!("must be in {MAX_CAPTION_WORDS_ALLOWED}"),
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
        match self.model.kind {
            ModelKind::Att => match self.att {
                Some((r, d)) if r > 0 && d > 0 => {}
                _ => {
                    return bad(
                        "model.kind",
                        "\"att\"".into(),
                        "needs region features: the data set has none, use kind = \"fc\"",
                    )
                }
            },
            ModelKind::Crnn => match self.att {
                Some((frames, mels)) if crnn_takes(frames, mels) => {}
                _ => {
                    return bad(
                        "model.kind",
                        "\"crnn\"".into(),
                        &format!("needs {CRNN_INPUT} (att features [N, frames >= 4, 64·k])"),
                    )
                }
            },
            ModelKind::Fc | ModelKind::Transformer => {}
        }
        Ok(())
    }

    /// The dropout probability of the forward passes (`model.dropout`).
    pub(crate) fn dropout(&self) -> f32 {
        self.model.dropout as f32
    }

    /// Whether the model reads the `att` features: region features (`att`, and `transformer`
    /// when the data set has them) or log-mel frames (`crnn`).
    pub(crate) fn reads_att(&self) -> bool {
        match self.model.kind {
            ModelKind::Fc => false,
            ModelKind::Att | ModelKind::Crnn => true,
            ModelKind::Transformer => self.att.is_some(),
        }
    }

    /// Size of the vector the decoder's image projection reads: `2W` for crnn, else `fc_dim`.
    pub(crate) fn feature_dim(&self) -> usize {
        match self.model.kind {
            ModelKind::Crnn => 2 * self.model.crnn_width,
            _ => self.fc_dim,
        }
    }
}
