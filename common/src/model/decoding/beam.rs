//! Beam search of width `b`, batched over images; finished inputs leave the batch.
//!
//! Each step every live beam `y` of an input proposes `y + w` with score
//! `log p(y) + log π(w | y, I)`; the best `b` non-EOS proposals stay live, EOS proposals ranked
//! before them become hypotheses. An input stops once it has `b` hypotheses and (without length
//! normalisation) no live beam can still beat the worst of them. At the length limit each live
//! beam ends with EOS if EOS is its best next token, else as it is.
//! Length normalisation scores a hypothesis by `log p(y) / |y|`; trigram blocking forbids a
//! token that would repeat a trigram already in the beam. With [`Lookahead`] the ranking mixes in
//! the value head's estimate of each proposal's state.

use std::collections::HashSet;

use super::decoder::Decoder;
use super::greedy::argmax;
use super::rollout::{on_rayon, PARALLEL_MIN_LOGITS};
use super::softmax::host_log_softmax;
use crate::model::error::{ModelError, Result};
use crate::model::inputs::Inputs;
use crate::model::seam::DecodeState;
use crate::model::value_head::ValueHead;
use crate::model::{BOS, EOS};

/// [`host_log_softmax`] of every row of `logits` `[rows, v]`, on rayon's threads when there are
/// several and enough rows (each row is computed the same way either way).
fn rows_log_softmax(logits: &[f32], v: usize) -> Vec<Vec<f64>> {
    use rayon::prelude::*;
    if rayon::current_num_threads() > 1 && logits.len() >= PARALLEL_MIN_LOGITS {
        logits
            .par_chunks_exact(v)
            .map(|l| host_log_softmax(l, 1.0))
            .collect()
    } else {
        logits
            .chunks_exact(v)
            .map(|l| host_log_softmax(l, 1.0))
            .collect()
    }
}

/// Beam search settings (`[decode]` beam, length_norm, block_trigrams).
#[derive(Debug, Clone, PartialEq)]
pub struct BeamOptions {
    pub width: usize,
    pub max_len: usize,
    pub length_norm: bool,
    pub block_trigrams: bool,
}

/// One finished beam.
#[derive(Debug, Clone, PartialEq)]
pub struct Hypothesis {
    /// Tokens without BOS; EOS included when emitted.
    pub tokens: Vec<u32>,
    /// `log π(w_t | w_<t, I)` of each token.
    pub logprobs: Vec<f32>,
    /// `log p(y | I) = Σ_t log π(w_t)`.
    pub logp: f32,
    /// The ranking score: `logp`, or `logp / |y|` with length normalisation.
    pub score: f32,
}

#[derive(Clone)]
struct Beam {
    tokens: Vec<u32>,
    logprobs: Vec<f32>,
    logp: f64,
}

impl Beam {
    fn finish(&self, length_norm: bool, lookahead: Option<&Lookahead>, value: f32) -> Hypothesis {
        let n = self.tokens.len().max(1) as f64;
        let base = if length_norm {
            self.logp / n
        } else {
            self.logp
        };
        let score = match lookahead {
            Some(la) => la.lambda as f64 * base + (1.0 - la.lambda as f64) * value as f64,
            None => base,
        };
        Hypothesis {
            tokens: self.tokens.clone(),
            logprobs: self.logprobs.clone(),
            logp: self.logp as f32,
            score: score as f32,
        }
    }

    fn extend(&self, w: u32, lp: f64) -> Beam {
        let mut b = self.clone();
        b.tokens.push(w);
        b.logprobs.push(lp as f32);
        b.logp += lp;
        b
    }

    /// Tokens that would repeat a trigram of this beam.
    fn blocked(&self) -> HashSet<u32> {
        let t = &self.tokens;
        let n = t.len();
        if n < 2 {
            return HashSet::new();
        }
        let (a, b) = (t[n - 2], t[n - 1]);
        t.windows(3)
            .filter(|w| w[0] == a && w[1] == b)
            .map(|w| w[2])
            .collect()
    }
}

/// Lookahead inference (seed 001, Ren et al. 2017): proposals are ranked by
/// `λ·log p(y + w) + (1 − λ)·v(s_{y+w})`, where `v` is the value head on the decoder state after
/// reading `w`. The value is computed for the `2b` proposals of each input that the policy ranks
/// best (one extra decoder step on them), not for the whole vocabulary.
pub struct Lookahead<'a> {
    pub value: &'a ValueHead,
    /// `λ` in [0, 1]; 1 is plain beam search.
    pub lambda: f32,
}

/// One input's proposals at a step: `(score, beam, word)`, best first.
struct Proposals {
    input: usize,
    row0: usize,
    cur: Vec<Beam>,
    lps: Vec<Vec<f64>>,
    cand: Vec<(f64, usize, u32)>,
}

impl Decoder {
    /// The `width` best hypotheses of each image, best first.
    pub fn beam(&self, x: &Inputs, opts: &BeamOptions) -> Result<Vec<Vec<Hypothesis>>> {
        self.beam_search(x, opts, None)
    }

    /// Beam search with lookahead inference: hypotheses ranked (and their `score` set) by
    /// `λ·log p + (1 − λ)·v`; see [`Lookahead`].
    pub fn beam_lookahead(
        &self,
        x: &Inputs,
        opts: &BeamOptions,
        lookahead: &Lookahead,
    ) -> Result<Vec<Vec<Hypothesis>>> {
        if !(0.0..=1.0).contains(&lookahead.lambda) {
            return Err(ModelError::Input(format!(
                "decode.lookahead_lambda = {}: must be in [0, 1]",
                lookahead.lambda
            )));
        }
        self.beam_search(x, opts, Some(lookahead))
    }

    fn beam_search(
        &self,
        x: &Inputs,
        opts: &BeamOptions,
        lookahead: Option<&Lookahead>,
    ) -> Result<Vec<Vec<Hypothesis>>> {
        on_rayon(&self.device, || self.beam_search_here(x, opts, lookahead))
    }

    fn beam_search_here(
        &self,
        x: &Inputs,
        opts: &BeamOptions,
        lookahead: Option<&Lookahead>,
    ) -> Result<Vec<Vec<Hypothesis>>> {
        let k = opts.width;
        if k == 0 {
            return Err(ModelError::Input(
                "decode.beam = 0: the beam width must be >= 1".into(),
            ));
        }
        let n = x.batch_size()?;
        let v = self.cfg.vocab_size;
        let mut live_state = self.steps.start(x)?;
        // Live beams of each input, in the order of their rows.
        let mut beams: Vec<Vec<Beam>> = vec![
            vec![Beam {
                tokens: Vec::new(),
                logprobs: Vec::new(),
                logp: 0.0
            }];
            n
        ];
        let mut finished: Vec<Vec<Hypothesis>> = vec![Vec::new(); n];
        let mut active: Vec<usize> = (0..n).collect();
        for t in 0..=opts.max_len {
            let inputs: Vec<u32> = active
                .iter()
                .flat_map(|&i| beams[i].iter().map(|b| *b.tokens.last().unwrap_or(&BOS)))
                .collect();
            let logits = self.step_logits(&mut *live_state, &inputs)?;
            let mut row_lps = rows_log_softmax(&logits, v).into_iter();
            let mut row = 0;
            let mut all: Vec<Proposals> = Vec::with_capacity(active.len());
            for &i in &active {
                let cur = std::mem::take(&mut beams[i]);
                let lps: Vec<Vec<f64>> = row_lps.by_ref().take(cur.len()).collect();
                if t == opts.max_len {
                    // The state after the last word values a caption cut at the limit.
                    let values = match lookahead {
                        Some(la) => {
                            let h = live_state.decoder_state()?.narrow(0, row, cur.len())?;
                            la.value.forward(&h)?.to_vec1::<f32>()?
                        }
                        None => vec![0.0; cur.len()],
                    };
                    for ((b, lp), value) in cur.iter().zip(&lps).zip(values) {
                        let f: Vec<f32> = lp.iter().map(|&x| x as f32).collect();
                        let hyp = if argmax(&f) == EOS as usize {
                            b.extend(EOS, lp[EOS as usize])
                        } else {
                            b.clone()
                        };
                        finished[i].push(hyp.finish(opts.length_norm, lookahead, value));
                    }
                    row += cur.len();
                    continue;
                }
                let mut cand: Vec<(f64, usize, u32)> = Vec::with_capacity(cur.len() * v);
                for (j, (b, lp)) in cur.iter().zip(&lps).enumerate() {
                    let blocked = if opts.block_trigrams {
                        b.blocked()
                    } else {
                        HashSet::new()
                    };
                    for (w, &l) in lp.iter().enumerate() {
                        if !blocked.contains(&(w as u32)) && l > -1e8 {
                            cand.push((b.logp + l, j, w as u32));
                        }
                    }
                }
                let m = (2 * k).min(cand.len());
                if m > 0 && m < cand.len() {
                    cand.select_nth_unstable_by(m - 1, |a, b| b.0.total_cmp(&a.0));
                    cand.truncate(m);
                }
                all.push(Proposals {
                    input: i,
                    row0: row,
                    cur,
                    lps,
                    cand,
                });
                row += all[all.len() - 1].cur.len();
            }
            let values = match lookahead {
                Some(la) => Some(self.proposal_values(&*live_state, &all, la)?),
                None => None,
            };
            let mut parents: Vec<u32> = Vec::new();
            let mut still: Vec<usize> = Vec::new();
            let mut at = 0;
            for mut p in all {
                let i = p.input;
                // The ranking score of each proposal and its value (0 without lookahead).
                let mut ranked: Vec<(f64, usize, u32, f32)> = p
                    .cand
                    .drain(..)
                    .map(|(logp, j, w)| match (&values, lookahead) {
                        (Some(vals), Some(la)) => {
                            let value = vals[at];
                            at += 1;
                            let lambda = la.lambda as f64;
                            (lambda * logp + (1.0 - lambda) * value as f64, j, w, value)
                        }
                        _ => (logp, j, w, 0.0),
                    })
                    .collect();
                ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
                let mut next = Vec::with_capacity(k);
                let mut my_parents = Vec::with_capacity(k);
                for &(_, j, w, value) in &ranked {
                    if next.len() == k {
                        break;
                    }
                    let nb = p.cur[j].extend(w, p.lps[j][w as usize]);
                    if w == EOS {
                        finished[i].push(nb.finish(opts.length_norm, lookahead, value));
                    } else {
                        my_parents.push((p.row0 + j) as u32);
                        next.push(nb);
                    }
                }
                finished[i].sort_by(|a, b| b.score.total_cmp(&a.score));
                let enough = finished[i].len() >= k;
                // Scores only fall as beams grow, unless normalised or mixed with a value.
                let monotone = !opts.length_norm && lookahead.is_none();
                let cannot_improve = monotone
                    && next
                        .iter()
                        .map(|b| b.logp)
                        .fold(f64::NEG_INFINITY, f64::max)
                        <= finished[i]
                            .get(k - 1)
                            .map_or(f64::INFINITY, |h| h.score as f64);
                if next.is_empty() || (enough && (!monotone || cannot_improve)) {
                    continue;
                }
                parents.extend(my_parents);
                beams[i] = next;
                still.push(i);
            }
            if still.is_empty() || t == opts.max_len {
                break;
            }
            live_state = live_state.select(&parents)?;
            active = still;
        }
        for f in &mut finished {
            f.sort_by(|a, b| b.score.total_cmp(&a.score));
            f.truncate(k);
        }
        Ok(finished)
    }

    /// `v` of the state after each proposal's word, in proposal order, one batched step.
    fn proposal_values<'a>(
        &self,
        live: &(dyn DecodeState<'a> + 'a),
        all: &[Proposals],
        la: &Lookahead,
    ) -> Result<Vec<f32>> {
        let mut parents = Vec::new();
        let mut words = Vec::new();
        for p in all {
            for &(_, j, w) in &p.cand {
                parents.push((p.row0 + j) as u32);
                words.push(w);
            }
        }
        if parents.is_empty() {
            return Ok(Vec::new());
        }
        let h = self.peek_hidden(live, &parents, &words)?;
        Ok(la.value.forward(&h)?.to_vec1::<f32>()?)
    }
}
