//! Rows of the first layer's word table `W_ih E + b_ih`, made on demand with the bits of the
//! whole table: shared by the graph decode step and the host decode step.

use candle_core::Tensor;

use crate::model::error::Result;
use caprl_kernels::linear::linear;

/// Rows `ids` of the word table `W_ih E + b_ih`, with the table's bits: the product runs on at
/// least [`WORD_ROWS_MIN`] rows (repeating the first), because gemm takes another summation
/// order for a single row.
pub(super) fn word_rows(
    embed: &Tensor,
    w_ih: &Tensor,
    b_ih: &Tensor,
    ids: &[u32],
) -> Result<Tensor> {
    let mut padded = ids.to_vec();
    while padded.len() < WORD_ROWS_MIN {
        padded.push(ids[0]);
    }
    let idx = Tensor::from_slice(&padded, padded.len(), embed.device())?;
    Ok(linear(&embed.index_select(&idx, 0)?, w_ih, b_ih)?.narrow(0, 0, ids.len())?)
}

/// See [`word_rows`].
const WORD_ROWS_MIN: usize = 8;
