//! One pass of the recurrent captioner: the weights prepared for it, the encoder of the
//! features and one decoder step.

use std::sync::atomic::Ordering;

use candle_core::{Tensor, D};

use super::attention::{attend, AttKeys, AttValues, AttWeights};
use super::cell::{cell_step, CellWeights, LayerState};
use super::crnn;
use super::decode::PackedSteps;
use super::{Encoded, Prepared, RnnCaptioner};
use crate::model::config::{ModelKind, RnnKind};
use crate::model::dropout::dropout;
use crate::model::error::{ModelError, Result};
use crate::model::inputs::Inputs;
use crate::model::rng::CaprlRng;
use caprl_kernels::kernels_enabled;
use caprl_kernels::linear::linear;
use caprl_kernels::transpose::transposed_copy;

impl RnnCaptioner {
    /// Casts (to the compute dtype), transposes and, for decoding, detaches every weight once
    /// for a pass. The cast is a graph node when not detached, so the gradient of a bf16/f16
    /// pass reaches the f32 parameters (`∂L/∂w = cast(∂L/∂w_bf16)`); with the parameters'
    /// own dtype it is the identity.
    pub(crate) fn prepare(&self, detach: bool) -> Result<Prepared> {
        let compute = self.base.cfg.compute_dtype;
        let d = |t: &Tensor| -> Result<Tensor> {
            let t = if detach { t.detach() } else { t.clone() };
            Ok(t.to_dtype(compute)?)
        };
        // Decoding (and the att model's step loop) reads the transposed weights at every step:
        // copy them once, contiguous. The fc model's teacher-forced pass reads each once: the
        // transposed view is enough (the gemm packs it anyway).
        let per_step = detach || self.base.cfg.model.kind == ModelKind::Att;
        let tt = |t: &Tensor| -> Result<Tensor> {
            let t = d(t)?;
            if detach {
                Ok(transposed_copy(&t)?)
            } else if per_step {
                Ok(t.t()?.contiguous()?)
            } else {
                Ok(t.t()?)
            }
        };
        // Weights read once per pass (encoder): a view is enough.
        let once = |t: &Tensor| -> Result<Tensor> { Ok(d(t)?.t()?) };
        let p = &self.p;
        let ban = self.base.never_emitted_bias(compute)?;
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
        let given = if detach { x.detach() } else { x.clone() };
        let compute = self.base.cfg.compute_dtype;
        let x = Inputs {
            fc: given.fc.to_dtype(compute)?,
            att: given.att.clone().map(|a| a.to_dtype(compute)).transpose()?,
            expand: given.expand.clone(),
            images: None,
        };
        if x.fc.dim(D::Minus1)? != self.base.cfg.fc_dim {
            return Err(ModelError::Input(format!(
                "fc features have dim {}, the model expects {}",
                x.fc.dim(D::Minus1)?,
                self.base.cfg.fc_dim
            )));
        }
        let feature = match (&self.p.crnn, &x.att) {
            (Some(c), Some(mel)) => {
                crnn::check_input(mel, self.base.cfg.att.map_or(0, |a| a.1))?;
                let batch_stats = !self.running_norm.load(Ordering::Relaxed);
                // The encoder runs on its master weights (f32/f64, as batch norm's running
                // statistics must be); the decoder gets its embedding in the compute dtype.
                let mel = mel.to_dtype(self.base.cfg.dtype)?;
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
        let mut states = Vec::with_capacity(self.base.cfg.model.layers);
        for (wi, bi) in &w.init {
            let h = linear(&img, wi, bi)?.tanh()?;
            let c = match self.base.cfg.model.rnn {
                RnnKind::Lstm => Some(h.zeros_like()?),
                RnnKind::Gru => None,
            };
            states.push(LayerState { h, c });
        }
        let keys = match (&w.att, &x.att) {
            (Some((feat_w_t, feat_b, ctx_w_t, _)), Some(_)) => {
                // Each image's regions once, whatever the rows repeating them.
                let (_, regions, image) = given.distinct()?;
                let regions = regions
                    .ok_or_else(|| ModelError::Internal("att model: no regions to attend".into()))?
                    .to_dtype(compute)?;
                let (u, r, da) = regions.dims3()?;
                let regions = regions.reshape((u * r, da))?;
                let proj = regions.matmul(feat_w_t)?.broadcast_add(feat_b)?;
                let values = match !detach && kernels_enabled(&self.base.device, compute) {
                    true => AttValues::ContextTerms,
                    false => AttValues::Regions,
                };
                let v = match values {
                    AttValues::ContextTerms => regions.matmul(ctx_w_t)?,
                    AttValues::Regions => regions,
                };
                Some(AttKeys {
                    keys: proj.dim(1)?,
                    kv: Tensor::cat(&[&proj, &v], 1)?.reshape((u, r, ()))?,
                    values,
                    image,
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

    /// One decoder step from the word term `gx_word = W_ih e(w) + b_ih` `[B, G]`; decoding
    /// passes its `packed` weights for the context term.
    pub(crate) fn step(
        &self,
        w: &Prepared,
        enc: &Encoded,
        states: &[LayerState],
        gx_word: &Tensor,
        packed: Option<&PackedSteps>,
        mut drop: Option<&mut CaprlRng>,
    ) -> Result<Vec<LayerState>> {
        let mut gx = (gx_word + &enc.fx)?;
        if let (Some(keys), Some((_, _, ctx_w_t, aw))) = (&enc.keys, &w.att) {
            let top = &states[states.len() - 1].h;
            let attended = attend(keys, aw, top)?;
            let term = match (keys.values, packed.and_then(|p| p.context.as_ref())) {
                (AttValues::ContextTerms, _) => attended,
                (AttValues::Regions, Some(context)) => context.forward_tensor(&attended)?,
                (AttValues::Regions, None) => attended.matmul(ctx_w_t)?,
            };
            gx = (gx + term)?;
        }
        let mut out = Vec::with_capacity(states.len());
        out.push(cell_step(
            self.base.cfg.model.rnn,
            &gx,
            &states[0],
            &w.cells[0],
        )?);
        for l in 1..states.len() {
            let below = dropout(&out[l - 1].h, self.base.cfg.dropout(), drop.as_deref_mut())?;
            let (wt, b) = &w.upper[l - 1];
            let gx = below.matmul(wt)?.broadcast_add(b)?;
            out.push(cell_step(
                self.base.cfg.model.rnn,
                &gx,
                &states[l],
                &w.cells[l],
            )?);
        }
        Ok(out)
    }
}
