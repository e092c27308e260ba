//! The recurrent captioner (`fc`, `att`, `crnn`): parameters and their initialisation.
//!
//! `fc` model (self-critical.pytorch's FC model): `img = relu(W_img f + b)`; every layer's state
//! starts at `h_0 = tanh(W_init img + b)` (LSTM `c_0 = 0`) and `img` is also fed to the first
//! layer at every step: its gates get `W_ih e(w_t) + W_fc img + b_ih`.
//! `att` model (Show, Attend and Tell): as `fc`, and the first layer also gets
//! `W_ctx ctx_t` where `ctx_t` attends over the regions with the previous top hidden state.
//! Output: `logits_t = W_out dropout(h_t) + b_out`; PAD and BOS are never predicted.
//!
//! The first implementation of the [`CaptionModel`](super::seam::CaptionModel) seam: this
//! file holds the parameters and their initialisation, [`forward`] one pass, [`teacher`]
//! teacher forcing, [`decode`] the step decoder, [`host_decode`] its host-array fast path,
//! [`cell`] the GRU/LSTM cells, [`fused`] and [`gates`] the fused recurrent layer on the
//! CPU, [`fused_att`] the same with attention for the one-layer `att` decoder, [`attention`]
//! the `att` model's attention and [`crnn`] the audio encoder.

mod attention;
mod cell;
pub(crate) mod crnn;
mod decode;
mod forward;
mod fused;
mod fused_att;
mod gates;
mod host_decode;
mod teacher;
mod word_table;

use std::sync::atomic::{AtomicBool, Ordering};

use candle_core::{Device, Tensor};
use candle_nn::VarMap;

use self::attention::{AttKeys, AttWeights};
use self::cell::CellWeights;
use self::crnn::Crnn;
use crate::model::config::{CaptionerConfig, ModelKind};
use crate::model::error::{ModelError, Result};
use crate::model::params::{self, specs_of, Init, ParamFn};
use crate::model::params::{ParamOrigin, ParamSource};
use crate::model::seam::{CaptionModel, ModelBase, StepDecoder};

/// The recurrent captioner (`fc`, `att`, `crnn`). Owns its weights in a [`VarMap`] under
/// stable names (see [`RnnCaptioner::new`]).
pub(crate) struct RnnCaptioner {
    pub(crate) base: ModelBase,
    pub(crate) p: Params,
    /// crnn: batch norm uses running statistics in passes with gradients too.
    pub(crate) running_norm: AtomicBool,
}

/// Handles on the parameters (they share storage with the `VarMap`'s vars).
pub(crate) struct Params {
    embed: Tensor,
    img_w: Tensor,
    img_b: Tensor,
    fc_w: Tensor,
    init: Vec<(Tensor, Tensor)>,
    rnn: Vec<RnnParams>,
    att: Option<AttParams>,
    crnn: Option<Crnn>,
    logit_w: Tensor,
    logit_b: Tensor,
}

struct RnnParams {
    w_ih: Tensor,
    b_ih: Tensor,
    w_hh: Tensor,
    b_hh: Tensor,
}

struct AttParams {
    feat_w: Tensor,
    feat_b: Tensor,
    hid_w: Tensor,
    score_w: Tensor,
    ctx_w: Tensor,
}

/// Weights for one pass, transposed once outside the time loop (detached for decoding).
pub(crate) struct Prepared {
    pub embed: Tensor,
    /// `W_ih` of layer 0 `[G, E]` as stored (read by `kernels::linear`).
    pub w_ih0: Tensor,
    pub b_ih0: Tensor,
    /// Layer 0's image weights `[G, D]`, as stored (the encoder's products are `kernels::linear`
    /// nodes, which read weights so).
    pub w_fc0: Tensor,
    /// Zeros `[G]`: the image term has no bias of its own (`b_ih` is in the word term).
    pub fc0_zero_bias: Tensor,
    pub upper: Vec<(Tensor, Tensor)>,
    pub cells: Vec<CellWeights>,
    pub img_w: Tensor,
    pub img_b: Tensor,
    /// Initial-state layers `(W [H, D], b)`, as stored.
    pub init: Vec<(Tensor, Tensor)>,
    pub att: Option<(Tensor, Tensor, Tensor, AttWeights)>,
    /// The output layer `[V, H]` as stored (read by `kernels::linear`), and transposed for the
    /// decoding steps.
    pub logit_w: Tensor,
    pub logit_w_t: Tensor,
    pub logit_b: Tensor,
}

/// What the encoder gives the decoder: the constant input term of layer 0, the initial states
/// and the attention keys.
#[derive(Clone)]
pub(crate) struct Encoded {
    pub fx: Tensor,
    pub keys: Option<AttKeys>,
}

impl Encoded {
    /// Keeps rows `rows` of the batch (repeats allowed).
    pub fn select(&self, rows: &[u32]) -> Result<Self> {
        let idx = Tensor::from_slice(rows, rows.len(), self.fx.device())?;
        Ok(Self {
            fx: self.fx.index_select(&idx, 0)?,
            keys: self.keys.as_ref().map(|k| k.select(rows)),
        })
    }
}

impl RnnCaptioner {
    /// A freshly initialised captioner on `device`, its weights drawn from `seed` (PyTorch-style
    /// uniform `±1/√fan_in`) so that two runs with the same seed start identically.
    ///
    /// Parameter names: `embed.weight`, `img.weight`, `img.bias`, `init.{l}.weight`,
    /// `init.{l}.bias`, `rnn.{l}.w_ih`, `rnn.{l}.b_ih`, `rnn.{l}.w_hh`, `rnn.{l}.b_hh`,
    /// `rnn.0.w_fc`, `att.feat.weight`, `att.feat.bias`, `att.hid.weight`, `att.score.weight`,
    /// `att.ctx.weight`, `logit.weight`, `logit.bias` (PyTorch `[out, in]` layout).
    pub(crate) fn new(
        cfg: &CaptionerConfig,
        device: &Device,
        origin: &ParamOrigin,
    ) -> Result<Self> {
        cfg.validate()?;
        let mut shapes = specs_of(|param| Params::visit(cfg, param))?;
        // Sorted so that the draws do not depend on the order of `visit`.
        shapes.sort_by(|a, b| a.0.cmp(&b.0));
        let varmap = ParamSource::new(origin, device, cfg.dtype).table(shapes)?;
        let p = Params::from_varmap(&varmap, cfg)?;
        Ok(Self {
            base: ModelBase {
                cfg: cfg.clone(),
                device: device.clone(),
                varmap,
            },
            p,
            running_norm: AtomicBool::new(false),
        })
    }

    /// Another handle on the same weights (their storage is shared).
    pub(crate) fn share(&self) -> Result<Self> {
        Ok(Self {
            base: self.base.clone(),
            p: Params::from_varmap(&self.base.varmap, &self.base.cfg)?,
            running_norm: AtomicBool::new(self.running_norm.load(Ordering::Relaxed)),
        })
    }
}

impl CaptionModel for RnnCaptioner {
    fn base(&self) -> &ModelBase {
        &self.base
    }

    fn base_mut(&mut self) -> &mut ModelBase {
        &mut self.base
    }

    fn step_decoder(&self) -> Result<Box<dyn StepDecoder>> {
        Ok(Box::new(decode::RnnSteps::new(self)?))
    }

    fn set_running_norm(&self, on: bool) {
        self.running_norm.store(on, Ordering::Relaxed);
    }

    fn audio_encoding(&self, mel: &Tensor) -> Result<(Tensor, Tensor)> {
        let c =
            self.p.crnn.as_ref().ok_or_else(|| {
                ModelError::Input("audio_encoding needs a model of kind crnn".into())
            })?;
        let mel = mel.to_dtype(self.base.cfg.dtype)?;
        Ok((
            c.conv_stack(&mel, false, false)?,
            c.forward(&mel, false, false)?,
        ))
    }
}

impl Params {
    /// Handles on the parameters of `varmap`, which holds every one `visit` names.
    pub(crate) fn from_varmap(varmap: &VarMap, cfg: &CaptionerConfig) -> Result<Self> {
        Params::visit(cfg, &mut params::lookup_in(varmap)?)
    }

    /// The recurrent captioner of `cfg`, each parameter asked of `param` by name, shape and
    /// initialisation: the one list of its names (PyTorch's `[out, in]` layout, uniform
    /// `±1/√fan_in` except the word embedding's `±0.1`).
    fn visit(cfg: &CaptionerConfig, param: &mut ParamFn) -> Result<Self> {
        let (v, e, h) = (cfg.vocab_size, cfg.model.embed, cfg.model.hidden);
        let g = cfg.model.rnn.gates() * h;
        let d = cfg.feature_dim();
        let mut t = |name: &str, shape: &[usize], init: Init| -> Result<Tensor> {
            Ok(param(name, shape, init)?.as_tensor().clone())
        };
        let embed = t("embed.weight", &[v, e], Init::Uniform(0.1))?;
        let img_w = t("img.weight", &[e, d], Init::fan_in(d))?;
        let img_b = t("img.bias", &[e], Init::fan_in(d))?;
        let fc_w = t("rnn.0.w_fc", &[g, e], Init::fan_in(h))?;
        let logit_w = t("logit.weight", &[v, h], Init::fan_in(h))?;
        let logit_b = t("logit.bias", &[v], Init::fan_in(h))?;
        let mut init = Vec::new();
        let mut rnn = Vec::new();
        for l in 0..cfg.model.layers {
            let input = if l == 0 { e } else { h };
            init.push((
                t(&format!("init.{l}.weight"), &[h, e], Init::fan_in(e))?,
                t(&format!("init.{l}.bias"), &[h], Init::fan_in(e))?,
            ));
            rnn.push(RnnParams {
                w_ih: t(&format!("rnn.{l}.w_ih"), &[g, input], Init::fan_in(h))?,
                b_ih: t(&format!("rnn.{l}.b_ih"), &[g], Init::fan_in(h))?,
                w_hh: t(&format!("rnn.{l}.w_hh"), &[g, h], Init::fan_in(h))?,
                b_hh: t(&format!("rnn.{l}.b_hh"), &[g], Init::fan_in(h))?,
            });
        }
        let att = match (cfg.model.kind, cfg.att) {
            (ModelKind::Att, Some((_, da))) => {
                let a = cfg.model.att_hidden;
                Some(AttParams {
                    feat_w: t("att.feat.weight", &[a, da], Init::fan_in(da))?,
                    feat_b: t("att.feat.bias", &[a], Init::fan_in(da))?,
                    hid_w: t("att.hid.weight", &[a, h], Init::fan_in(h))?,
                    score_w: t("att.score.weight", &[1, a], Init::fan_in(a))?,
                    ctx_w: t("att.ctx.weight", &[g, da], Init::fan_in(h))?,
                })
            }
            _ => None,
        };
        let crnn = match (cfg.model.kind, cfg.att) {
            (ModelKind::Crnn, Some((_, mels))) => {
                Some(Crnn::visit(cfg.model.crnn_width, mels, param)?)
            }
            _ => None,
        };
        Ok(Self {
            embed,
            img_w,
            img_b,
            init,
            rnn,
            att,
            crnn,
            logit_w,
            logit_b,
            fc_w,
        })
    }
}
