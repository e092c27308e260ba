//! The CRNN audio encoder of paper 000 (fig. 1): log-mel `[B, T, 64]` → a `2W`-d embedding `v`.
//!
//! Five convolution blocks `BN → Conv 3×3 (padding 1) → LeakyReLU(0.1)` in three groups,
//! L4-norm pooling after each group, a bidirectional GRU and global average pooling over time:
//!
//! | group | blocks (out channels) | L4 pool (time × freq) |
//! |---|---|---|
//! | 1 | 32 | 2 × 4 |
//! | 2 | W, W | 2 × 4 |
//! | 3 | W, W | 1 × 4 |
//!
//! Time is subsampled by 4 and 64 mel bands by 64 (to 1). L4 pooling over a window `R` is
//! `(Σ_{x∈R} x⁴)^{1/4}`. The GRU (hidden `W` per direction) reads `[B, T/4, W·n_mels/64]`; `v`
//! is the mean over time of both directions' states, `[B, 2W]`. With `W = 128` this is the
//! paper's 679k-parameter encoder and `v ∈ R^256`.
//!
//! Batch norm uses the batch's statistics in teacher-forced (XE) training and updates running
//! statistics (momentum 0.1, unbiased variance); decoding uses the running statistics, and so
//! does the policy-gradient update (see [`Captioner::set_running_norm`]), so that the policy
//! whose log-probabilities are differentiated is the one the actors sampled from. The running
//! statistics are stored with the weights, so snapshots carry them to the actors.
//!
//! [`Captioner::set_running_norm`]: crate::model::Captioner::set_running_norm
//!
//! Parameter names (in the captioner's `VarMap`): `crnn.conv{i}.weight` `[out, in, 3, 3]`,
//! `crnn.conv{i}.bias`, `crnn.bn{i}.weight`, `crnn.bn{i}.bias`, `crnn.bn{i}.running_mean`,
//! `crnn.bn{i}.running_var` (`i = 0..5`), `crnn.gru.{fwd,bwd}.{w_ih,b_ih,w_hh,b_hh}`.

use candle_core::{Tensor, Var, D};

use super::cell::{cell_step, run_sequence, CellWeights, LayerState};
use crate::model::config::{crnn_takes, RnnKind, FREQ_DIVISOR};
use crate::model::error::{ModelError, Result};
use crate::model::params::{specs_of, Init, ParamFn};

/// Leaky ReLU slope (the paper's "slope 0.1").
const LEAKY: f64 = 0.1;
/// Batch-norm epsilon and running-statistics momentum (PyTorch defaults).
const BN_EPS: f64 = 1e-5;
const BN_MOMENTUM: f64 = 0.1;

/// Output channels of the five convolutions for width `w`.
pub fn conv_channels(w: usize) -> [usize; 5] {
    [32, w, w, w, w]
}

/// L4 pool after convolution `i` (time, freq), if any.
fn pool_after(i: usize) -> Option<(usize, usize)> {
    match i {
        0 => Some((2, 4)),
        2 => Some((2, 4)),
        4 => Some((1, 4)),
        _ => None,
    }
}

/// Trainable parameters (excluding running statistics) of the encoder for width `w`.
pub fn crnn_param_count(w: usize, n_mels: usize) -> usize {
    specs_of(|param| Crnn::visit(w, n_mels, param))
        .unwrap_or_default()
        .iter()
        .filter(|(n, _, _)| !n.contains("running"))
        .map(|(_, s, _)| s.iter().product::<usize>())
        .sum()
}

/// Parameter `name` of `param` as a tensor handle.
fn tensor(param: &mut ParamFn, name: String, shape: &[usize], init: Init) -> Result<Tensor> {
    Ok(param(&name, shape, init)?.as_tensor().clone())
}

struct Block {
    bn_w: Tensor,
    bn_b: Tensor,
    running_mean: Var,
    running_var: Var,
    conv_w: Tensor,
    conv_b: Tensor,
}

struct Gru {
    w_ih: Tensor,
    b_ih: Tensor,
    w_hh: Tensor,
    b_hh: Tensor,
}

/// The encoder's parameters (sharing storage with the captioner's `VarMap`).
pub(crate) struct Crnn {
    blocks: Vec<Block>,
    fwd: Gru,
    bwd: Gru,
    width: usize,
}

impl Crnn {
    /// The encoder of width `w` over `n_mels` mel bands, each parameter asked of `param`: the
    /// one list of its names, shapes and initialisations (PyTorch's: batch norm gain 1, bias 0,
    /// running mean 0 and variance 1; convolutions and GRU uniform `±1/√fan_in`).
    pub(crate) fn visit(w: usize, n_mels: usize, param: &mut ParamFn) -> Result<Self> {
        let mut blocks = Vec::new();
        let mut cin = 1;
        let (one, zero) = (Init::Const(1.0), Init::Const(0.0));
        for (i, cout) in conv_channels(w).into_iter().enumerate() {
            let fan = Init::fan_in(cin * 9);
            blocks.push(Block {
                bn_w: tensor(param, format!("crnn.bn{i}.weight"), &[cin], one)?,
                bn_b: tensor(param, format!("crnn.bn{i}.bias"), &[cin], zero)?,
                running_mean: param(&format!("crnn.bn{i}.running_mean"), &[cin], zero)?,
                running_var: param(&format!("crnn.bn{i}.running_var"), &[cin], one)?,
                conv_w: tensor(
                    param,
                    format!("crnn.conv{i}.weight"),
                    &[cout, cin, 3, 3],
                    fan,
                )?,
                conv_b: tensor(param, format!("crnn.conv{i}.bias"), &[cout], fan)?,
            });
            cin = cout;
        }
        let input = w * (n_mels / FREQ_DIVISOR);
        let fan = Init::fan_in(w);
        let mut gru = |dir: &str| -> Result<Gru> {
            Ok(Gru {
                w_ih: tensor(param, format!("crnn.gru.{dir}.w_ih"), &[3 * w, input], fan)?,
                b_ih: tensor(param, format!("crnn.gru.{dir}.b_ih"), &[3 * w], fan)?,
                w_hh: tensor(param, format!("crnn.gru.{dir}.w_hh"), &[3 * w, w], fan)?,
                b_hh: tensor(param, format!("crnn.gru.{dir}.b_hh"), &[3 * w], fan)?,
            })
        };
        Ok(Crnn {
            blocks,
            fwd: gru("fwd")?,
            bwd: gru("bwd")?,
            width: w,
        })
    }

    /// Embedding `v` `[B, 2W]` of log-mel `x` `[B, T, n_mels]`. `train`: gradients flow into
    /// the weights, else they are detached. `batch_stats` (only with `train`): batch norm uses
    /// the batch's statistics and updates the running ones; otherwise the running ones.
    pub(crate) fn forward(&self, x: &Tensor, train: bool, batch_stats: bool) -> Result<Tensor> {
        let h = self.conv_stack(x, train, batch_stats)?;
        // [B, T/4, F/64, C] → [T/4, B, F/64·C]
        let (b, tq, fq, c) = h.dims4()?;
        let seq = h.permute((1, 0, 2, 3))?.reshape((tq, b, fq * c))?;
        let mean_fwd = self.gru_mean(&self.fwd, &seq, train)?;
        let rev: Vec<u32> = (0..tq as u32).rev().collect();
        let rev = Tensor::from_vec(rev, tq, seq.device())?;
        let mean_bwd = self.gru_mean(&self.bwd, &seq.index_select(&rev, 0)?, train)?;
        Ok(Tensor::cat(&[mean_fwd, mean_bwd], 1)?)
    }

    /// The convolution groups' output `[B, T/4, n_mels/64, W]` (channels last) for log-mel
    /// `x` `[B, T, n_mels]`.
    pub(crate) fn conv_stack(&self, x: &Tensor, train: bool, batch_stats: bool) -> Result<Tensor> {
        let (_, t, n_mels) = x.dims3()?;
        if !crnn_takes(t, n_mels) {
            return Err(ModelError::Input(format!(
                "the crnn encoder needs at least 4 frames and a multiple of {FREQ_DIVISOR} mel bands; got {t} frames x {n_mels} bands"
            )));
        }
        let d = |w: &Tensor| if train { w.clone() } else { w.detach() };
        let mut h = x.unsqueeze(3)?; // [B, T, F, 1]
        for (i, blk) in self.blocks.iter().enumerate() {
            h = self.batch_norm(&h, blk, train, train && batch_stats)?;
            h = conv3x3(&h, &d(&blk.conv_w))?.broadcast_add(&d(&blk.conv_b))?;
            h = candle_nn::ops::leaky_relu(&h, LEAKY)?;
            if let Some(k) = pool_after(i) {
                h = l4_pool(&h, k)?;
            }
        }
        Ok(h)
    }

    /// `γ (x − μ)/√(σ² + ε) + β` per channel of `[B, T, F, C]`.
    fn batch_norm(
        &self,
        x: &Tensor,
        blk: &Block,
        train: bool,
        batch_stats: bool,
    ) -> Result<Tensor> {
        let (b, t, f, c) = x.dims4()?;
        let (mean, var) = if batch_stats {
            let flat = x.reshape((b * t * f, c))?;
            let mean = flat.mean_keepdim(0)?; // [1, C]
            let var = flat.broadcast_sub(&mean)?.sqr()?.mean_keepdim(0)?;
            let n = b * t * f;
            let unbiased = n as f64 / (n.max(2) - 1) as f64;
            let m = BN_MOMENTUM;
            let rm = ((blk.running_mean.as_tensor() * (1.0 - m))?
                + (mean.detach().flatten_all()? * m)?)?;
            let rv = ((blk.running_var.as_tensor() * (1.0 - m))?
                + (var.detach().flatten_all()? * (m * unbiased))?)?;
            blk.running_mean.set(&rm)?;
            blk.running_var.set(&rv)?;
            (mean.flatten_all()?, var.flatten_all()?)
        } else {
            (
                blk.running_mean.as_tensor().detach(),
                blk.running_var.as_tensor().detach(),
            )
        };
        let d = |w: &Tensor| if train { w.clone() } else { w.detach() };
        let scale = d(&blk.bn_w).div(&(var + BN_EPS)?.sqrt()?)?;
        Ok(x.broadcast_sub(&mean)?
            .broadcast_mul(&scale)?
            .broadcast_add(&d(&blk.bn_b))?)
    }

    /// Mean over time of one GRU direction's states over `seq` `[T, B, Din]`.
    fn gru_mean(&self, g: &Gru, seq: &Tensor, train: bool) -> Result<Tensor> {
        let d = |w: &Tensor| if train { w.clone() } else { w.detach() };
        let (t, b, din) = seq.dims3()?;
        let gx = seq
            .reshape((t * b, din))?
            .matmul(&d(&g.w_ih).t()?)?
            .broadcast_add(&d(&g.b_ih))?
            .reshape((t, b, 3 * self.width))?;
        let cell = CellWeights::new(&d(&g.w_hh), &d(&g.b_hh))?;
        let h0 = LayerState {
            h: Tensor::zeros((b, self.width), seq.dtype(), seq.device())?,
            c: None,
        };
        if let Some(states) = run_sequence(RnnKind::Gru, &gx, &h0, &cell)? {
            return Ok(states.mean(0)?);
        }
        let mut state = h0;
        let mut sum = state.h.zeros_like()?;
        for step in gx.chunk(t, 0)? {
            state = cell_step(RnnKind::Gru, &step.squeeze(0)?, &state, &cell)?;
            sum = (sum + &state.h)?;
        }
        Ok((sum / t as f64)?)
    }
}

/// 3×3 convolution with zero padding 1 of `x` `[B, T, F, Cin]` by `w` `[Cout, Cin, 3, 3]`
/// (PyTorch layout) as one matrix product over the nine shifted copies of `x` (im2col); its
/// backward pass is matrix products too (candle's CPU transposed convolution is much slower).
fn conv3x3(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let (b, t, f, cin) = x.dims4()?;
    let cout = w.dim(0)?;
    let padded = x.pad_with_zeros(1, 1, 1)?.pad_with_zeros(2, 1, 1)?;
    let mut cols = Vec::with_capacity(9);
    for dt in 0..3 {
        let rows = padded.narrow(1, dt, t)?;
        for df in 0..3 {
            cols.push(rows.narrow(2, df, f)?);
        }
    }
    let cols = Tensor::cat(&cols, 3)?.reshape((b * t * f, 9 * cin))?;
    // [Cout, Cin, 3, 3] → [3, 3, Cin, Cout] → [9·Cin, Cout], matching the column order.
    let w = w.permute((2, 3, 1, 0))?.reshape((9 * cin, cout))?;
    Ok(cols.matmul(&w)?.reshape((b, t, f, cout))?)
}

/// L4-norm pooling of `[B, T, F, C]` over non-overlapping `(kt, kf)` windows (a ragged end is
/// dropped): `(Σ x⁴ + ε)^{1/4}` (ε keeps the gradient finite at 0).
fn l4_pool(x: &Tensor, (kt, kf): (usize, usize)) -> Result<Tensor> {
    let (b, t, f, c) = x.dims4()?;
    let (tq, fq) = (t / kt, f / kf);
    let x = if tq * kt != t {
        x.narrow(1, 0, tq * kt)?
    } else {
        x.clone()
    };
    let x = if fq * kf != f {
        x.narrow(2, 0, fq * kf)?
    } else {
        x
    };
    let p = x
        .sqr()?
        .sqr()?
        .reshape((b, tq, kt, fq, kf, c))?
        .sum(4)?
        .sum(2)?;
    Ok((p + 1e-12)?.sqrt()?.sqrt()?)
}

/// Checks `x` against `D::Minus1` = `n_mels`, for error messages before the encoder runs.
pub(crate) fn check_input(x: &Tensor, n_mels: usize) -> Result<()> {
    let got = x.dim(D::Minus1)?;
    if got != n_mels {
        return Err(ModelError::Input(format!(
            "log-mel features have {got} bands, the crnn model expects {n_mels}"
        )));
    }
    Ok(())
}
