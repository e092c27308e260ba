//! Decoding steps on host arrays (CPU, f32; the fc and crnn models, either cell, any depth).
//!
//! A step of the graph path is a chain of small ops, each its own parallel region or none: the
//! word lookup, the image term's add, the recurrent product, the gate rows, the logits. Here a
//! step is one parallel region per layer plus one for the logits, and nothing in between:
//!
//! - the layer's gate columns are split in blocks of hidden units, one block per thread. Block
//!   `p` owns the `r, z, n` (LSTM `i, f, g, o`) columns of its units, stored next to each other
//!   (`[gate][unit]` within the block), so its recurrent product, its input term and its gates
//!   need nothing from another block;
//! - the logits are one product on the output weights packed once per snapshot
//!   ([`PackedLinear`], split over its column panels on rayon's threads): gemm would repack
//!   the `[H, V]` weight at every step, which at 10–160 rows costs about what the product does.
//!
//! The gate values are computed as the graph step computes them: the same gemm per output
//! column (a column's dot product does not depend on which other columns share the call), the
//! bias first and the product accumulated onto it, and [`super::gates`]'s gate kernel. The
//! logits sum in another order than gemm's, so tokens match the graph step's and log-probs
//! agree within rounding; none of it depends on the thread count.

use std::sync::RwLock;

use candle_core::{CpuStorage, DType, Device, Storage, Tensor};

use super::cell::{CellWeights, LayerState};
use super::gates;
use super::word_table::word_rows;
use super::{Encoded, Prepared};
use crate::model::config::{ModelKind, RnnKind};
use crate::model::error::{ModelError, Result};
use caprl_kernels::host_gemm::{gemm_into, Mat, SendPtr};
use caprl_kernels::kernels_enabled;
use caprl_kernels::panels::PackedLinear;

fn poisoned() -> ModelError {
    ModelError::Internal("a decoder's word-row lock was poisoned".into())
}

/// Below this many multiply-adds a region's blocks run one after the other on the calling
/// thread: waking another thread costs more than it saves.
const PARALLEL_MIN_MACS: usize = 1 << 20;

/// Weights of the decoder laid out for [`HostWeights::advance`] and [`HostWeights::logits`].
pub(crate) struct HostWeights {
    kind: RnnKind,
    hidden: usize,
    gates: usize,
    /// Block `p` holds units `units[p]..units[p + 1]`.
    units: Vec<usize>,
    /// Layer 0's word term `W_ih e(w) + b_ih`.
    words: WordTerm,
    layers: Vec<HostLayer>,
    /// The output layer, `Wᵀ` `[H, V]` packed, its bias with PAD and BOS banned.
    logit: PackedLinear,
}

/// Where layer 0's word term comes from (see `decode`'s module docs).
enum WordTerm {
    /// Every word's `[V, G]`, columns in block order.
    Table(Vec<f32>),
    /// The table's rows, each made the first time a step feeds its word (with the kernel that
    /// makes the whole table, so with its bits) and kept for the decoder's life: a decode of a
    /// 10,000-word vocabulary feeds a few hundred distinct words.
    Lazy {
        embed: Tensor,
        w_ih: Tensor,
        b_ih: Tensor,
        rows: RwLock<Vec<Option<Box<[f32]>>>>,
    },
}

struct HostLayer {
    /// `W_hhᵀ` columns of each block `[H, gates · units]`.
    w_hh: Vec<Vec<f32>>,
    /// `b_hh` in block order `[G]`.
    b_hh: Vec<f32>,
    /// Layers above the first: `W_ihᵀ` columns of each block and `b_ih` in block order.
    w_ih: Option<(Vec<Vec<f32>>, Vec<f32>)>,
}

/// The live rows' decoder state on the host.
#[derive(Clone)]
pub(crate) struct HostLive {
    rows: usize,
    /// Layer 0's image term `W_fc img` of each image the decode started with `[images, G]`,
    /// columns in block order; rows point into it, so selecting rows does not copy it.
    fx: std::sync::Arc<Vec<f32>>,
    /// The image of each row.
    image: Vec<u32>,
    /// Per layer `h` `[rows, H]`.
    h: Vec<Vec<f32>>,
    /// Per layer `c` `[rows, H]` (LSTM; empty for GRU).
    c: Vec<Vec<f32>>,
    /// Each block's buffers, kept from step to step.
    scratch: Vec<Scratch>,
}

/// The lazy table's rows, read-locked for one step.
type WordRows<'a> = std::sync::RwLockReadGuard<'a, Vec<Option<Box<[f32]>>>>;

/// What every block of one layer step reads, and where it writes.
struct LayerStep<'s, 'w> {
    l: usize,
    layer: &'w HostLayer,
    /// The state before the step.
    now: &'s HostLive,
    tokens: &'s [u32],
    /// Layer 0's word term of a token, in block order.
    word: &'s (dyn Fn(u32) -> &'w [f32] + Sync),
    /// The layer's new `h` and `c` `[rows, H]`; each block writes its own units.
    h_out: SendPtr<f32>,
    c_out: SendPtr<f32>,
}

/// A block's buffers for one layer step.
#[derive(Default, Clone)]
struct Scratch {
    gx: Vec<f32>,
    gh: Vec<f32>,
    state: Vec<f32>,
    out: Vec<f32>,
    saved: Vec<f32>,
}

/// Runs `f` for every block's state, on rayon's threads when the region does `macs`
/// multiply-adds or more (each block computes the same values either way).
fn for_each_block<S: Send>(macs: usize, blocks: &mut [S], f: impl Fn(usize, &mut S) + Sync) {
    if rayon::current_num_threads() > 1 && blocks.len() > 1 && macs >= PARALLEL_MIN_MACS {
        use rayon::prelude::*;
        blocks.par_iter_mut().enumerate().for_each(|(p, s)| f(p, s));
    } else {
        blocks.iter_mut().enumerate().for_each(|(p, s)| f(p, s));
    }
}

/// Host copy of a CPU f32 tensor.
fn host(t: &Tensor) -> Result<Vec<f32>> {
    Ok(t.flatten_all()?.to_vec1::<f32>()?)
}

/// `f` of a CPU f32 tensor's values, read in place when it is contiguous.
fn read<R>(t: &Tensor, f: impl FnOnce(&[f32]) -> R) -> Result<R> {
    {
        let (storage, layout) = t.storage_and_layout();
        if let (Storage::Cpu(CpuStorage::F32(v)), Some((a, b))) =
            (&*storage, layout.contiguous_offsets())
        {
            return Ok(f(&v[a..b]));
        }
    }
    Ok(f(&host(t)?))
}

impl HostWeights {
    /// The host layout of `w` and the word table `[V, G]` (or, without one, of the weights
    /// that make the word term), in as many blocks as rayon has threads; `None` where the graph
    /// step must run (other devices and dtypes, attention).
    pub fn new(
        kind: ModelKind,
        rnn: RnnKind,
        w: &Prepared,
        word_table: Option<&Tensor>,
    ) -> Result<Option<Self>> {
        let on_host =
            |t: &Tensor| t.dtype() == DType::F32 && kernels_enabled(t.device(), t.dtype());
        if kind == ModelKind::Att
            || !on_host(word_table.unwrap_or(&w.embed))
            || !on_host(&w.logit_w_t)
        {
            return Ok(None);
        }
        let (hidden, vocab) = w.logit_w_t.dims2()?;
        let logit = PackedLinear::from_tensors(&w.logit_w_t, Some(&w.logit_b))?;
        let gates = rnn.gates();
        let blocks = rayon::current_num_threads().clamp(1, hidden.div_ceil(8));
        let units: Vec<usize> = (0..=blocks).map(|p| p * hidden / blocks).collect();
        let mut this = Self {
            kind: rnn,
            hidden,
            gates,
            units,
            words: WordTerm::Table(Vec::new()),
            layers: Vec::new(),
            logit,
        };
        this.words = match word_table {
            Some(table) => WordTerm::Table(read(table, |m| this.block_order(m))?),
            None => WordTerm::Lazy {
                embed: w.embed.clone(),
                w_ih: w.w_ih0.clone(),
                b_ih: w.b_ih0.clone(),
                rows: RwLock::new(vec![None; vocab]),
            },
        };
        for (l, cell) in w.cells.iter().enumerate() {
            let CellWeights::Fused { b_hh, w_hh_t, .. } = cell else {
                return Ok(None);
            };
            if b_hh.elem_count() != gates * hidden {
                return Ok(None);
            }
            let w_ih = match l {
                0 => None,
                _ => {
                    let (w_ih_t, b_ih) = &w.upper[l - 1];
                    Some((
                        read(w_ih_t, |m| this.blocks_of(m))?,
                        read(b_ih, |m| this.block_order(m))?,
                    ))
                }
            };
            this.layers.push(HostLayer {
                w_hh: read(w_hh_t, |m| this.blocks_of(m))?,
                b_hh: read(b_hh, |m| this.block_order(m))?,
                w_ih,
            });
        }
        Ok(Some(this))
    }

    fn blocks(&self) -> usize {
        self.units.len() - 1
    }

    /// Gate columns `[G]` (PyTorch order, `gate · H + unit`) of each row of `m` in block order.
    fn block_order(&self, m: &[f32]) -> Vec<f32> {
        let (h, g) = (self.hidden, self.gates * self.hidden);
        let mut out = Vec::with_capacity(m.len());
        for row in m.chunks_exact(g) {
            for p in 0..self.blocks() {
                let (u0, u1) = (self.units[p], self.units[p + 1]);
                for gate in 0..self.gates {
                    out.extend_from_slice(&row[gate * h + u0..gate * h + u1]);
                }
            }
        }
        out
    }

    /// The columns of each block of `w_t` `[K, G]` (PyTorch gate order): block `p` as
    /// `[K, gates · units]`.
    fn blocks_of(&self, w_t: &[f32]) -> Vec<Vec<f32>> {
        let h = self.hidden;
        (0..self.blocks())
            .map(|p| {
                let units = self.units[p]..self.units[p + 1];
                let mut out = Vec::with_capacity(w_t.len() / self.blocks() + w_t.len() / h);
                for row in w_t.chunks_exact(self.gates * h) {
                    for gate in 0..self.gates {
                        out.extend_from_slice(&row[gate * h + units.start..gate * h + units.end]);
                    }
                }
                out
            })
            .collect()
    }

    /// The decoder state the encoder gives, on the host.
    pub fn start(&self, enc: &Encoded, states: &[LayerState]) -> Result<HostLive> {
        let rows = enc.fx.dim(0)?;
        let c = match self.kind {
            RnnKind::Gru => Vec::new(),
            RnnKind::Lstm => states
                .iter()
                .map(|s| match &s.c {
                    Some(c) => host(c),
                    None => Ok(vec![0.0; rows * self.hidden]),
                })
                .collect::<Result<_>>()?,
        };
        Ok(HostLive {
            rows,
            fx: std::sync::Arc::new(self.block_order(&host(&enc.fx)?)),
            image: (0..rows as u32).collect(),
            h: states.iter().map(|s| host(&s.h)).collect::<Result<_>>()?,
            c,
            scratch: Vec::new(),
        })
    }

    /// Feeds `tokens` (one per live row) through every layer.
    pub fn advance(&self, live: &mut HostLive, tokens: &[u32]) -> Result<()> {
        let (n, h) = (live.rows, self.hidden);
        let g = self.gates * h;
        let lstm = self.kind == RnnKind::Lstm;
        let mut scratch = std::mem::take(&mut live.scratch);
        scratch.resize_with(self.blocks(), Scratch::default);
        let lazy_rows = self.make_word_rows(tokens)?;
        let word = |t: u32| -> &[f32] {
            match (&self.words, &lazy_rows) {
                (WordTerm::Table(table), _) => &table[t as usize * g..(t as usize + 1) * g],
                (_, Some(made)) => made[t as usize].as_deref().unwrap_or_default(),
                _ => &[],
            }
        };
        for (l, layer) in self.layers.iter().enumerate() {
            let mut h_out = vec![0f32; n * h];
            let mut c_out = vec![0f32; if lstm { n * h } else { 0 }];
            let step = LayerStep {
                l,
                layer,
                now: &*live,
                tokens,
                word: &word,
                h_out: SendPtr(h_out.as_mut_ptr()),
                c_out: SendPtr(c_out.as_mut_ptr()),
            };
            let inputs = if l == 0 { 0 } else { h };
            for_each_block(n * g * (h + inputs), &mut scratch, |p, s| {
                self.block_step(&step, p, s)
            });
            live.h[l] = h_out;
            if lstm {
                live.c[l] = c_out;
            }
        }
        live.scratch = scratch;
        Ok(())
    }

    /// Layer 0's word-term rows of `tokens`, made where missing (the lazy table; `None` for a
    /// whole table).
    fn make_word_rows(&self, tokens: &[u32]) -> Result<Option<WordRows<'_>>> {
        let WordTerm::Lazy {
            embed,
            w_ih,
            b_ih,
            rows,
        } = &self.words
        else {
            return Ok(None);
        };
        let mut missing: Vec<u32> = {
            let made = rows.read().map_err(|_| poisoned())?;
            tokens
                .iter()
                .copied()
                .filter(|&t| made[t as usize].is_none())
                .collect()
        };
        missing.sort_unstable();
        missing.dedup();
        if !missing.is_empty() {
            let g = self.gates * self.hidden;
            let new = word_rows(embed, w_ih, b_ih, &missing)?;
            let new = read(&new.contiguous()?, |m| self.block_order(m))?;
            let mut made = rows.write().map_err(|_| poisoned())?;
            for (&t, row) in missing.iter().zip(new.chunks_exact(g)) {
                made[t as usize] = Some(row.into());
            }
        }
        Ok(Some(rows.read().map_err(|_| poisoned())?))
    }

    /// Block `p`'s units of one layer step: its gate columns' products, then the gates of
    /// every row, written into the layer's new `h` (and `c`).
    fn block_step(&self, step: &LayerStep<'_, '_>, p: usize, s: &mut Scratch) {
        let (n, h, gates) = (step.now.rows, self.hidden, self.gates);
        let g = gates * h;
        let (layer, now, l) = (step.layer, step.now, step.l);
        let (u0, u1) = (self.units[p], self.units[p + 1]);
        let nb = u1 - u0;
        let (off, w) = (gates * u0, gates * nb);
        // gh = b_hh + h_prev W_hhᵀ, this block's columns.
        s.gh.clear();
        for _ in 0..n {
            s.gh.extend_from_slice(&layer.b_hh[off..off + w]);
        }
        // SAFETY: h_prev is [n, H]; the block's W_hhᵀ is [H, w]; gh is [n, w].
        unsafe {
            gemm_into(
                n,
                w,
                h,
                s.gh.as_mut_ptr(),
                w,
                true,
                Mat::rows(&now.h[l], h),
                Mat::rows(&layer.w_hh[p], w),
            );
        }
        // gx: the word and image terms (layer 0) or b_ih + h_below W_ihᵀ.
        s.gx.clear();
        match &layer.w_ih {
            None => {
                for (i, &t) in step.tokens.iter().enumerate() {
                    let word = &(step.word)(t)[off..off + w];
                    let r = now.image[i] as usize * g;
                    let image = &now.fx[r + off..r + off + w];
                    s.gx.extend(word.iter().zip(image).map(|(a, b)| a + b));
                }
            }
            Some((w_ih, b_ih)) => {
                // The product first, then the bias, as the graph step adds them.
                s.gx.resize(n * w, 0.0);
                // SAFETY: the layer below's new h is [n, H]; W_ihᵀ of the block [H, w].
                unsafe {
                    gemm_into(
                        n,
                        w,
                        h,
                        s.gx.as_mut_ptr(),
                        w,
                        false,
                        Mat::rows(&now.h[l - 1], h),
                        Mat::rows(&w_ih[p], w),
                    );
                }
                for row in s.gx.chunks_exact_mut(w) {
                    for (x, b) in row.iter_mut().zip(&b_ih[off..off + w]) {
                        *x += b;
                    }
                }
            }
        }
        let lstm = self.kind == RnnKind::Lstm;
        s.state.resize(2 * nb, 0.0);
        s.out.resize(2 * nb, 0.0);
        s.saved.resize(5 * nb, 0.0);
        for i in 0..n {
            let units = i * h + u0..i * h + u1;
            s.state[..nb].copy_from_slice(&now.h[l][units.clone()]);
            if lstm {
                s.state[nb..].copy_from_slice(&now.c[l][units.clone()]);
            }
            gates::gates(
                self.kind,
                nb,
                &s.gx[i * w..(i + 1) * w],
                &s.gh[i * w..(i + 1) * w],
                &s.state,
                &mut s.out,
                &mut s.saved,
            );
            // SAFETY: units u0..u1 of row i belong to this block alone.
            unsafe {
                step.h_out
                    .slice(units.start, nb)
                    .copy_from_slice(&s.out[..nb]);
                if lstm {
                    step.c_out
                        .slice(units.start, nb)
                        .copy_from_slice(&s.out[nb..]);
                }
            }
        }
    }

    /// The next-token logits of every live row `[rows, V]`.
    pub fn logits(&self, live: &HostLive) -> Vec<f32> {
        self.logit.forward(&live.h[live.h.len() - 1], live.rows)
    }
}

impl HostLive {
    /// Keeps the rows `idx` (repeats allowed), in that order.
    pub fn select(&self, idx: &[u32]) -> Self {
        let pick = |m: &[f32]| -> Vec<f32> {
            let w = m.len() / self.rows.max(1);
            let mut out = Vec::with_capacity(idx.len() * w);
            for &r in idx {
                out.extend_from_slice(&m[r as usize * w..(r as usize + 1) * w]);
            }
            out
        };
        Self {
            rows: idx.len(),
            fx: self.fx.clone(),
            image: idx.iter().map(|&r| self.image[r as usize]).collect(),
            h: self.h.iter().map(|m| pick(m)).collect(),
            c: self.c.iter().map(|m| pick(m)).collect(),
            scratch: Vec::new(),
        }
    }

    /// The top layer's hidden state `[rows, H]`.
    pub fn top_hidden(&self, device: &Device) -> Result<Tensor> {
        let top = &self.h[self.h.len() - 1];
        let h = top.len() / self.rows.max(1);
        Ok(Tensor::from_slice(top, (self.rows, h), device)?)
    }
}

#[cfg(test)]
mod tests;
