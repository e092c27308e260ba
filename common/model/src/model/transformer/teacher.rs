//! Teacher forcing: the whole sequence in one pass, the causal mask keeping every position to
//! its prefix. Inputs `[BOS, w_1, …, w_{T-1}]`, targets `[w_1, …, w_T]`.

use candle_core::{Tensor, D};
use candle_nn::ops::log_softmax;

use super::layers::Linear;
use super::TransformerCaptioner;
use crate::model::error::{ModelError, Result};
use crate::model::inputs::{host_tokens, Inputs};
use crate::model::rng::CaprlRng;
use crate::model::seam::{TeacherForced, TeacherForcing};
use crate::model::tokens::BOS;
use caprl_kernels::token_logp::token_log_softmax;

/// The decoder states of a teacher-forced pass and what produced them.
struct TeacherRun {
    /// The final-norm decoder states `[B, T, d]`.
    states: Tensor,
    /// The tokens on the host.
    host: Vec<Vec<u32>>,
    /// The output layer, prepared for this pass.
    logit: Linear,
}

impl TeacherForcing for TransformerCaptioner {
    /// `log p(w_t | w_<t, I)` of `seqs` and their mask (see
    /// [`Captioner::token_logprobs`](crate::model::Captioner::token_logprobs)).
    fn fused_token_logprobs(
        &self,
        x: &Inputs,
        seqs: &Tensor,
        dropout_rng: Option<&mut CaprlRng>,
    ) -> Result<Tensor> {
        let run = self.teacher_run(x, seqs, dropout_rng)?;
        let (b, t) = seqs.dims2()?;
        let d = self.shape().d_model;
        let targets: Vec<u32> = run.host.iter().flatten().copied().collect();
        let logp = token_log_softmax(
            &run.states.reshape((b * t, d))?,
            &run.logit.w,
            &run.logit.b,
            targets,
            None,
        )?
        .ok_or_else(|| ModelError::Internal("token log-softmax: unsupported tensors".into()))?
        .reshape((b, t))?;
        Ok(logp)
    }

    /// The full log-softmax `[B, T, V]` and the decoder states `[B, T, d]`.
    fn teacher_forced(
        &self,
        x: &Inputs,
        seqs: &Tensor,
        dropout_rng: Option<&mut CaprlRng>,
    ) -> Result<TeacherForced> {
        let run = self.teacher_run(x, seqs, dropout_rng)?;
        let logits = run.logit.forward(&run.states)?;
        // Log-softmax and the losses after it in the parameters' dtype (f32), as the recurrent
        // models do: a bf16 log-sum-exp over the vocabulary loses small log-probabilities.
        Ok(TeacherForced {
            logprobs_full: log_softmax(&logits.to_dtype(self.base.cfg.dtype)?, D::Minus1)?,
            hidden: run.states.to_dtype(self.base.cfg.dtype)?,
        })
    }
}

impl TransformerCaptioner {
    /// Checks the tokens, encodes the images and runs the decoder over `[BOS, w_1, …]`.
    fn teacher_run(
        &self,
        x: &Inputs,
        seqs: &Tensor,
        mut drop: Option<&mut CaprlRng>,
    ) -> Result<TeacherRun> {
        let host = host_tokens(x, seqs, self.base.cfg.vocab_size)?;
        let (b, t) = seqs.dims2()?;
        if t == 0 {
            return Err(ModelError::Input(
                "token sequences are empty (T = 0)".into(),
            ));
        }
        let ids: Vec<u32> = host
            .iter()
            .flat_map(|row| std::iter::once(BOS).chain(row[..t - 1].iter().copied()))
            .collect();
        let ids = Tensor::from_vec(ids, (b, t), &self.base.device)?;
        let w = self.prepare(false)?;
        let memory = self.encode(&w, x, false, drop.as_deref_mut())?;
        let words = self.embed_words(&w, &ids, 0, drop.as_deref_mut())?;
        let cross = memory.for_rows(&memory.row_image)?;
        let states = self.decoder(&w, &cross, words, None, drop)?;
        Ok(TeacherRun {
            states,
            host,
            logit: w.logit,
        })
    }
}
