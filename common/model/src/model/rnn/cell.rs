//! Hand-written GRU and LSTM cells.
//!
//! The input-to-gates term `W_ih x_t + b_ih` is computed by the caller (for teacher forcing in
//! one matmul over all steps, for decoding from a `[V, G]` table), so a step only does the
//! recurrent matmul `h W_hhᵀ` plus the gate arithmetic. Gate layout follows PyTorch:
//! GRU `[r, z, n]`, LSTM `[i, f, g, o]`.

use candle_core::{Tensor, D};
use candle_nn::ops::sigmoid;

use super::fused;
use crate::model::config::RnnKind;
use crate::model::error::Result;
use caprl_kernels::kernels_enabled;
use caprl_kernels::transpose::transposed_copy;

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

/// Recurrent weights of one layer, prepared once per pass (outside the time loop).
#[derive(Debug, Clone)]
pub(crate) enum CellWeights {
    /// For the fused layer ([`fused`], CPU f32/f64): `W_hh` `[G, H]`, `b_hh` `[G]` and a
    /// detached `W_hhᵀ` `[H, G]` for its forward gemm.
    Fused {
        w_hh: Tensor,
        b_hh: Tensor,
        w_hh_t: Tensor,
    },
    /// For the step built from graph ops (other devices and dtypes).
    Graph {
        /// `W_hhᵀ` `[H, G]`.
        w_hh_t: Tensor,
        /// `b_hh` `[G]`.
        b_hh: Tensor,
    },
}

impl CellWeights {
    /// Prepares `w_hh` `[G, H]` and `b_hh` `[G]` for the fused layer when the device and dtype
    /// allow it, else for the graph step.
    pub fn new(w_hh: &Tensor, b_hh: &Tensor) -> Result<Self> {
        if kernels_enabled(w_hh.device(), w_hh.dtype()) {
            Ok(Self::Fused {
                w_hh: w_hh.clone(),
                b_hh: b_hh.clone(),
                w_hh_t: transposed_copy(w_hh)?,
            })
        } else {
            Ok(Self::Graph {
                w_hh_t: w_hh.t()?.contiguous()?,
                b_hh: b_hh.clone(),
            })
        }
    }
}

/// The state a layer starts from, as the fused layer takes it: `h` (GRU) or `[h, c]` (LSTM).
pub(crate) fn packed_state(kind: RnnKind, state: &LayerState) -> Result<Tensor> {
    Ok(match kind {
        RnnKind::Gru => state.h.clone(),
        RnnKind::Lstm => match &state.c {
            Some(c) => Tensor::cat(&[&state.h, c], 1)?,
            None => Tensor::cat(&[&state.h, &state.h.zeros_like()?], 1)?,
        },
    })
}

/// Splits the fused layer's states `[.., S]` into `h` and (LSTM) `c`.
pub(crate) fn unpack_states(
    kind: RnnKind,
    states: &Tensor,
    hidden: usize,
) -> Result<(Tensor, Option<Tensor>)> {
    let last = states.rank() - 1;
    Ok(match kind {
        RnnKind::Gru => (states.clone(), None),
        RnnKind::Lstm => (
            states.narrow(last, 0, hidden)?,
            Some(states.narrow(last, hidden, hidden)?),
        ),
    })
}

/// Runs one layer over a whole sequence: `gx` `[T, B, G]` from `state`; returns the states
/// `[T, B, S]` (see [`fused`]). Needs [`CellWeights::Fused`].
pub(crate) fn run_sequence(
    kind: RnnKind,
    gx: &Tensor,
    state: &LayerState,
    w: &CellWeights,
) -> Result<Option<Tensor>> {
    match w {
        CellWeights::Fused { w_hh, b_hh, w_hh_t } => Ok(Some(fused::run(
            kind,
            gx,
            &packed_state(kind, state)?,
            w_hh,
            b_hh,
            w_hh_t,
        )?)),
        CellWeights::Graph { .. } => Ok(None),
    }
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
    let (w_hh_t, b_hh) = match w {
        CellWeights::Fused { w_hh, b_hh, w_hh_t } => {
            let out = fused::run(
                kind,
                &gx.unsqueeze(0)?,
                &packed_state(kind, state)?,
                w_hh,
                b_hh,
                w_hh_t,
            )?
            .squeeze(0)?;
            let (h, c) = unpack_states(kind, &out, hidden)?;
            // Contiguous, since decoders index_select the rows of the state.
            return Ok(LayerState {
                h: h.contiguous()?,
                c: c.map(|c| c.contiguous()).transpose()?,
            });
        }
        CellWeights::Graph { w_hh_t, b_hh } => (w_hh_t, b_hh),
    };
    let gh = state.h.matmul(w_hh_t)?.broadcast_add(b_hh)?;
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
