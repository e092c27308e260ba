//! The step loop shared by greedy decoding, sampling and prefix completion.
//!
//! Runs on the [`Decoder`]'s detached weights (no graph). The first layer's word term comes from
//! the table `W_ih E + b_ih` `[V, G]` computed with them, so a step is one row lookup. On the
//! CPU in f32 (fc and crnn models) the steps run on host arrays ([`super::host_step`]), else as
//! graph ops. Rows that emitted EOS (or reached the length limit) are dropped from the batch
//! before the next step.

use candle_core::{Device, Tensor};

use super::captioner::{Captioner, Encoded, Inputs, Prepared};
use super::decoder::Decoder;
use super::error::{ModelError, Result};
use super::host_step::{HostLive, HostWeights};
use super::linear::{linear, linear_t};
use super::rnn::LayerState;
use super::{BOS, EOS};

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

/// Below this many logits in a step, the per-row work on them (drawing tokens, beam
/// log-softmaxes) stays on the calling thread: handing it to rayon costs more than it saves.
pub(crate) const PARALLEL_MIN_LOGITS: usize = 16 * 1024;

/// Runs `f` (a whole decode, a whole training step) on one of rayon's threads, unless it
/// already is on one or rayon has a single thread. Its parallel parts (matmuls, gate rows,
/// per-row token choices, optimizer chunks) then start from a worker that takes its own share,
/// instead of waking every worker from a thread that sleeps meanwhile: on 2 cores that made
/// beam search about a third faster and an XE step about a tenth.
///
/// Work on any other device than the CPU stays on the calling thread: the hop buys nothing
/// there, and keeping a GPU model's work on the thread that owns it keeps the order of its
/// kernel launches plain to read (the device has one stream, see [`super::parse_device`]).
pub fn on_rayon<R: Send>(device: &Device, f: impl FnOnce() -> R + Send) -> R {
    if !device.is_cpu()
        || rayon::current_thread_index().is_some()
        || rayon::current_num_threads() <= 1
    {
        f()
    } else {
        rayon::scope(|_| f())
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

/// Decoder state of the live rows: graph tensors, or host arrays for [`HostWeights`].
pub(crate) enum Live {
    Graph {
        enc: Encoded,
        states: Vec<LayerState>,
    },
    Host(HostLive),
}

impl Live {
    /// Keeps the rows `rows` (repeats allowed), in that order: compacts finished rows away and
    /// reorders beams.
    pub fn select(&self, rows: &[u32]) -> Result<Self> {
        Ok(match self {
            Live::Graph { enc, states } => {
                let idx = Tensor::from_slice(rows, rows.len(), enc.fx.device())?;
                Live::Graph {
                    enc: enc.select(&idx)?,
                    states: states
                        .iter()
                        .map(|s| s.select(&idx))
                        .collect::<Result<_>>()?,
                }
            }
            Live::Host(h) => Live::Host(h.select(rows)),
        })
    }

    /// The top layer's hidden state `[rows, H]`.
    pub fn top_hidden(&self) -> Result<Tensor> {
        match self {
            Live::Graph { states, .. } => Ok(states[states.len() - 1].h.clone()),
            Live::Host(h) => h.top_hidden(&Device::Cpu),
        }
    }
}

/// Detached weights, the fused word table and (CPU f32, no attention) their host layout, built
/// once per [`Decoder`].
pub(crate) struct DecodeWeights {
    pub w: Prepared,
    pub word_table: Tensor,
    pub host: Option<HostWeights>,
}

impl Captioner {
    pub(crate) fn decode_weights(&self) -> Result<DecodeWeights> {
        let w = self.prepare(true)?;
        let word_table = linear(&w.embed, &w.w_ih0, &w.b_ih0)?;
        let host = HostWeights::new(self.cfg.kind, self.cfg.rnn, &w, &word_table)?;
        Ok(DecodeWeights {
            w,
            word_table,
            host,
        })
    }
}

impl Decoder {
    pub(crate) fn start(&self, x: &Inputs) -> Result<Live> {
        let (enc, states) = self.model.encode(&self.w.w, x, true)?;
        Ok(match &self.w.host {
            Some(h) => Live::Host(h.start(&enc, &states)?),
            None => Live::Graph { enc, states },
        })
    }

    /// Feeds `tokens` (one per live row) through every layer.
    fn advance(&self, live: &mut Live, tokens: &[u32]) -> Result<()> {
        match (live, &self.w.host) {
            (Live::Host(l), Some(h)) => h.advance(l, tokens),
            (Live::Graph { enc, states }, _) => {
                let ids = Tensor::from_slice(tokens, tokens.len(), &self.model.device)?;
                let gx = self.w.word_table.index_select(&ids, 0)?;
                *states = self.model.step(&self.w.w, enc, states, &gx, None)?;
            }
            (Live::Host(_), None) => {
                return Err(ModelError::Input(
                    "host decoder state without host weights".into(),
                ))
            }
        }
        Ok(())
    }

    /// Feeds `tokens` (one per live row) and returns the next-token logits `[rows, V]` on the host.
    ///
    /// This is the one device-to-host copy per decoding step, and the algorithm needs it: the
    /// token choice draws from the seeded host RNG (Gumbel-max, so a seed gives the same samples
    /// on every device), and EOS, row compaction, trigram blocking and the beam's bookkeeping
    /// are decided per row on the host.
    pub(crate) fn step_logits(&self, live: &mut Live, tokens: &[u32]) -> Result<Vec<f32>> {
        self.advance(live, tokens)?;
        match (&*live, &self.w.host) {
            (Live::Host(l), Some(h)) => Ok(h.logits(l)),
            _ => {
                let top = live.top_hidden()?;
                let logits = linear_t(&top, &self.w.w.logit_w_t, &self.w.w.logit_b)?;
                let logits = logits.to_dtype(candle_core::DType::F32)?;
                Ok(logits.flatten_all()?.to_vec1::<f32>()?)
            }
        }
    }

    /// The top layer's hidden state after feeding `tokens[i]` to the live row `parents[i]`,
    /// `[n, H]`, leaving `live` as it was (lookahead inference scores candidates with it).
    pub(crate) fn peek_hidden(
        &self,
        live: &Live,
        parents: &[u32],
        tokens: &[u32],
    ) -> Result<Tensor> {
        let mut sel = live.select(parents)?;
        self.advance(&mut sel, tokens)?;
        sel.top_hidden()
    }

    /// Decodes every row of `x` with `policy`, forcing `prefixes[row]` first when given.
    /// At most `max_len` words; one more step is taken only to let a row emit EOS.
    pub(crate) fn rollout(
        &self,
        x: &Inputs,
        prefixes: Option<&[Vec<u32>]>,
        max_len: usize,
        policy: &mut dyn Policy,
    ) -> Result<Decoded> {
        on_rayon(&self.model.device, || {
            self.rollout_here(x, prefixes, max_len, policy)
        })
    }

    fn rollout_here(
        &self,
        x: &Inputs,
        prefixes: Option<&[Vec<u32>]>,
        max_len: usize,
        policy: &mut dyn Policy,
    ) -> Result<Decoded> {
        let n = x.batch_size()?;
        let mut live = self.start(x)?;
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
            let logits = self.step_logits(&mut live, &inputs)?;
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
                            let d = self.rollout_forced(x, r, pre, policy)?;
                            tokens[r] = d.0;
                            logprobs[r] = d.1;
                        }
                    }
                }
            }
        }
        Ok(Decoded { tokens, logprobs })
    }

    /// Scores a finished prefix of row `r` token by token.
    fn rollout_forced(
        &self,
        x: &Inputs,
        r: usize,
        pre: &[u32],
        policy: &mut dyn Policy,
    ) -> Result<(Vec<u32>, Vec<f32>)> {
        let v = self.model.cfg.vocab_size;
        let idx = Tensor::from_vec(vec![r as u32], 1, &self.model.device)?;
        let mut live = self.start(&x.select(&idx)?)?;
        let mut out = Vec::with_capacity(pre.len());
        let mut prev = BOS;
        for &w in pre {
            let logits = self.step_logits(&mut live, &[prev])?;
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
