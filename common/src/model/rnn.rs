//! Hand-written GRU and LSTM cells.
//!
//! The input-to-gates term `W_ih x_t + b_ih` is computed by the caller (for teacher forcing in
//! one matmul over all steps, for decoding from a `[V, G]` table), so a step only does the
//! recurrent matmul `h W_hhᵀ` plus the gate arithmetic. Gate layout follows PyTorch:
//! GRU `[r, z, n]`, LSTM `[i, f, g, o]`.

use candle_core::{Tensor, D};
use candle_nn::ops::sigmoid;

use super::config::RnnKind;
use super::error::Result;

/// One layer's recurrent state: `h` `[B, H]` and, for LSTM, the cell `c` `[B, H]`.
#[derive(Debug, Clone)]
pub(crate) struct LayerState {
    pub h: Tensor,
    pub c: Option<Tensor>,
}

impl LayerState {
    /// Keeps the rows `idx` (`u32` `[B']`), used to compact finished rows away and to reorder beams.
    pub fn select(&self, idx: &Tensor) -> Result<Self> {
        Ok(Self {
            h: self.h.index_select(idx, 0)?,
            c: match &self.c {
                Some(c) => Some(c.index_select(idx, 0)?),
                None => None,
            },
        })
    }
}

/// Recurrent weights of one layer, transposed once per forward pass (outside the time loop).
#[derive(Debug, Clone)]
pub(crate) struct CellWeights {
    /// `W_hhᵀ` `[H, G]`.
    pub w_hh_t: Tensor,
    /// `b_hh` `[G]`.
    pub b_hh: Tensor,
}

/// One step of the cell given the precomputed input term `gx = W_ih x + b_ih` `[B, G]`.
///
/// GRU (Cho et al. 2014, PyTorch form):
/// `r = σ(gx_r + gh_r)`, `z = σ(gx_z + gh_z)`, `n = tanh(gx_n + r ⊙ gh_n)`, `h' = (1 - z) ⊙ n + z ⊙ h`
/// with `gh = h W_hhᵀ + b_hh`.
///
/// LSTM: `[i, f, g, o] = gx + gh`, `c' = σ(f) ⊙ c + σ(i) ⊙ tanh(g)`, `h' = σ(o) ⊙ tanh(c')`.
pub(crate) fn cell_step(
    kind: RnnKind,
    gx: &Tensor,
    state: &LayerState,
    w: &CellWeights,
) -> Result<LayerState> {
    let hidden = state.h.dim(D::Minus1)?;
    let gh = state.h.matmul(&w.w_hh_t)?.broadcast_add(&w.b_hh)?;
    match kind {
        RnnKind::Gru => {
            let rz = sigmoid(&(gx.narrow(1, 0, 2 * hidden)? + gh.narrow(1, 0, 2 * hidden)?)?)?;
            let r = rz.narrow(1, 0, hidden)?;
            let z = rz.narrow(1, hidden, hidden)?;
            let n = (gx.narrow(1, 2 * hidden, hidden)?
                + r.mul(&gh.narrow(1, 2 * hidden, hidden)?)?)?
            .tanh()?;
            let h = (&n + z.mul(&(&state.h - &n)?)?)?;
            Ok(LayerState { h, c: None })
        }
        RnnKind::Lstm => {
            let g_all = (gx + gh)?;
            let ifo_i_f = sigmoid(&g_all.narrow(1, 0, 2 * hidden)?)?;
            let i = ifo_i_f.narrow(1, 0, hidden)?;
            let f = ifo_i_f.narrow(1, hidden, hidden)?;
            let g = g_all.narrow(1, 2 * hidden, hidden)?.tanh()?;
            let o = sigmoid(&g_all.narrow(1, 3 * hidden, hidden)?)?;
            let c_prev = match &state.c {
                Some(c) => c.clone(),
                None => state.h.zeros_like()?,
            };
            let c = (f.mul(&c_prev)? + i.mul(&g)?)?;
            let h = o.mul(&c.tanh()?)?;
            Ok(LayerState { h, c: Some(c) })
        }
    }
}
