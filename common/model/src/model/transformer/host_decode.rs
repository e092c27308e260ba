//! Decoding steps on host arrays (CPU, f32): the Transformer's fast path.
//!
//! A graph step is some forty small ops per layer, each allocating its output; here a step
//! is a few matrix products (on weights packed once per snapshot: [`PackedLinear`]) and loops over
//! rows.
//!
//! The self-attention caches live in an append-only arena per decode: every step writes each
//! live row's key and value into a fresh slot, and a row keeps the list of its slots. Dropping
//! finished rows and reordering beams ([`HostLive::select`]) copies those short lists, never
//! the cached keys and values. The memory's cross-attention keys and values are stored once
//! per distinct image and every row reads its image's.

use std::cell::RefCell;
use std::rc::Rc;

use candle_core::{DType, Device, Tensor};

use super::forward::Memory;
use super::layers::{positions, Linear, Norm, NORM_EPS};
use super::{TransformerCaptioner, Weights};
use crate::model::error::{ModelError, Result};
use caprl_kernels::attention_softmax::softmax_in_place;
use caprl_kernels::host_gemm::{for_each_row, SendPtr};
use caprl_kernels::kernels_enabled;
use caprl_kernels::layer_norm::norm_rows;
use caprl_kernels::panels::{with_values, PackedLinear};
use caprl_kernels::real::{dot, Real};

/// From this many multiply-adds a step's attention runs its rows on several threads.
const PARALLEL_MIN_ATTENTION: usize = 4 << 20;

/// A projection `x Wᵀ + b` on the host, the weight packed once per snapshot.
fn packed(l: &Linear) -> Result<PackedLinear> {
    Ok(PackedLinear::from_tensors(&l.w.t()?, Some(&l.b))?)
}

/// A layer norm's gain and bias on the host.
struct HostNorm {
    gain: Vec<f32>,
    bias: Vec<f32>,
}

impl HostNorm {
    fn new(n: &Norm) -> Result<Self> {
        Ok(Self {
            gain: host(&n.gain)?,
            bias: host(&n.bias)?,
        })
    }

    /// The Annotated Transformer's norm of every row of `x` (unbiased std, `eps` added to it).
    fn forward(&self, x: &[f32]) -> Vec<f32> {
        let mut y = vec![0f32; x.len()];
        norm_rows(x, &self.gain, &self.bias, NORM_EPS, &mut y, None, None);
        y
    }
}

struct HostLayer {
    norm1: HostNorm,
    qkv: PackedLinear,
    out: PackedLinear,
    norm2: HostNorm,
    cross_q: PackedLinear,
    cross_out: PackedLinear,
    norm3: HostNorm,
    ff1: PackedLinear,
    ff2: PackedLinear,
}

/// The decoder's weights on the host.
pub(crate) struct HostWeights {
    d: usize,
    heads: usize,
    /// `√d · E` `[V, d]`.
    embed: Vec<f32>,
    /// Positions `0..=max_len + 1` `[P, d]`.
    positions: Vec<f32>,
    layers: Vec<HostLayer>,
    norm: HostNorm,
    logit: PackedLinear,
}

/// Keys and values `[slots, d]` per layer, appended to, never moved.
struct Arena {
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
    slots: usize,
}

/// The live rows of one decode on the host.
pub(crate) struct HostLive {
    /// The distinct image each row reads.
    rows: Vec<u32>,
    /// Each row's cache slots, one per token fed.
    history: Vec<Vec<u32>>,
    /// The final-norm decoder state of every row after the last token fed, `[rows, d]`.
    top: Option<Vec<f32>>,
    pos: usize,
    arena: Rc<RefCell<Arena>>,
    /// The memory's keys and values, shared by every selection of the rows.
    cross: Rc<CrossKv>,
}

/// Each decoder layer's cross-attention keys and values of the distinct images, `[U, R, d]`.
struct CrossKv {
    layers: Vec<(Vec<f32>, Vec<f32>)>,
    regions: usize,
}

fn host(t: &Tensor) -> Result<Vec<f32>> {
    Ok(t.flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()?)
}

impl HostWeights {
    /// The host layout of the detached weights `w`, when the model decodes on the CPU in f32
    /// with the kernels on; `None` sends decoding down the graph path.
    pub(crate) fn new(model: &TransformerCaptioner, w: &Weights) -> Result<Option<Self>> {
        let compute = model.base.cfg.compute_dtype;
        if compute != DType::F32 || !kernels_enabled(&model.base.device, compute) {
            return Ok(None);
        }
        let s = model.shape();
        let d = s.d_model;
        let scale = (d as f64).sqrt();
        // `x · √d + 0` as candle's affine map computes it (the same bits), in one pass.
        let embed = with_values(&w.embed, |e| {
            let scale = scale as f32;
            e.iter().map(|&x| x * scale + 0.0).collect::<Vec<f32>>()
        })?;
        let layers = w
            .decoder
            .iter()
            .map(|l| {
                Ok(HostLayer {
                    norm1: HostNorm::new(&l.norm1)?,
                    qkv: packed(&l.attn.qkv)?,
                    out: packed(&l.attn.out)?,
                    norm2: HostNorm::new(&l.norm2)?,
                    cross_q: packed(&l.cross.q)?,
                    cross_out: packed(&l.cross.out)?,
                    norm3: HostNorm::new(&l.norm3)?,
                    ff1: packed(&l.ff.w1)?,
                    ff2: packed(&l.ff.w2)?,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Some(Self {
            d,
            heads: s.heads,
            embed,
            positions: positions(0, model.base.cfg.max_len + 2, d),
            layers,
            norm: HostNorm::new(&w.dec_norm)?,
            logit: packed(&w.logit)?,
        }))
    }

    /// The rows of an encoded batch, before their first token.
    pub(crate) fn start(&self, memory: &Memory) -> Result<HostLive> {
        let mut regions = 0;
        let cross = memory
            .kv
            .iter()
            .map(|(k, v)| {
                // [U, h, R, dk] → [U, R, h·dk]
                let (_, _, r, _) = k.dims4()?;
                regions = r;
                let flat = |t: &Tensor| host(&t.transpose(1, 2)?.contiguous()?);
                Ok((flat(k)?, flat(v)?))
            })
            .collect::<Result<Vec<_>>>()?;
        let n = memory.row_image.len();
        Ok(HostLive {
            rows: memory.row_image.clone(),
            history: vec![Vec::new(); n],
            top: None,
            pos: 0,
            arena: Rc::new(RefCell::new(Arena {
                k: vec![Vec::new(); self.layers.len()],
                v: vec![Vec::new(); self.layers.len()],
                slots: 0,
            })),
            cross: Rc::new(CrossKv {
                layers: cross,
                regions,
            }),
        })
    }

    /// Feeds one token to every live row through every layer.
    pub(crate) fn advance(&self, live: &mut HostLive, tokens: &[u32]) -> Result<()> {
        let (n, d) = (live.rows.len(), self.d);
        if tokens.len() != n {
            return Err(ModelError::Internal(format!(
                "{} tokens for {n} live rows",
                tokens.len()
            )));
        }
        if n == 0 {
            return Ok(());
        }
        let pos = live.pos.min(self.positions.len() / d - 1);
        let pe = &self.positions[pos * d..(pos + 1) * d];
        let mut x = Vec::with_capacity(n * d);
        for &w in tokens {
            let e = &self.embed[w as usize * d..(w as usize + 1) * d];
            x.extend(e.iter().zip(pe).map(|(a, b)| a + b));
        }
        let first_slot = live.arena.borrow().slots as u32;
        for (i, h) in live.history.iter_mut().enumerate() {
            h.push(first_slot + i as u32);
        }
        for (l, layer) in self.layers.iter().enumerate() {
            // Masked self-attention over each row's own slots.
            let y = layer.norm1.forward(&x);
            let qkv = layer.qkv.forward(&y, n);
            {
                let mut arena = live.arena.borrow_mut();
                for row in qkv.chunks(3 * d) {
                    arena.k[l].extend_from_slice(&row[d..2 * d]);
                    arena.v[l].extend_from_slice(&row[2 * d..]);
                }
            }
            let ctx = {
                let arena = live.arena.borrow();
                let (k, v) = (&arena.k[l], &arena.v[l]);
                self.attend(
                    n,
                    |i| &qkv[i * 3 * d..i * 3 * d + d],
                    |i| live.history[i].iter().map(|&s| s as usize * d).collect(),
                    k,
                    v,
                )
            };
            add_into(&mut x, &layer.out.forward(&ctx, n));
            // Attention over the row's image.
            let y = layer.norm2.forward(&x);
            let q = layer.cross_q.forward(&y, n);
            let regions = &live.cross.regions;
            let (k, v) = &live.cross.layers[l];
            let ctx = self.attend(
                n,
                |i| &q[i * d..(i + 1) * d],
                |i| {
                    let u = live.rows[i] as usize;
                    (0..*regions).map(|r| (u * regions + r) * d).collect()
                },
                k,
                v,
            );
            add_into(&mut x, &layer.cross_out.forward(&ctx, n));
            // Feed-forward.
            let y = layer.norm3.forward(&x);
            let mut h = layer.ff1.forward(&y, n);
            h.iter_mut().for_each(|v| *v = v.max(0.0));
            add_into(&mut x, &layer.ff2.forward(&h, n));
        }
        live.arena.borrow_mut().slots += n;
        live.top = Some(self.norm.forward(&x));
        live.pos += 1;
        Ok(())
    }

    /// Multi-head attention of `n` rows: row `i`'s query `q(i)` `[d]` over the keys and values
    /// at offsets `at(i)` of `k` and `v`; `[n, d]`.
    fn attend<'q>(
        &self,
        n: usize,
        q: impl Fn(usize) -> &'q [f32] + Sync,
        at: impl Fn(usize) -> Vec<usize> + Sync,
        k: &[f32],
        v: &[f32],
    ) -> Vec<f32> {
        let (d, heads) = (self.d, self.heads);
        let mut out = vec![0f32; n * d];
        let dst = SendPtr(out.as_mut_ptr());
        let per_row = at(0).len().max(1) * d * 2;
        let threads = match n * per_row >= PARALLEL_MIN_ATTENTION {
            true => candle_core::utils::get_num_threads(),
            false => 1,
        };
        for_each_row(threads, n, per_row, |i| {
            // SAFETY: each row `i` is written by one call only, inside `out`.
            let o = unsafe { dst.row(i, d) };
            attend_row(q(i), &at(i), k, v, heads, o);
        });
        out
    }

    /// The next-token logits `[rows, V]`.
    pub(crate) fn logits(&self, live: &HostLive) -> Result<Vec<f32>> {
        let top = live
            .top
            .as_ref()
            .ok_or_else(|| ModelError::Internal("logits read before any token was fed".into()))?;
        Ok(self.logit.forward(top, live.rows.len()))
    }
}

impl HostLive {
    /// The rows `rows` (repeats allowed) in that order; the caches stay where they are.
    pub(crate) fn select(&self, rows: &[u32]) -> Self {
        let d = self.top.as_ref().map(|t| t.len() / self.rows.len().max(1));
        Self {
            rows: rows.iter().map(|&r| self.rows[r as usize]).collect(),
            history: rows
                .iter()
                .map(|&r| self.history[r as usize].clone())
                .collect(),
            top: self.top.as_ref().zip(d).map(|(t, d)| {
                rows.iter()
                    .flat_map(|&r| &t[r as usize * d..(r as usize + 1) * d])
                    .copied()
                    .collect()
            }),
            pos: self.pos,
            arena: Rc::clone(&self.arena),
            cross: Rc::clone(&self.cross),
        }
    }

    /// The final-norm decoder state `[rows, d]`, once a token was fed.
    pub(crate) fn top(&self, device: &Device) -> Result<Option<Tensor>> {
        let n = self.rows.len();
        self.top
            .as_ref()
            .map(|t| Ok(Tensor::from_slice(t, (n, t.len() / n.max(1)), device)?))
            .transpose()
    }
}

/// One row of [`HostWeights::attend`]: the query `q` `[d]` over the keys and values at
/// `offsets` of `k` and `v`, into `o` `[d]`, compiled for the level in use.
fn attend_row(q: &[f32], offsets: &[usize], k: &[f32], v: &[f32], heads: usize, o: &mut [f32]) {
    caprl_kernels::fastmath::vectorised!(attend_row_plain(q, offsets, k, v, heads, o))
}

#[inline(always)]
fn attend_row_plain(
    q: &[f32],
    offsets: &[usize],
    k: &[f32],
    v: &[f32],
    heads: usize,
    o: &mut [f32],
) {
    let dk = q.len() / heads;
    let scale = 1.0 / (dk as f32).sqrt();
    let mut w = vec![0f32; offsets.len()];
    for h in 0..heads {
        let qh = &q[h * dk..(h + 1) * dk];
        for (s, &off) in w.iter_mut().zip(offsets) {
            *s = dot(qh, &k[off + h * dk..off + (h + 1) * dk]) * scale;
        }
        softmax_in_place(&mut w, f32::exp_fast);
        let oh = &mut o[h * dk..(h + 1) * dk];
        for (&p, &off) in w.iter().zip(offsets) {
            for (acc, &val) in oh.iter_mut().zip(&v[off + h * dk..off + (h + 1) * dk]) {
                *acc += p * val;
            }
        }
    }
}

fn add_into(x: &mut [f32], y: &[f32]) {
    x.iter_mut().zip(y).for_each(|(a, b)| *a += b);
}
