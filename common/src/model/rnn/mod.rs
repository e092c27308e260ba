//! The captioner: parameters, the encoder of image features and one decoder step.
//!
//! `fc` model (self-critical.pytorch's FC model): `img = relu(W_img f + b)`; every layer's state
//! starts at `h_0 = tanh(W_init img + b)` (LSTM `c_0 = 0`) and `img` is also fed to the first
//! layer at every step: its gates get `W_ih e(w_t) + W_fc img + b_ih`.
//! `att` model (Show, Attend and Tell): as `fc`, and the first layer also gets
//! `W_ctx ctx_t` where `ctx_t` attends over the regions with the previous top hidden state.
//! Output: `logits_t = W_out dropout(h_t) + b_out`; PAD and BOS are never predicted.

use std::sync::atomic::{AtomicBool, Ordering};

use candle_core::{DType, Device, Tensor, Var, D};
use candle_nn::VarMap;

use super::attention::{attend, AttKeys, AttWeights};
use super::config::{CaptionerConfig, ModelKind, RnnKind};
use super::crnn::{self, Crnn};
use super::dropout::dropout;
use super::error::{ModelError, Result};
use super::linear::linear;
use super::rng::CaprlRng;
use super::rnn::{cell_step, CellWeights, LayerState};
use super::transpose::transposed_copy;
use super::{BOS, PAD};
use crate::fastmath::exp_f32;

/// A batch of image features on the model's device.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// Global features `[B, Dfc]`.
    pub fc: Tensor,
    /// Region features `[B, R, Da]` (att models; log-mel frames for crnn).
    pub att: Option<Tensor>,
    /// crnn only: `att` holds each distinct clip once, `[U, T, M]`, and row `i` of the batch
    /// is clip `expand[i]` (u32 `[B]`), so a clip repeated for its references or samples is
    /// encoded once.
    pub(crate) expand: Option<Tensor>,
}

impl Inputs {
    /// Builds a batch of `b` images from row-major host features (as `Dataset::fc_rows` and
    /// `Dataset::att_rows` return them), checking their sizes against `cfg`.
    pub fn from_host(
        fc: &[f32],
        att: Option<&[f32]>,
        b: usize,
        cfg: &CaptionerConfig,
        device: &Device,
    ) -> Result<Self> {
        if fc.len() != b * cfg.fc_dim {
            return Err(ModelError::Input(format!(
                "fc features have {} values, expected batch {b} x fc_dim {} = {}",
                fc.len(),
                cfg.fc_dim,
                b * cfg.fc_dim
            )));
        }
        let fc = Tensor::from_slice(fc, (b, cfg.fc_dim), device)?.to_dtype(cfg.compute_dtype)?;
        let needs_att = matches!(cfg.kind, ModelKind::Att | ModelKind::Crnn);
        let att =
            match (needs_att, cfg.att, att) {
                (true, Some((r, d)), Some(a)) => {
                    if a.len() != b * r * d {
                        return Err(ModelError::Input(format!(
                            "region features have {} values, expected {b} x {r} x {d}",
                            a.len()
                        )));
                    }
                    Some(Tensor::from_slice(a, (b, r, d), device)?.to_dtype(cfg.compute_dtype)?)
                }
                (true, _, None) => return Err(ModelError::Input(
                    "the att and crnn models need region (log-mel frame) features; none were given"
                        .into(),
                )),
                _ => None,
            };
        Ok(Self {
            fc,
            att,
            expand: None,
        })
    }

    /// Makes row `i` of the batch clip `expand[i]` of these inputs (crnn: `att` stays one
    /// row per distinct clip).
    pub(crate) fn expand_rows(self, expand: &[u32]) -> Result<Self> {
        let idx = Tensor::from_slice(expand, expand.len(), self.fc.device())?;
        Ok(Self {
            fc: self.fc.index_select(&idx, 0)?,
            att: self.att,
            expand: Some(idx),
        })
    }

    /// Number of images in the batch.
    pub fn batch_size(&self) -> Result<usize> {
        Ok(self.fc.dim(0)?)
    }

    /// Each image repeated `n` times in place: rows `i*n .. i*n+n` are image `i`.
    pub fn repeat_each(&self, n: usize) -> Result<Self> {
        let b = self.batch_size()?;
        let idx: Vec<u32> = (0..b as u32)
            .flat_map(|i| std::iter::repeat_n(i, n))
            .collect();
        let idx = Tensor::from_vec(idx, b * n, self.fc.device())?;
        self.select(&idx)
    }

    /// The images at `rows` (repeats allowed), in that order.
    pub fn select_rows(&self, rows: &[usize]) -> Result<Self> {
        let b = self.batch_size()?;
        if let Some(bad) = rows.iter().find(|&&r| r >= b) {
            return Err(ModelError::Input(format!(
                "row {bad} is outside a batch of {b}"
            )));
        }
        let idx: Vec<u32> = rows.iter().map(|&r| r as u32).collect();
        self.select(&Tensor::from_vec(idx, rows.len(), self.fc.device())?)
    }

    pub(crate) fn select(&self, idx: &Tensor) -> Result<Self> {
        Ok(Self {
            fc: self.fc.index_select(idx, 0)?,
            att: match (&self.att, &self.expand) {
                (Some(a), None) => Some(a.index_select(idx, 0)?),
                (Some(a), Some(_)) => Some(a.clone()),
                (None, _) => None,
            },
            expand: match &self.expand {
                Some(e) => Some(e.index_select(idx, 0)?),
                None => None,
            },
        })
    }

    fn detach(&self) -> Self {
        Self {
            fc: self.fc.detach(),
            att: self.att.as_ref().map(|a| a.detach()),
            expand: self.expand.clone(),
        }
    }
}

/// Pads token sequences (no BOS, ending at EOS) with PAD to `[B, T]`, `T` the longest length.
pub fn batch_tokens(seqs: &[Vec<u32>], device: &Device) -> Result<Tensor> {
    let t = seqs.iter().map(Vec::len).max().unwrap_or(0).max(1);
    let mut flat = vec![PAD; seqs.len() * t];
    for (row, s) in flat.chunks_mut(t).zip(seqs) {
        row[..s.len()].copy_from_slice(s);
    }
    Ok(Tensor::from_vec(flat, (seqs.len(), t), device)?)
}

/// The captioning policy. Owns its weights in a [`VarMap`] under stable names (see [`Captioner::new`]).
pub struct Captioner {
    pub(crate) cfg: CaptionerConfig,
    pub(crate) device: Device,
    pub(crate) varmap: VarMap,
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
    /// `W_ih` of layer 0 `[G, E]` as stored (read by [`super::linear`]).
    pub w_ih0: Tensor,
    pub b_ih0: Tensor,
    /// Layer 0's image weights `[G, D]`, as stored (the encoder's products are [`super::linear`]
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
    /// The output layer `[V, H]` as stored (read by [`super::linear`]), and transposed for the
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
    pub fn select(&self, idx: &Tensor) -> Result<Self> {
        Ok(Self {
            fx: self.fx.index_select(idx, 0)?,
            keys: match &self.keys {
                Some(k) => Some(k.select(idx)?),
                None => None,
            },
        })
    }
}

impl Captioner {
    /// A freshly initialised captioner on `device`, its weights drawn from `seed` (PyTorch-style
    /// uniform `±1/√fan_in`) so that two runs with the same seed start identically.
    ///
    /// Parameter names: `embed.weight`, `img.weight`, `img.bias`, `init.{l}.weight`,
    /// `init.{l}.bias`, `rnn.{l}.w_ih`, `rnn.{l}.b_ih`, `rnn.{l}.w_hh`, `rnn.{l}.b_hh`,
    /// `rnn.0.w_fc`, `att.feat.weight`, `att.feat.bias`, `att.hid.weight`, `att.score.weight`,
    /// `att.ctx.weight`, `logit.weight`, `logit.bias` (PyTorch `[out, in]` layout).
    pub fn new(cfg: &CaptionerConfig, device: &Device, seed: u64) -> Result<Self> {
        cfg.validate()?;
        let varmap = VarMap::new();
        let mut rng = CaprlRng::new(seed);
        let (v, e, h) = (cfg.vocab_size, cfg.embed, cfg.hidden);
        let g = cfg.rnn.gates() * h;
        let mut shapes: Vec<(String, Vec<usize>, f64)> = vec![
            ("embed.weight".into(), vec![v, e], 0.1),
            (
                "img.weight".into(),
                vec![e, cfg.feature_dim()],
                fan(cfg.feature_dim()),
            ),
            ("img.bias".into(), vec![e], fan(cfg.feature_dim())),
            ("rnn.0.w_fc".into(), vec![g, e], fan(h)),
            ("logit.weight".into(), vec![v, h], fan(h)),
            ("logit.bias".into(), vec![v], fan(h)),
        ];
        for l in 0..cfg.layers {
            let input = if l == 0 { e } else { h };
            shapes.push((format!("init.{l}.weight"), vec![h, e], fan(e)));
            shapes.push((format!("init.{l}.bias"), vec![h], fan(e)));
            shapes.push((format!("rnn.{l}.w_ih"), vec![g, input], fan(h)));
            shapes.push((format!("rnn.{l}.b_ih"), vec![g], fan(h)));
            shapes.push((format!("rnn.{l}.w_hh"), vec![g, h], fan(h)));
            shapes.push((format!("rnn.{l}.b_hh"), vec![g], fan(h)));
        }
        if let (ModelKind::Att, Some((_, da))) = (cfg.kind, cfg.att) {
            let a = cfg.att_hidden;
            shapes.push(("att.feat.weight".into(), vec![a, da], fan(da)));
            shapes.push(("att.feat.bias".into(), vec![a], fan(da)));
            shapes.push(("att.hid.weight".into(), vec![a, h], fan(h)));
            shapes.push(("att.score.weight".into(), vec![1, a], fan(a)));
            shapes.push(("att.ctx.weight".into(), vec![g, da], fan(h)));
        }
        let mut constants = Vec::new();
        if let (ModelKind::Crnn, Some((_, mels))) = (cfg.kind, cfg.att) {
            for (name, shape, bound) in crnn::param_shapes(cfg.crnn_width, mels) {
                match bound {
                    Some(b) => shapes.push((name, shape, b)),
                    None => constants.push((name, shape)),
                }
            }
        }
        // Sorted so that the draws do not depend on the order above.
        shapes.sort_by(|a, b| a.0.cmp(&b.0));
        {
            let mut data = varmap.data().lock().map_err(|_| {
                ModelError::Input("the model's VarMap lock was poisoned by a panic".into())
            })?;
            for (name, shape) in constants {
                let value = crnn::init_value(&name);
                let t = (Tensor::ones(shape, cfg.dtype, device)? * value)?;
                data.insert(name, Var::from_tensor(&t)?);
            }
            for (name, shape, bound) in shapes {
                let n: usize = shape.iter().product();
                let vals: Vec<f64> = (0..n)
                    .map(|_| (2.0 * rng.uniform_open() - 1.0) * bound)
                    .collect();
                let t = Tensor::from_vec(vals, shape, device)?.to_dtype(cfg.dtype)?;
                data.insert(name, Var::from_tensor(&t)?);
            }
        }
        let p = Params::from_varmap(&varmap, cfg)?;
        Ok(Self {
            cfg: cfg.clone(),
            device: device.clone(),
            varmap,
            p,
            running_norm: AtomicBool::new(false),
        })
    }

    /// crnn only (other models have no batch norm): `true` makes passes with gradients use
    /// the running batch-norm statistics, as decoding does, instead of the batch's (and leave
    /// them unchanged). Policy-gradient updates set it, since their samples were drawn with the
    /// running statistics; cross-entropy updates clear it.
    pub fn set_running_norm(&self, on: bool) {
        self.running_norm.store(on, Ordering::Relaxed);
    }

    /// The CRNN encoder's convolution output `[B, T/4, n_mels/64, W]` and embedding `[B, 2W]`
    /// for log-mel frames `mel` `[B, T, n_mels]`, with running batch-norm statistics and no
    /// gradients (as decoding sees it). Fails for models that are not `crnn`.
    pub fn audio_encoding(&self, mel: &Tensor) -> Result<(Tensor, Tensor)> {
        let c =
            self.p.crnn.as_ref().ok_or_else(|| {
                ModelError::Input("audio_encoding needs a model of kind crnn".into())
            })?;
        let mel = mel.to_dtype(self.cfg.dtype)?;
        Ok((
            c.conv_stack(&mel, false, false)?,
            c.forward(&mel, false, false)?,
        ))
    }

    /// Another handle on the same weights (their storage is shared).
    pub(crate) fn share(&self) -> Result<Self> {
        Ok(Self {
            cfg: self.cfg.clone(),
            device: self.device.clone(),
            varmap: self.varmap.clone(),
            p: Params::from_varmap(&self.varmap, &self.cfg)?,
            running_norm: AtomicBool::new(self.running_norm.load(Ordering::Relaxed)),
        })
    }

    /// The model's configuration.
    pub fn config(&self) -> &CaptionerConfig {
        &self.cfg
    }

    /// The device the weights live on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The trainable variables, by stable name.
    pub fn varmap(&self) -> &VarMap {
        &self.varmap
    }

    /// Sets the dtype of the forward passes (`f32`, `bf16`, `f16`); the parameters keep theirs.
    pub fn set_compute_dtype(&mut self, dtype: DType) -> Result<()> {
        let mut cfg = self.cfg.clone();
        cfg.compute_dtype = dtype;
        cfg.validate()?;
        self.cfg = cfg;
        Ok(())
    }

    /// Another handle on the same weights whose forward passes compute in `dtype`.
    pub fn with_compute_dtype(&self, dtype: DType) -> Result<Self> {
        let mut view = self.share()?;
        view.set_compute_dtype(dtype)?;
        Ok(view)
    }

    /// Casts (to the compute dtype), transposes and, for decoding, detaches every weight once
    /// for a pass. The cast is a graph node when not detached, so the gradient of a bf16/f16
    /// pass reaches the f32 parameters (`∂L/∂w = cast(∂L/∂w_bf16)`); with the parameters'
    /// own dtype it is the identity.
    pub(crate) fn prepare(&self, detach: bool) -> Result<Prepared> {
        let compute = self.cfg.compute_dtype;
        let d = |t: &Tensor| -> Result<Tensor> {
            let t = if detach { t.detach() } else { t.clone() };
            Ok(t.to_dtype(compute)?)
        };
        // Decoding (and the att model's step loop) reads the transposed weights at every step:
        // copy them once, contiguous. The fc model's teacher-forced pass reads each once: the
        // transposed view is enough (the gemm packs it anyway).
        let per_step = detach || self.cfg.kind == ModelKind::Att;
        let tt = |t: &Tensor| -> Result<Tensor> {
            let t = d(t)?;
            if detach {
                transposed_copy(&t)
            } else if per_step {
                Ok(t.t()?.contiguous()?)
            } else {
                Ok(t.t()?)
            }
        };
        // Weights read once per pass (encoder): a view is enough.
        let once = |t: &Tensor| -> Result<Tensor> { Ok(d(t)?.t()?) };
        let p = &self.p;
        // PAD and BOS are never emitted: a large negative constant on their logits (finite in
        // f16, whose largest value is 65504: an infinite logit would make `0 · log p` NaN).
        let never = if compute == DType::F16 { -1e4 } else { -1e9 };
        let mut ban = vec![0f32; self.cfg.vocab_size];
        ban[PAD as usize] = never;
        ban[BOS as usize] = never;
        let ban = Tensor::from_vec(ban, self.cfg.vocab_size, &self.device)?.to_dtype(compute)?;
        let mut att = None;
        if let Some(a) = &p.att {
            att = Some((
                once(&a.feat_w)?,
                d(&a.feat_b)?,
                tt(&a.ctx_w)?,
                AttWeights {
                    w_hid_t: tt(&a.hid_w)?,
                    w_score_t: tt(&a.score_w)?,
                },
            ));
        }
        Ok(Prepared {
            embed: d(&p.embed)?,
            w_ih0: d(&p.rnn[0].w_ih)?,
            b_ih0: d(&p.rnn[0].b_ih)?,
            w_fc0: d(&p.fc_w)?,
            fc0_zero_bias: d(&p.rnn[0].b_ih)?.zeros_like()?,
            upper: p.rnn[1..]
                .iter()
                .map(|r| Ok((tt(&r.w_ih)?, d(&r.b_ih)?)))
                .collect::<Result<_>>()?,
            // The fused layer takes only CPU f32/f64: other dtypes and devices get the step loop.
            cells: p
                .rnn
                .iter()
                .map(|r| CellWeights::new(&d(&r.w_hh)?, &d(&r.b_hh)?))
                .collect::<Result<_>>()?,
            img_w: d(&p.img_w)?,
            img_b: d(&p.img_b)?,
            init: p
                .init
                .iter()
                .map(|(w, b)| Ok((d(w)?, d(b)?)))
                .collect::<Result<_>>()?,
            att,
            logit_w: d(&p.logit_w)?,
            // Read only by the decoding steps: a view (no copy) for the teacher-forced pass.
            logit_w_t: if detach {
                tt(&p.logit_w)?
            } else {
                d(&p.logit_w)?.t()?
            },
            logit_b: d(&p.logit_b)?.add(&ban)?,
        })
    }

    /// Encodes the images: layer-0 image term `fx = W_fc img`, initial states, attention keys.
    pub(crate) fn encode(
        &self,
        w: &Prepared,
        x: &Inputs,
        detach: bool,
    ) -> Result<(Encoded, Vec<LayerState>)> {
        let x = if detach { x.detach() } else { x.clone() };
        let compute = self.cfg.compute_dtype;
        let x = Inputs {
            fc: x.fc.to_dtype(compute)?,
            att: x.att.map(|a| a.to_dtype(compute)).transpose()?,
            expand: x.expand,
        };
        if x.fc.dim(D::Minus1)? != self.cfg.fc_dim {
            return Err(ModelError::Input(format!(
                "fc features have dim {}, the model expects {}",
                x.fc.dim(D::Minus1)?,
                self.cfg.fc_dim
            )));
        }
        let feature = match (&self.p.crnn, &x.att) {
            (Some(c), Some(mel)) => {
                crnn::check_input(mel, self.cfg.att.map_or(0, |a| a.1))?;
                let batch_stats = !self.running_norm.load(Ordering::Relaxed);
                // The encoder runs on its master weights (f32/f64, as batch norm's running
                // statistics must be); the decoder gets its embedding in the compute dtype.
                let mel = mel.to_dtype(self.cfg.dtype)?;
                let v = c.forward(&mel, !detach, batch_stats)?.to_dtype(compute)?;
                match &x.expand {
                    Some(e) => v.index_select(e, 0)?,
                    None => v,
                }
            }
            (Some(_), None) => {
                return Err(ModelError::Input(
                    "the crnn model needs log-mel frames; none were given".into(),
                ))
            }
            _ => x.fc.clone(),
        };
        let img = linear(&feature, &w.img_w, &w.img_b)?.relu()?;
        let fx = linear(&img, &w.w_fc0, &w.fc0_zero_bias)?;
        let mut states = Vec::with_capacity(self.cfg.layers);
        for (wi, bi) in &w.init {
            let h = linear(&img, wi, bi)?.tanh()?;
            let c = match self.cfg.rnn {
                RnnKind::Lstm => Some(h.zeros_like()?),
                RnnKind::Gru => None,
            };
            states.push(LayerState { h, c });
        }
        let keys = match (&w.att, &x.att) {
            (Some((feat_w_t, feat_b, _, _)), Some(a)) => {
                let (b, r, da) = a.dims3()?;
                let proj = a
                    .reshape((b * r, da))?
                    .matmul(feat_w_t)?
                    .broadcast_add(feat_b)?
                    .reshape((b, r, ()))?;
                Some(AttKeys {
                    feats: a.clone(),
                    proj,
                })
            }
            (Some(_), None) => {
                return Err(ModelError::Input(
                    "the att model needs region features; none were given".into(),
                ))
            }
            _ => None,
        };
        Ok((Encoded { fx, keys }, states))
    }

    /// One decoder step from the word term `gx_word = W_ih e(w) + b_ih` `[B, G]`.
    pub(crate) fn step(
        &self,
        w: &Prepared,
        enc: &Encoded,
        states: &[LayerState],
        gx_word: &Tensor,
        mut drop: Option<&mut CaprlRng>,
    ) -> Result<Vec<LayerState>> {
        let mut gx = (gx_word + &enc.fx)?;
        if let (Some(keys), Some((_, _, ctx_w_t, aw))) = (&enc.keys, &w.att) {
            let top = &states[states.len() - 1].h;
            let ctx = attend(keys, aw, top)?;
            gx = (gx + ctx.matmul(ctx_w_t)?)?;
        }
        let mut out = Vec::with_capacity(states.len());
        out.push(cell_step(self.cfg.rnn, &gx, &states[0], &w.cells[0])?);
        for l in 1..states.len() {
            let below = dropout(&out[l - 1].h, self.cfg.dropout, drop.as_deref_mut())?;
            let (wt, b) = &w.upper[l - 1];
            let gx = below.matmul(wt)?.broadcast_add(b)?;
            out.push(cell_step(self.cfg.rnn, &gx, &states[l], &w.cells[l])?);
        }
        Ok(out)
    }
}

impl Params {
    pub(crate) fn from_varmap(varmap: &VarMap, cfg: &CaptionerConfig) -> Result<Self> {
        let data = varmap
            .data()
            .lock()
            .map_err(|_| ModelError::Input("the model's VarMap lock was poisoned".into()))?;
        let get = |name: &str| -> Result<Tensor> {
            data.get(name)
                .map(|v| v.as_tensor().clone())
                .ok_or_else(|| ModelError::Input(format!("missing parameter `{name}`")))
        };
        let layers = cfg.layers;
        let init = (0..layers)
            .map(|l| {
                Ok((
                    get(&format!("init.{l}.weight"))?,
                    get(&format!("init.{l}.bias"))?,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let rnn = (0..layers)
            .map(|l| {
                Ok(RnnParams {
                    w_ih: get(&format!("rnn.{l}.w_ih"))?,
                    b_ih: get(&format!("rnn.{l}.b_ih"))?,
                    w_hh: get(&format!("rnn.{l}.w_hh"))?,
                    b_hh: get(&format!("rnn.{l}.b_hh"))?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let crnn = if cfg.kind == ModelKind::Crnn {
            let get_var = |name: &str| -> Result<Var> {
                data.get(name)
                    .cloned()
                    .ok_or_else(|| ModelError::Input(format!("missing parameter `{name}`")))
            };
            Some(Crnn::from_vars(cfg.crnn_width, &get_var)?)
        } else {
            None
        };
        let att = if cfg.kind == ModelKind::Att {
            Some(AttParams {
                feat_w: get("att.feat.weight")?,
                feat_b: get("att.feat.bias")?,
                hid_w: get("att.hid.weight")?,
                score_w: get("att.score.weight")?,
                ctx_w: get("att.ctx.weight")?,
            })
        } else {
            None
        };
        Ok(Self {
            embed: get("embed.weight")?,
            img_w: get("img.weight")?,
            img_b: get("img.bias")?,
            init,
            rnn,
            att,
            crnn,
            logit_w: get("logit.weight")?,
            logit_b: get("logit.bias")?,
            fc_w: get("rnn.0.w_fc")?,
        })
    }
}

fn fan(n: usize) -> f64 {
    1.0 / (n.max(1) as f64).sqrt()
}

/// Host-side `log_softmax` of one row, in f64 for stable sums.
pub(crate) fn host_log_softmax(logits: &[f32], inv_temp: f64) -> Vec<f64> {
    let lse = host_log_sum_exp(logits, inv_temp);
    logits.iter().map(|&v| v as f64 * inv_temp - lse).collect()
}

/// Entry `w` of [`host_log_softmax`], without building the whole vector.
pub(crate) fn host_logprob(logits: &[f32], inv_temp: f64, w: usize) -> f32 {
    (logits[w] as f64 * inv_temp - host_log_sum_exp(logits, inv_temp)) as f32
}

fn host_log_sum_exp(logits: &[f32], inv_temp: f64) -> f64 {
    let max = logits
        .iter()
        .fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64 * inv_temp));
    // The differences in f64 (exact enough for any temperature), their exponentials with the
    // f32 polynomial (all ≤ 0, so e^d ∈ (0, 1], relative error ~2e-7): every decoding step
    // calls this for every row, and a libm `exp` per logit was a visible share of a step.
    logits
        .iter()
        .map(|&v| exp_f32((v as f64 * inv_temp - max) as f32) as f64)
        .sum::<f64>()
        .ln()
        + max
}
