//! The step loop shared by greedy decoding, sampling and prefix completion.
//!
//! Runs on the [`Decoder`]'s prepared weights, whatever the architecture, through its
//! [`DecodeState`]. Rows that emitted EOS (or reached the length limit) are dropped from the
//! batch before the next step. Where [`BadEndings`] forbid EOS after a row's previous token,
//! its EOS logit is −∞ before the policy sees the row, so every policy chooses from (and scores
//! under) the distribution without it.

use candle_core::Tensor;

use super::bad_endings::BadEndings;
use super::decoder::Decoder;
use crate::model::device::on_rayon;
use crate::model::error::Result;
use crate::model::inputs::Inputs;
use crate::model::seam::DecodeState;
use crate::model::tokens::{BOS, EOS};

/// Decoded sequences, one per row.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    /// Tokens without BOS; EOS included when it was emitted.
    pub tokens: Vec<Vec<u32>>,
    /// `log μ(w_t)` of each token under the distribution it was drawn from.
    pub logprobs: Vec<Vec<f32>>,
}

impl Decoded {
    /// Number of tokens of each row (EOS included).
    pub fn lengths(&self) -> Vec<usize> {
        self.tokens.iter().map(Vec::len).collect()
    }
}

/// How a row picks its next token from its logits.
pub(crate) trait Policy: Send {
    /// The chosen token and its log-probability.
    fn choose(&mut self, row: usize, logits: &[f32]) -> (u32, f32);
    /// The log-probability of a forced token (prefix completion).
    fn logprob(&self, logits: &[f32], token: u32) -> f32;
    /// One step of every live row: `rows` (ascending) with their logits `[rows, V]` and, per
    /// row, the token forced on it if any. Returns the token and its log-probability per row.
    /// Row by row in order; policies whose rows are independent may spread them over threads.
    fn choose_rows(
        &mut self,
        rows: &[usize],
        logits: &[f32],
        forced: &[Option<u32>],
    ) -> Vec<(u32, f32)> {
        let v = logits.len() / rows.len().max(1);
        rows.iter()
            .zip(logits.chunks_exact(v))
            .zip(forced)
            .map(|((&r, l), f)| match f {
                Some(w) => (*w, self.logprob(l, *w)),
                None => self.choose(r, l),
            })
            .collect()
    }
}

impl Decoder {
    /// Feeds `tokens` (one per live row) and returns the next-token logits `[rows, V]` on the
    /// host (see [`DecodeState::logits`]).
    pub(crate) fn step_logits<'a>(
        &self,
        live: &mut (dyn DecodeState<'a> + 'a),
        tokens: &[u32],
    ) -> Result<Vec<f32>> {
        live.advance(tokens)?;
        live.logits()
    }

    /// The decoder state after feeding `tokens[i]` to the live row `parents[i]`, `[n, H]`,
    /// leaving `live` as it was (lookahead inference scores candidates with it).
    pub(crate) fn peek_hidden<'a>(
        &self,
        live: &(dyn DecodeState<'a> + 'a),
        parents: &[u32],
        tokens: &[u32],
    ) -> Result<Tensor> {
        let mut sel = live.select(parents)?;
        sel.advance(tokens)?;
        sel.decoder_state()
    }

    /// Decodes every row of `x` with `policy`, forcing `prefixes[row]` first when given.
    /// At most `max_len` words; one more step is taken only to let a row emit EOS.
    pub(crate) fn rollout(
        &self,
        x: &Inputs,
        prefixes: Option<&[Vec<u32>]>,
        max_len: usize,
        bad_endings: &BadEndings,
        policy: &mut dyn Policy,
    ) -> Result<Decoded> {
        on_rayon(&self.device, || {
            let n = x.batch_size()?;
            let mut live = self.steps.start(x)?;
            let mut tokens: Vec<Vec<u32>> = vec![Vec::new(); n];
            let mut logprobs: Vec<Vec<f32>> = vec![Vec::new(); n];
            let mut rows: Vec<usize> = (0..n).collect();
            let mut done = vec![false; n];
            // Rows whose prefix already ends the caption take no step.
            if let Some(p) = prefixes {
                for (d, pre) in done.iter_mut().zip(p) {
                    if pre.contains(&EOS) || pre.len() > max_len {
                        *d = true;
                    }
                }
            }
            for t in 0..=max_len {
                {
                    let keep: Vec<usize> = rows.iter().copied().filter(|&r| !done[r]).collect();
                    if keep.is_empty() {
                        break;
                    }
                    if keep.len() < rows.len() {
                        let pos: Vec<u32> = rows
                            .iter()
                            .enumerate()
                            .filter(|(_, r)| !done[**r])
                            .map(|(i, _)| i as u32)
                            .collect();
                        live = live.select(&pos)?;
                        rows = keep;
                    }
                }
                let inputs: Vec<u32> = rows
                    .iter()
                    .map(|&r| *tokens[r].last().unwrap_or(&BOS))
                    .collect();
                let mut logits = self.step_logits(&mut *live, &inputs)?;
                if !bad_endings.is_empty() {
                    let v = logits.len() / rows.len();
                    for (&r, row) in rows.iter().zip(logits.chunks_exact_mut(v)) {
                        bad_endings.mask_logits(tokens[r].last().copied(), row);
                    }
                }
                let forced: Vec<Option<u32>> = rows
                    .iter()
                    .map(|&r| {
                        prefixes
                            .and_then(|p| p.get(r))
                            .and_then(|p| p.get(t))
                            .copied()
                    })
                    .collect();
                let chosen = policy.choose_rows(&rows, &logits, &forced);
                for (&r, (w, lp)) in rows.iter().zip(chosen) {
                    if t == max_len && w != EOS {
                        done[r] = true;
                        continue;
                    }
                    tokens[r].push(w);
                    logprobs[r].push(lp);
                    if w == EOS {
                        done[r] = true;
                    }
                }
            }
            // Forced prefixes that already ended are returned as given, with their log-probs.
            if let Some(p) = prefixes {
                for r in 0..n {
                    if tokens[r].is_empty() {
                        if let Some(pre) = p.get(r) {
                            if !pre.is_empty() {
                                let d = self.rollout_forced(x, r, pre, bad_endings, policy)?;
                                tokens[r] = d.0;
                                logprobs[r] = d.1;
                            }
                        }
                    }
                }
            }
            Ok(Decoded { tokens, logprobs })
        })
    }

    /// Scores a finished prefix of row `r` token by token.
    fn rollout_forced(
        &self,
        x: &Inputs,
        r: usize,
        pre: &[u32],
        bad_endings: &BadEndings,
        policy: &mut dyn Policy,
    ) -> Result<(Vec<u32>, Vec<f32>)> {
        let v = self.cfg.vocab_size;
        let idx = Tensor::from_vec(vec![r as u32], 1, &self.device)?;
        let mut live = self.steps.start(&x.select(&idx)?)?;
        let mut out = Vec::with_capacity(pre.len());
        let mut prev = BOS;
        for (t, &w) in pre.iter().enumerate() {
            let mut logits = self.step_logits(&mut *live, &[prev])?;
            let before = t.checked_sub(1).map(|s| pre[s]);
            bad_endings.mask_logits(before, &mut logits[..v]);
            out.push(policy.logprob(&logits[..v], w));
            prev = w;
            if w == EOS {
                break;
            }
        }
        let n = out.len();
        Ok((pre[..n].to_vec(), out))
    }
}
