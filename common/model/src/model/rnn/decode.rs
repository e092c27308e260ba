//! The recurrent captioner's step decoder.
//!
//! Runs on detached weights (no graph). Up to [`WORD_TABLE_MAX_VOCAB`] words, the first layer's
//! word term comes from the table `W_ih E + b_ih` `[V, G]` computed with them, so a step is one
//! row lookup; with a larger vocabulary only the rows of the words a step feeds are made (on
//! the host path once each, kept for the decoder's life; on the graph path at each step): at
//! COCO's 10,000 words the whole table is `V · E · G` ≈ 8 G multiply-adds, more than a whole
//! decode of 10 images, and an actor prepares a decoder for every policy version. On the
//! CPU in f32 (fc and crnn models) the steps run on host arrays ([`super::host_decode`]), else as
//! graph ops; on the CPU in f32 the graph path's products with fixed weights (the att model's
//! output layer, word term and context term) run on weights packed once per snapshot
//! ([`PackedSteps`]).

use candle_core::{DType, Device, Tensor};

use super::cell::LayerState;
use super::host_decode::{HostLive, HostWeights};
use super::word_table::word_rows;
use super::{Encoded, Prepared, RnnCaptioner};
use crate::model::error::{ModelError, Result};
use crate::model::inputs::Inputs;
use crate::model::seam::{DecodeState, StepDecoder};
use caprl_kernels::kernels_enabled;
use caprl_kernels::linear::{linear, linear_t};
use caprl_kernels::panels::PackedLinear;

/// Decoder state of the live rows: graph tensors, or host arrays for [`HostWeights`].
enum Live {
    Graph {
        enc: Encoded,
        states: Vec<LayerState>,
    },
    Host(HostLive),
}

impl Live {
    /// Keeps the rows `rows` (repeats allowed), in that order: compacts finished rows away and
    /// reorders beams.
    fn select(&self, rows: &[u32]) -> Result<Self> {
        Ok(match self {
            Live::Graph { enc, states } => {
                let idx = Tensor::from_slice(rows, rows.len(), enc.fx.device())?;
                Live::Graph {
                    enc: enc.select(rows)?,
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
    fn top_hidden(&self) -> Result<Tensor> {
        match self {
            Live::Graph { states, .. } => Ok(states[states.len() - 1].h.clone()),
            Live::Host(h) => h.top_hidden(&Device::Cpu),
        }
    }
}

/// Whether `t` is an f32 CPU tensor the kernels may run on.
fn on_host_f32(t: &Tensor) -> bool {
    t.dtype() == DType::F32 && kernels_enabled(t.device(), t.dtype())
}

/// Vocabularies up to this size get a word table (see the module docs).
pub(crate) const WORD_TABLE_MAX_VOCAB: usize = 2048;

/// Detached weights, the fused word table (small vocabularies) and (CPU f32, no attention)
/// their host layout, built once per snapshot.
pub(crate) struct RnnSteps {
    /// A handle on the captioner (its weights' storage is shared): the encoder and the config.
    model: RnnCaptioner,
    w: Prepared,
    word_table: Option<Tensor>,
    pub(super) host: Option<HostWeights>,
    /// The graph path's step weights packed once per snapshot on the CPU in f32 (the att
    /// model): gemm would repack them at every step.
    packed: Option<PackedSteps>,
}

/// See [`RnnSteps::packed`].
pub(crate) struct PackedSteps {
    /// The output layer `Wᵀ` `[H, V]` and its bias.
    logits: PackedLinear,
    /// The first layer's word term `W_ih0ᵀ` `[E, G]` and `b_ih0`, when there is no word table.
    word: Option<PackedLinear>,
    /// The attention context's term `[D, G]` of the first layer's input (the att model).
    pub(super) context: Option<PackedLinear>,
}

impl PackedSteps {
    /// `None` unless the weights are f32 on the CPU with the kernels on.
    fn new(w: &Prepared, word_table: bool) -> Result<Option<Self>> {
        if !on_host_f32(&w.logit_w_t) {
            return Ok(None);
        }
        let pack = PackedLinear::from_tensors;
        Ok(Some(Self {
            logits: pack(&w.logit_w_t, Some(&w.logit_b))?,
            word: match word_table {
                true => None,
                false => Some(pack(&w.w_ih0.t()?, Some(&w.b_ih0))?),
            },
            context: match &w.att {
                Some((_, _, ctx_w_t, _)) => Some(pack(ctx_w_t, None)?),
                None => None,
            },
        }))
    }
}

impl RnnSteps {
    pub(crate) fn new(model: &RnnCaptioner) -> Result<Self> {
        Self::with_word_table(model, model.base.cfg.vocab_size <= WORD_TABLE_MAX_VOCAB)
    }

    /// [`RnnSteps::new`] with or without the word table, whatever the vocabulary.
    pub(crate) fn with_word_table(model: &RnnCaptioner, table: bool) -> Result<Self> {
        let w = model.prepare(true)?;
        let word_table = match table {
            true => Some(linear(&w.embed, &w.w_ih0, &w.b_ih0)?),
            false => None,
        };
        let host = HostWeights::new(
            model.base.cfg.model.kind,
            model.base.cfg.model.rnn,
            &w,
            word_table.as_ref(),
        )?;
        let packed = match host {
            None => PackedSteps::new(&w, word_table.is_some())?,
            Some(_) => None,
        };
        Ok(Self {
            model: model.share()?,
            w,
            word_table,
            host,
            packed,
        })
    }
}

impl StepDecoder for RnnSteps {
    fn start<'a>(&'a self, x: &Inputs) -> Result<Box<dyn DecodeState<'a> + 'a>> {
        let (enc, states) = self.model.encode(&self.w, x, true)?;
        let live = match &self.host {
            Some(h) => Live::Host(h.start(&enc, &states)?),
            None => Live::Graph { enc, states },
        };
        Ok(Box::new(RnnLive { steps: self, live }))
    }
}

/// The live rows of one decode with the weights they step with.
struct RnnLive<'a> {
    steps: &'a RnnSteps,
    live: Live,
}

impl<'a> DecodeState<'a> for RnnLive<'a> {
    fn select(&self, rows: &[u32]) -> Result<Box<dyn DecodeState<'a> + 'a>> {
        Ok(Box::new(RnnLive {
            steps: self.steps,
            live: self.live.select(rows)?,
        }))
    }

    /// Feeds `tokens` (one per live row) through every layer.
    fn advance(&mut self, tokens: &[u32]) -> Result<()> {
        let s = self.steps;
        match (&mut self.live, &s.host) {
            (Live::Host(l), Some(h)) => h.advance(l, tokens)?,
            (Live::Graph { enc, states }, _) => {
                let ids = Tensor::from_slice(tokens, tokens.len(), &s.model.base.device)?;
                let packed = s.packed.as_ref();
                let gx = match (&s.word_table, packed.and_then(|p| p.word.as_ref())) {
                    (Some(table), _) => table.index_select(&ids, 0)?,
                    (None, Some(word)) => word.forward_tensor(&s.w.embed.index_select(&ids, 0)?)?,
                    (None, None) => word_rows(&s.w.embed, &s.w.w_ih0, &s.w.b_ih0, tokens)?,
                };
                *states = s.model.step(&s.w, enc, states, &gx, packed, None)?;
            }
            (Live::Host(_), None) => {
                return Err(ModelError::Internal(
                    "host decoder state without host weights".into(),
                ))
            }
        }
        Ok(())
    }

    /// The next-token logits `[rows, V]` on the host.
    ///
    /// This is the one device-to-host copy per decoding step, and the algorithm needs it: the
    /// token choice draws from the seeded host RNG (Gumbel-max, so a seed gives the same samples
    /// on every device), and EOS, row compaction, trigram blocking and the beam's bookkeeping
    /// are decided per row on the host.
    fn logits(&self) -> Result<Vec<f32>> {
        let s = self.steps;
        match (&self.live, &s.host) {
            (Live::Host(l), Some(h)) => Ok(h.logits(l)),
            _ => {
                let top = self.live.top_hidden()?;
                if let Some(packed) = &s.packed {
                    let rows = top.dim(0)?;
                    let top = top.flatten_all()?.to_vec1::<f32>()?;
                    return Ok(packed.logits.forward(&top, rows));
                }
                let logits = linear_t(&top, &s.w.logit_w_t, &s.w.logit_b)?;
                let logits = logits.to_dtype(candle_core::DType::F32)?;
                Ok(logits.flatten_all()?.to_vec1::<f32>()?)
            }
        }
    }

    fn decoder_state(&self) -> Result<Tensor> {
        self.live.top_hidden()
    }
}

#[cfg(test)]
mod tests {
    use super::RnnSteps;
    use crate::model::rnn::RnnCaptioner;
    use crate::model::{BeamOptions, CaptionerConfig, Decoder, Device, Inputs, ModelKind};

    /// The att model's steps on packed weights (output layer, word term without a table, context
    /// term) give the graph ops' tokens, and log-probs within rounding, for greedy and beam.
    #[test]
    fn packed_att_steps_match_the_graph_steps() {
        let (b, regions, dim) = (6, 3, 10);
        let mut cfg = CaptionerConfig::new(ModelKind::Att, 40, 12, Some((regions, dim)));
        cfg.model.embed = 16;
        cfg.model.hidden = 24;
        cfg.model.att_hidden = 8;
        cfg.max_len = 7;
        let m = RnnCaptioner::new(
            &cfg,
            &Device::Cpu,
            &crate::model::params::ParamOrigin::Seed(3),
        )
        .unwrap();
        let wave = |n: usize, k: usize| -> Vec<f32> {
            (0..n).map(|i| ((i * k % 29) as f32 - 14.0) / 6.0).collect()
        };
        let (fc, att) = (wave(b * 12, 7919), wave(b * regions * dim, 104_729));
        let x = Inputs::from_host(&fc, Some(&att), b, &cfg, &Device::Cpu).unwrap();
        let decoder = |packed: bool| {
            let mut steps = RnnSteps::with_word_table(&m, false).unwrap();
            assert!(steps.host.is_none() && steps.packed.is_some());
            if !packed {
                steps.packed = None;
            }
            Decoder {
                cfg: m.base.cfg.clone(),
                device: m.base.device.clone(),
                steps: Box::new(steps),
            }
        };
        let beam = BeamOptions::plain(3, 7);
        let (graph, packed) = (decoder(false), decoder(true));
        let (g, p) = (graph.greedy(&x, 7).unwrap(), packed.greedy(&x, 7).unwrap());
        assert_eq!(g.tokens, p.tokens);
        for (a, c) in g.logprobs.iter().flatten().zip(p.logprobs.iter().flatten()) {
            assert!((a - c).abs() < 1e-5, "greedy log-prob {a} vs {c}");
        }
        let (g, p) = (
            graph.beam(&x, &beam).unwrap(),
            packed.beam(&x, &beam).unwrap(),
        );
        for (gi, pi) in g.iter().zip(&p) {
            for (a, c) in gi.iter().zip(pi) {
                assert_eq!(a.tokens, c.tokens);
                assert!((a.logp - c.logp).abs() < 1e-4, "beam {a:?} vs {c:?}");
            }
        }
    }
}
