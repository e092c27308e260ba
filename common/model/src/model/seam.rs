//! The seam between the callers and the architectures: what every captioning model offers.
//!
//! [`Captioner`](super::Captioner) holds one [`CaptionModel`] and is the only type the learner,
//! the actors, evaluation and captioning know. A model offers teacher forcing (per-token
//! `log p` with gradients, or the full log-softmax with the decoder states a value head reads)
//! and, per snapshot of its weights, a [`StepDecoder`]: the weights prepared once for decoding.
//! The decoding strategies (`super::decoding`: greedy, sampling, prefix completion, beam
//! search, lookahead) drive a [`DecodeState`] one token at a time and never see the
//! architecture.

use candle_core::{DType, Device, Tensor};
use candle_nn::VarMap;

use super::config::CaptionerConfig;
use super::error::{ModelError, Result};
use super::inputs::{token_mask, Inputs};
use super::rng::CaprlRng;
use super::tokens::{BOS, PAD};
use caprl_kernels::kernels_enabled;

/// What every architecture holds besides its handles on the parameters: the configuration, the
/// device and the weights by stable name. The seam's accessors read it. A clone shares the
/// weights' storage.
#[derive(Clone)]
pub(crate) struct ModelBase {
    pub(crate) cfg: CaptionerConfig,
    pub(crate) device: Device,
    pub(crate) varmap: VarMap,
}

impl ModelBase {
    /// The logit bias that keeps PAD and BOS from ever being emitted, in `compute`: a large
    /// negative constant on their logits, finite in f16 (whose largest value is 65504: an
    /// infinite logit would make `0 · log p` NaN), 0 elsewhere.
    pub(crate) fn never_emitted_bias(&self, compute: DType) -> Result<Tensor> {
        let never = if compute == DType::F16 { -1e4 } else { -1e9 };
        let mut ban = vec![0f32; self.cfg.vocab_size];
        ban[PAD as usize] = never;
        ban[BOS as usize] = never;
        Ok(Tensor::from_vec(ban, self.cfg.vocab_size, &self.device)?.to_dtype(compute)?)
    }
}

/// Full teacher-forced outputs, for objectives that need more than the taken tokens' log-probs.
pub struct TeacherForced {
    /// `log π(· | w_<t, I)` over the vocabulary, `[B, T, V]`.
    pub logprobs_full: Tensor,
    /// The decoder state after reading `w_<t`, `[B, T, H]` (input of value heads).
    pub hidden: Tensor,
}

impl TeacherForced {
    /// `log p` of the tokens `seqs` `[B, T]`, 0 where `mask` is 0: what
    /// [`CaptionModel::token_logprobs`] returns, read off the full log-softmax (the path of
    /// every device and dtype without a taken-token kernel).
    pub(crate) fn taken(&self, seqs: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let logp = self
            .logprobs_full
            .gather(&seqs.unsqueeze(2)?, 2)?
            .squeeze(2)?;
        Ok(logp.mul(mask)?)
    }
}

/// The passes with gradients, which training runs: each architecture's `teacher.rs`.
pub(crate) trait TeacherForcing {
    /// Only the taken tokens' `log p` `[B, T]` (unmasked), one graph node from the decoder
    /// states on: never the `[B, T, V]` log-softmax.
    fn fused_token_logprobs(
        &self,
        x: &Inputs,
        seqs: &Tensor,
        dropout_rng: Option<&mut CaprlRng>,
    ) -> Result<Tensor>;

    /// The full log-softmax `[B, T, V]` and the decoder states `[B, T, H]`, with gradients.
    fn teacher_forced(
        &self,
        x: &Inputs,
        seqs: &Tensor,
        dropout_rng: Option<&mut CaprlRng>,
    ) -> Result<TeacherForced>;
}

/// One captioning architecture. Its weights live in a candle `VarMap` under stable names,
/// in the parameters' dtype (`config().dtype`); every pass computes in `config().compute_dtype`.
pub(crate) trait CaptionModel: TeacherForcing + Send + Sync {
    /// The configuration, device and weights.
    fn base(&self) -> &ModelBase;

    /// The same, to change the compute dtype.
    fn base_mut(&mut self) -> &mut ModelBase;

    /// The model's configuration.
    fn config(&self) -> &CaptionerConfig {
        &self.base().cfg
    }

    /// The device the weights live on.
    fn device(&self) -> &Device {
        &self.base().device
    }

    /// The trainable variables, by stable name.
    fn varmap(&self) -> &VarMap {
        &self.base().varmap
    }

    /// Sets the dtype of the forward passes (`f32`, `bf16`, `f16`); the parameters keep theirs.
    fn set_compute_dtype(&mut self, dtype: DType) -> Result<()> {
        let mut cfg = self.config().clone();
        cfg.compute_dtype = dtype;
        cfg.validate()?;
        self.base_mut().cfg = cfg;
        Ok(())
    }

    /// `log p(w_t | w_<t, I)` of the tokens `seqs` `[B, T]` and their mask `[B, T]`, with
    /// gradients; dropout when `dropout_rng` is given. The fused path
    /// ([`CaptionModel::fused_token_logprobs`]) when the passes run in the parameters' dtype on a
    /// device with the CPU kernels; otherwise read off the full log-softmax.
    fn token_logprobs(
        &self,
        x: &Inputs,
        seqs: &Tensor,
        dropout_rng: Option<&mut CaprlRng>,
    ) -> Result<(Tensor, Tensor)> {
        let ModelBase { cfg, device, .. } = self.base();
        let mask = token_mask(seqs, cfg.dtype, device)?;
        if cfg.compute_dtype != cfg.dtype || !kernels_enabled(device, cfg.compute_dtype) {
            let tf = self.teacher_forced(x, seqs, dropout_rng)?;
            return Ok((tf.taken(seqs, &mask)?, mask));
        }
        let logp = self.fused_token_logprobs(x, seqs, dropout_rng)?;
        Ok((logp.mul(&mask)?, mask))
    }

    /// The weights as they are now, detached and prepared for decoding.
    fn step_decoder(&self) -> Result<Box<dyn StepDecoder>>;

    /// Models with batch norm: whether passes with gradients use the running statistics.
    /// Others have nothing to switch.
    fn set_running_norm(&self, _on: bool) {}

    /// The audio encoder's convolution output and embedding (crnn only).
    fn audio_encoding(&self, _mel: &Tensor) -> Result<(Tensor, Tensor)> {
        Err(ModelError::Input(
            "audio_encoding needs a model of kind crnn".into(),
        ))
    }
}

/// A snapshot of a model's weights prepared for decoding.
pub(crate) trait StepDecoder: Send + Sync {
    /// Encodes `x` and returns one decoder state per row, before its first token (the
    /// strategies feed BOS first).
    fn start<'a>(&'a self, x: &Inputs) -> Result<Box<dyn DecodeState<'a> + 'a>>;
}

/// The decoder state of the live rows (an RNN's hidden states, a Transformer's key/value
/// cache), advanced one token per row at a time.
pub(crate) trait DecodeState<'a> {
    /// The rows `rows` (repeats allowed) in that order: drops finished rows, reorders beams.
    fn select(&self, rows: &[u32]) -> Result<Box<dyn DecodeState<'a> + 'a>>;

    /// Feeds one token to every live row.
    fn advance(&mut self, tokens: &[u32]) -> Result<()>;

    /// The next-token logits of every live row, `[rows, V]` row-major on the host (f32).
    fn logits(&self) -> Result<Vec<f32>>;

    /// The state a value head reads, `[rows, H]`.
    fn decoder_state(&self) -> Result<Tensor>;
}
