//! [`Captioner`]: the one model type callers hold, whatever the architecture behind it.
//!
//! It owns a [`CaptionModel`] chosen by `model.kind` in [`architecture`], the one place that
//! lists the architectures, and forwards to it; decoding goes through [`Captioner::decoder`]
//! (see [`Decoder`](super::Decoder)).

use candle_core::{DType, Device, Tensor};
use candle_nn::VarMap;

use super::config::{CaptionerConfig, ModelKind};
use super::error::Result;
use super::inputs::{token_mask, Inputs};
use super::params::{LoadedTensors, ParamOrigin};
use super::rng::CaprlRng;
use super::rnn::RnnCaptioner;
use super::seam::{CaptionModel, TeacherForced};
use super::transformer::TransformerCaptioner;

/// The architecture of `cfg.model.kind`, its weights from `origin`: the registration of every model
/// kind.
fn architecture(
    cfg: &CaptionerConfig,
    device: &Device,
    origin: &ParamOrigin,
) -> Result<Box<dyn CaptionModel>> {
    match cfg.model.kind {
        ModelKind::Fc | ModelKind::Att | ModelKind::Crnn => {
            Ok(Box::new(RnnCaptioner::new(cfg, device, origin)?))
        }
        ModelKind::Transformer => Ok(Box::new(TransformerCaptioner::new(cfg, device, origin)?)),
    }
}

/// The captioning policy. Owns its weights in a candle `VarMap` under stable names.
pub struct Captioner {
    pub(crate) model: Box<dyn CaptionModel>,
}

impl Captioner {
    /// A freshly initialised captioner of kind `cfg.model.kind` on `device`, its weights drawn from
    /// `seed` so that two runs with the same seed start identically.
    ///
    /// The recurrent models (`fc`, `att`, `crnn`) draw PyTorch-style uniform `±1/√fan_in`
    /// values; parameter names: `embed.weight`, `img.weight`, `img.bias`, `init.{l}.weight`,
    /// `init.{l}.bias`, `rnn.{l}.w_ih`, `rnn.{l}.b_ih`, `rnn.{l}.w_hh`, `rnn.{l}.b_hh`,
    /// `rnn.0.w_fc`, `att.feat.weight`, `att.feat.bias`, `att.hid.weight`, `att.score.weight`,
    /// `att.ctx.weight`, `logit.weight`, `logit.bias` (PyTorch `[out, in]` layout), and the
    /// `crnn.*` encoder.
    pub fn new(cfg: &CaptionerConfig, device: &Device, seed: u64) -> Result<Self> {
        cfg.validate()?;
        Ok(Self {
            model: architecture(cfg, device, &ParamOrigin::Seed(seed))?,
        })
    }

    /// A captioner shaped by `cfg` over `loaded`'s tensors (every parameter present, floating
    /// point and of the shape `cfg` implies; others ignored), without drawing initial weights.
    pub(crate) fn from_loaded(
        cfg: &CaptionerConfig,
        device: &Device,
        loaded: &LoadedTensors<'_>,
    ) -> Result<Self> {
        cfg.validate()?;
        Ok(Self {
            model: architecture(cfg, device, &ParamOrigin::Loaded(loaded))?,
        })
    }

    /// crnn only (other models have no batch norm): `true` makes passes with gradients use
    /// the running batch-norm statistics, as decoding does, instead of the batch's (and leave
    /// them unchanged). Policy-gradient updates set it, since their samples were drawn with the
    /// running statistics; cross-entropy updates clear it.
    pub fn set_running_norm(&self, on: bool) {
        self.model.set_running_norm(on);
    }

    /// The CRNN encoder's convolution output `[B, T/4, n_mels/64, W]` and embedding `[B, 2W]`
    /// for log-mel frames `mel` `[B, T, n_mels]`, with running batch-norm statistics and no
    /// gradients (as decoding sees it). Fails for models that are not `crnn`.
    pub fn audio_encoding(&self, mel: &Tensor) -> Result<(Tensor, Tensor)> {
        self.model.audio_encoding(mel)
    }

    /// The model's configuration.
    pub fn config(&self) -> &CaptionerConfig {
        self.model.config()
    }

    /// The device the weights live on.
    pub fn device(&self) -> &Device {
        self.model.device()
    }

    /// The trainable variables, by stable name.
    pub fn varmap(&self) -> &VarMap {
        self.model.varmap()
    }

    /// Sets the dtype of the forward passes (`f32`, `bf16`, `f16`); the parameters keep theirs.
    pub fn set_compute_dtype(&mut self, dtype: DType) -> Result<()> {
        self.model.set_compute_dtype(dtype)
    }

    /// `log p(w_t | w_<t, I)` of the given tokens `[B, T]` and the mask `[B, T]` (1 up to and
    /// including the first EOS; all non-PAD tokens when there is no EOS). `seqs` is `u32` `[B, T]`:
    /// tokens without BOS, ending at EOS, padded with PAD. Masked positions of `logp` are 0.
    /// Dropout is applied when `dropout_rng` is given (training).
    pub fn token_logprobs(
        &self,
        x: &Inputs,
        seqs: &Tensor,
        dropout_rng: Option<&mut CaprlRng>,
    ) -> Result<(Tensor, Tensor)> {
        self.model.token_logprobs(x, seqs, dropout_rng)
    }

    /// The teacher-forced pass: full log-softmax `[B, T, V]` and decoder states `[B, T, H]`.
    pub fn teacher_forced(
        &self,
        x: &Inputs,
        seqs: &Tensor,
        dropout_rng: Option<&mut CaprlRng>,
    ) -> Result<TeacherForced> {
        self.model.teacher_forced(x, seqs, dropout_rng)
    }

    /// 1 for tokens up to and including the first EOS (or up to the first PAD when there is no
    /// EOS), else 0; in the model's dtype.
    pub fn token_mask(&self, seqs: &Tensor) -> Result<Tensor> {
        token_mask(seqs, self.config().dtype, self.device())
    }
}
