//! The Transformer's step decoder: per-layer key/value caches, so that a step feeds one token
//! per row through the decoder instead of re-running the whole prefix.
//!
//! Prepared once per snapshot: the detached weights (and, on the CPU in f32, their host layout
//! for [`super::host_decode`]). Per decode, [`TransformerSteps::start`] encodes each distinct
//! image once and computes every layer's cross-attention keys and values of it; the rows of an
//! image (its samples, its beams) read them without copies on the host path.
//!
//! The graph path (other devices and dtypes, and the CPU under `CAPRL_GENERIC_OPS=1`) keeps the
//! caches as tensors `[rows, h, t, dk]` and reorders them with `index_select` when rows finish
//! or beams move, as PyTorch decoders do; the host path reorders only the rows' lists of cache
//! slots.

use candle_core::{DType, Tensor};

use super::forward::KvCache;
use super::host_decode::{HostLive, HostWeights};
use super::{TransformerCaptioner, Weights};
use crate::model::error::{ModelError, Result};
use crate::model::inputs::Inputs;
use crate::model::seam::{DecodeState, StepDecoder};

/// A snapshot of the weights prepared for decoding.
pub(crate) struct TransformerSteps {
    /// A handle on the captioner (its weights' storage is shared): config and device.
    model: TransformerCaptioner,
    /// The weights detached and cast to the compute dtype.
    w: Weights,
    /// Their host layout (CPU, f32, kernels on).
    host: Option<HostWeights>,
}

impl TransformerSteps {
    pub(crate) fn new(model: &TransformerCaptioner) -> Result<Self> {
        let w = model.prepare(true)?;
        let host = HostWeights::new(model, &w)?;
        Ok(Self {
            model: model.share()?,
            w,
            host,
        })
    }
}

impl StepDecoder for TransformerSteps {
    fn start<'a>(&'a self, x: &Inputs) -> Result<Box<dyn DecodeState<'a> + 'a>> {
        let memory = self.model.encode(&self.w, x, true, None)?;
        let live = match &self.host {
            Some(h) => Live::Host(h.start(&memory)?),
            None => Live::Graph(GraphLive {
                cross: memory.for_rows(&memory.row_image)?,
                caches: vec![KvCache::default(); self.w.decoder.len()],
                pos: 0,
                top: None,
            }),
        };
        Ok(Box::new(TransformerLive { steps: self, live }))
    }
}

/// The live rows' decoder state.
enum Live {
    Graph(GraphLive),
    Host(HostLive),
}

/// The graph path's state of the live rows.
#[derive(Clone)]
struct GraphLive {
    /// Every layer's memory keys and values for these rows.
    cross: Vec<(Tensor, Tensor)>,
    /// Every layer's self-attention keys and values of the tokens fed so far.
    caches: Vec<KvCache>,
    /// Tokens fed so far (the position of the next one).
    pos: usize,
    /// The final-norm decoder state after the last token fed, `[rows, d]`.
    top: Option<Tensor>,
}

impl GraphLive {
    fn select(&self, rows: &[u32]) -> Result<Self> {
        let Some(device) = self.cross.first().map(|(k, _)| k.device().clone()) else {
            return Ok(self.clone());
        };
        let idx = Tensor::from_slice(rows, rows.len(), &device)?;
        let pick = |t: &Tensor| t.index_select(&idx, 0);
        Ok(Self {
            cross: self
                .cross
                .iter()
                .map(|(k, v)| Ok((pick(k)?, pick(v)?)))
                .collect::<Result<_>>()?,
            caches: self
                .caches
                .iter()
                .map(|c| {
                    Ok(KvCache {
                        k: c.k.as_ref().map(pick).transpose()?,
                        v: c.v.as_ref().map(pick).transpose()?,
                    })
                })
                .collect::<Result<_>>()?,
            pos: self.pos,
            top: self.top.as_ref().map(pick).transpose()?,
        })
    }
}

/// The live rows of one decode with the weights they step with.
struct TransformerLive<'a> {
    steps: &'a TransformerSteps,
    live: Live,
}

impl<'a> DecodeState<'a> for TransformerLive<'a> {
    fn select(&self, rows: &[u32]) -> Result<Box<dyn DecodeState<'a> + 'a>> {
        let live = match &self.live {
            Live::Graph(g) => Live::Graph(g.select(rows)?),
            Live::Host(h) => Live::Host(h.select(rows)),
        };
        Ok(Box::new(TransformerLive {
            steps: self.steps,
            live,
        }))
    }

    fn advance(&mut self, tokens: &[u32]) -> Result<()> {
        let s = self.steps;
        match (&mut self.live, &s.host) {
            (Live::Host(l), Some(h)) => h.advance(l, tokens),
            (Live::Graph(g), _) => {
                let ids = Tensor::from_slice(tokens, (tokens.len(), 1), &s.model.base.device)?;
                let x = s.model.embed_words(&s.w, &ids, g.pos, None)?;
                let top = s
                    .model
                    .decoder(&s.w, &g.cross, x, Some(&mut g.caches), None)?;
                g.top = Some(top.squeeze(1)?);
                g.pos += 1;
                Ok(())
            }
            (Live::Host(_), None) => Err(ModelError::Internal(
                "host decoder state without host weights".into(),
            )),
        }
    }

    /// The next-token logits `[rows, V]` on the host: the one device-to-host copy per step
    /// (the token choice and the beam's bookkeeping run on the host, from the seeded RNG).
    fn logits(&self) -> Result<Vec<f32>> {
        match (&self.live, &self.steps.host) {
            (Live::Host(l), Some(h)) => h.logits(l),
            _ => {
                let logits = self.steps.w.logit.forward(&self.top()?)?;
                Ok(logits
                    .to_dtype(DType::F32)?
                    .flatten_all()?
                    .to_vec1::<f32>()?)
            }
        }
    }

    fn decoder_state(&self) -> Result<Tensor> {
        self.top()
    }
}

impl TransformerLive<'_> {
    /// The final-norm decoder state after the last token fed, `[rows, d]`.
    fn top(&self) -> Result<Tensor> {
        let not_yet = || {
            ModelError::Internal(
                "the Transformer's decoder state is read before any token was fed".into(),
            )
        };
        match &self.live {
            Live::Graph(g) => g.top.clone().ok_or_else(not_yet),
            Live::Host(h) => h.top(&self.steps.model.base.device)?.ok_or_else(not_yet),
        }
    }
}
