//! Teacher forcing: the decoder run over given sequences, with gradients.
//!
//! Inputs are `[BOS, w_1, …, w_{T-1}]`, targets `[w_1, …, w_T]`. The word term of the first
//! layer, `W_ih e(w_t) + b_ih`, is one matmul over all `T·B` steps (time-major so that each
//! step's slice is contiguous). [`RnnCaptioner::token_logprobs`] computes only the taken tokens'
//! log-probabilities (one fused node after the decoder on CPU f32/f64);
//! [`RnnCaptioner::teacher_forced`] the full log-softmax.

use candle_core::{Tensor, D};
use candle_nn::ops::log_softmax;

use super::attention::AttValues;
use super::cell::{packed_state, run_sequence, unpack_states, CellWeights, LayerState};
use super::fused_att;
use super::{Encoded, Prepared, RnnCaptioner};
use crate::model::dropout::dropout;
use crate::model::error::{ModelError, Result};
use crate::model::inputs::{host_tokens, Inputs};
use crate::model::rng::CaprlRng;
use crate::model::seam::{TeacherForced, TeacherForcing};
use crate::model::tokens::BOS;
use caprl_kernels::bias::add_row_bias;
use caprl_kernels::linear::linear;
use caprl_kernels::token_logp::token_log_softmax;

/// The fused recurrent layers a teacher-forced pass can take ([`RnnCaptioner::fused_path`]).
enum FusedPath {
    Layers,
    Attention,
}

/// The decoder run over given sequences: the prepared weights, the tokens on the host and the
/// top layer's states `[T, B, S]` (time-major; `S = H`, or `2H` for the fused LSTM's packed
/// `[h, c]`).
struct TeacherRun {
    w: Prepared,
    host: Vec<Vec<u32>>,
    top: Tensor,
}

impl TeacherRun {
    /// The top layer's hidden states `[T, B, H]`.
    fn hidden(&self, hidden: usize) -> Result<Tensor> {
        Ok(match self.top.dim(2)? == hidden {
            true => self.top.clone(),
            false => self.top.narrow(2, 0, hidden)?,
        })
    }
}

impl TeacherForcing for RnnCaptioner {
    /// `log p(w_t | w_<t, I)` of the given tokens `[B, T]` and the mask `[B, T]` (1 up to and
    /// including the first EOS; all non-PAD tokens when there is no EOS). `seqs` is `u32` `[B, T]`:
    /// tokens without BOS, ending at EOS, padded with PAD. Masked positions of `logp` are 0.
    /// Dropout is applied when `dropout_rng` is given (training).
    fn fused_token_logprobs(
        &self,
        x: &Inputs,
        seqs: &Tensor,
        mut dropout_rng: Option<&mut CaprlRng>,
    ) -> Result<Tensor> {
        // The states are read time-major as the recurrent layer wrote them, with the output
        // dropout inside.
        let run = self.teacher_run(x, seqs, dropout_rng.as_deref_mut())?;
        let (b, t) = seqs.dims2()?;
        let h = self.base.cfg.model.hidden;
        let drop = match dropout_rng {
            // Drawn batch-major, as `output_states` draws it, so both passes drop the same units.
            Some(rng) if self.base.cfg.dropout() > 0.0 => {
                let batch_major = rng.dropout_mask(b * t * h, self.base.cfg.dropout());
                let mut mask = Vec::with_capacity(b * t * h);
                for s in 0..t {
                    for r in 0..b {
                        let at = (r * t + s) * h;
                        mask.extend_from_slice(&batch_major[at..at + h]);
                    }
                }
                Some(mask)
            }
            _ => None,
        };
        let targets: Vec<u32> = (0..t)
            .flat_map(|s| run.host.iter().map(move |row| row[s]))
            .collect();
        let logp = token_log_softmax(&run.top, &run.w.logit_w, &run.w.logit_b, targets, drop)?
            .ok_or_else(|| ModelError::Internal("token log-softmax: unsupported tensors".into()))?
            .reshape((t, b))?
            .t()?;
        Ok(logp)
    }

    /// The teacher-forced pass: full log-softmax `[B, T, V]` and hidden states `[B, T, H]`.
    fn teacher_forced(
        &self,
        x: &Inputs,
        seqs: &Tensor,
        mut dropout_rng: Option<&mut CaprlRng>,
    ) -> Result<TeacherForced> {
        let run = self.teacher_run(x, seqs, dropout_rng.as_deref_mut())?;
        let (b, t) = seqs.dims2()?;
        let w = &run.w;
        let top = run.hidden(self.base.cfg.model.hidden)?;
        let out = self.output_states(&top, dropout_rng)?;
        let logits =
            linear(&out.reshape((b * t, ()))?, &w.logit_w, &w.logit_b)?.reshape((b, t, ()))?;
        // Log-softmax and the losses after it in the parameters' dtype (f32): a bf16
        // log-sum-exp over the vocabulary loses the small log-probabilities the losses need.
        let logprobs_full = log_softmax(&logits.to_dtype(self.base.cfg.dtype)?, D::Minus1)?;
        Ok(TeacherForced {
            logprobs_full,
            hidden: top.transpose(0, 1)?.to_dtype(self.base.cfg.dtype)?,
        })
    }
}

impl RnnCaptioner {
    /// The top states `[T, B, H]` as the output layer reads them: batch-major `[B, T, H]`, with
    /// dropout (its mask drawn in that order).
    fn output_states(&self, top: &Tensor, drop: Option<&mut CaprlRng>) -> Result<Tensor> {
        let hidden = top.transpose(0, 1)?;
        let out = dropout(&hidden, self.base.cfg.dropout(), drop)?;
        Ok(out.contiguous()?)
    }

    /// Checks the tokens, encodes the images and runs the decoder over `[BOS, w_1, …]`.
    fn teacher_run(
        &self,
        x: &Inputs,
        seqs: &Tensor,
        mut dropout_rng: Option<&mut CaprlRng>,
    ) -> Result<TeacherRun> {
        let (b, t) = seqs.dims2()?;
        // The tokens come to the host once per pass (not per step): to check them against the
        // vocabulary and to build the time-major input ids.
        let host = host_tokens(x, seqs, self.base.cfg.vocab_size)?;
        // Time-major inputs: step s reads BOS (s = 0) or the target of step s - 1.
        let mut ids = Vec::with_capacity(t * b);
        for s in 0..t {
            for row in &host {
                ids.push(if s == 0 { BOS } else { row[s - 1] });
            }
        }
        let ids = Tensor::from_vec(ids, t * b, &self.base.device)?;
        let w = self.prepare(false)?;
        let (enc, mut states) = self.encode(&w, x, false)?;
        let emb = w.embed.index_select(&ids, 0)?;
        let emb = dropout(&emb, self.base.cfg.dropout(), dropout_rng.as_deref_mut())?;
        let top = match self.fused_path(&w, &enc) {
            Some(path) => {
                // Layer 0's input term, word and image parts, as one node: `e W_ihᵀ + (b_ih + fx)`.
                let rows = add_row_bias(&enc.fx, &w.b_ih0)?;
                let gx = linear(&emb.reshape((t, b, ()))?, &w.w_ih0, &rows)?;
                match path {
                    FusedPath::Layers => {
                        self.run_fused(&w, &states, gx, dropout_rng.as_deref_mut())?
                    }
                    FusedPath::Attention => self.run_fused_att(&w, &enc, &states[0], &gx)?,
                }
            }
            None => None,
        };
        let top = match top {
            Some(top) => top,
            None => {
                let gx_all = linear(&emb, &w.w_ih0, &w.b_ih0)?.reshape((t, b, ()))?;
                let mut hs = Vec::with_capacity(t);
                for s in 0..t {
                    let gx = gx_all.get(s)?;
                    states = self.step(&w, &enc, &states, &gx, None, dropout_rng.as_deref_mut())?;
                    hs.push(states[states.len() - 1].h.clone());
                }
                Tensor::stack(&hs, 0)? // [T, B, H]
            }
        };
        Ok(TeacherRun { w, host, top })
    }

    /// Which fused recurrent layer can run the whole sequence, if any: layer by layer without
    /// attention (whose query is the previous top hidden state, so it must go step by step
    /// across layers), or the one-layer att decoder in one node when the pass attends over
    /// context terms (CPU kernels, with gradients).
    fn fused_path(&self, w: &Prepared, enc: &Encoded) -> Option<FusedPath> {
        let fused_cells = w
            .cells
            .iter()
            .all(|c| matches!(c, CellWeights::Fused { .. }));
        match &enc.keys {
            _ if !fused_cells => None,
            None => Some(FusedPath::Layers),
            Some(keys) if keys.values == AttValues::ContextTerms && w.cells.len() == 1 => {
                Some(FusedPath::Attention)
            }
            Some(_) => None,
        }
    }

    /// The one-layer att decoder over the whole sequence ([`fused_att`]), from its input term
    /// `gx` `[T, B, G]` (image term included); `None` where it does not apply.
    fn run_fused_att(
        &self,
        w: &Prepared,
        enc: &Encoded,
        state: &LayerState,
        gx: &Tensor,
    ) -> Result<Option<Tensor>> {
        let (Some(keys), Some((_, _, _, aw)), [CellWeights::Fused { w_hh, b_hh, w_hh_t }]) =
            (&enc.keys, &w.att, &w.cells[..])
        else {
            return Ok(None);
        };
        let weights = fused_att::Weights {
            w_hh,
            w_hh_t,
            b_hh,
            w_h_t: &aw.w_hid_t,
            w_a: &aw.w_score_t,
        };
        let regions = (&keys.kv, keys.keys, &keys.image[..]);
        let s0 = packed_state(self.base.cfg.model.rnn, state)?;
        Ok(Some(fused_att::run(
            self.base.cfg.model.rnn,
            gx,
            regions,
            &weights,
            &s0,
        )?))
    }

    /// The whole sequence layer by layer with the fused recurrent layer, from layer 0's input
    /// term `gx` `[T, B, G]` (image term included). Returns the top layer's states `[T, B, S]`
    /// as the fused layer packs them, or `None` to fall back to the step loop. Dropout between
    /// layers draws its masks in the same order as the step loop (time-major), so both give the
    /// same result for the same RNG.
    fn run_fused(
        &self,
        w: &Prepared,
        states: &[LayerState],
        mut gx: Tensor,
        mut drop: Option<&mut CaprlRng>,
    ) -> Result<Option<Tensor>> {
        let kind = self.base.cfg.model.rnn;
        let hidden = self.base.cfg.model.hidden;
        let (t, b, _) = gx.dims3()?;
        let mut top = None;
        for (l, state) in states.iter().enumerate() {
            if l > 0 {
                let below: Tensor = top.take().ok_or_else(|| {
                    ModelError::Internal("fused decoder: missing the layer below".into())
                })?;
                let below = unpack_states(kind, &below, hidden)?.0;
                let below = dropout(&below, self.base.cfg.dropout(), drop.as_deref_mut())?;
                let (wt, bias) = &w.upper[l - 1];
                gx = add_row_bias(&below.reshape((t * b, hidden))?.matmul(wt)?, bias)?
                    .reshape((t, b, ()))?;
            }
            let Some(out) = run_sequence(kind, &gx, state, &w.cells[l])? else {
                return Ok(None);
            };
            top = Some(out);
        }
        Ok(top)
    }
}
