//! The one decision between the hand-written CPU kernels and Candle's generic ops.
//!
//! On the CPU in f32/f64 the project runs its own kernels (the fused recurrent layer, the
//! linear and token log-softmax nodes, the host decoding step, the fused AdamW update, the host
//! gradient norm). Every other device and dtype — CUDA above all — runs the same maths as
//! Candle ops. That op path is what a GPU executes, so it must be tested where the tests run:
//! `CAPRL_GENERIC_OPS=1` makes the CPU take it at f32/f64 too, and CI runs the gradient checks,
//! the optimizer, decoding and the trainers a second time so.
//!
//! The kernels themselves know nothing of captioning or of any one architecture:
//! - `linear`: `y = x Wᵀ + b` as one node; `bias`: adding a row bias; `transpose`: blocked
//!   transposed copies; `dropout`: inverted dropout from the seeded RNG; `additive_attention`: additive
//!   attention over regions with its backward;
//!   `token_logp`: the log-softmax of the taken tokens only; `layer_norm`: the Transformer's
//!   layer norm with its backward; `attention_softmax`: scaled, optionally causal attention weights;
//!   `relu`: the rectifier with a one-pass backward.
//! - `real`: the element types (f32, f64) and the helpers they share; `host_gemm`: host
//!   matrix products and row-parallel loops.

pub(crate) mod additive_attention;
pub(crate) mod attention_softmax;
pub(crate) mod bias;
pub(crate) mod dropout;
pub(crate) mod host_gemm;
pub(crate) mod layer_norm;
pub(crate) mod linear;
pub(crate) mod panel_tiles;
pub(crate) mod panels;
pub(crate) mod real;
pub(crate) mod relu;
pub(crate) mod token_logp;
pub(crate) mod transpose;

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

use candle_core::{DType, Device};

use super::error::{ModelError, Result};

/// The environment variable that turns the generic-ops mode on (`1`) or off (`0`, unset).
pub const GENERIC_OPS_ENV: &str = "CAPRL_GENERIC_OPS";

/// Process-wide override of the environment: 0 = follow it, 1 = generic ops, 2 = kernels.
static OVERRIDE: AtomicU8 = AtomicU8::new(0);
static FROM_ENV: OnceLock<bool> = OnceLock::new();

/// Whether the hand-written CPU kernels may run on tensors of this device and dtype: CPU,
/// f32 or f64, and the generic-ops mode off. Every kernel-or-ops choice goes through here.
pub fn kernels_enabled(device: &Device, dtype: DType) -> bool {
    device.is_cpu() && matches!(dtype, DType::F32 | DType::F64) && !generic_ops()
}

/// Whether the CPU runs the generic (CUDA's) ops instead of its kernels.
pub fn generic_ops() -> bool {
    match OVERRIDE.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => *FROM_ENV.get_or_init(|| generic_ops_from_env().unwrap_or(false)),
    }
}

/// Sets the mode for the whole process (`None`: back to the environment's). For `caprl
/// selftest`, which runs the same computation both ways in one process; tests that run in
/// parallel threads of one process must not call it.
pub fn set_generic_ops(on: Option<bool>) {
    let v = match on {
        None => 0,
        Some(true) => 1,
        Some(false) => 2,
    };
    OVERRIDE.store(v, Ordering::Relaxed);
}

/// Reads [`GENERIC_OPS_ENV`]: `1`/`true` on, `0`/`false`/empty/unset off. The binary calls this
/// at start-up so that a misspelt value stops it instead of being read as off.
pub fn generic_ops_from_env() -> Result<bool> {
    let Some(raw) = std::env::var_os(GENERIC_OPS_ENV) else {
        return Ok(false);
    };
    match raw.to_string_lossy().trim() {
        "1" | "true" => Ok(true),
        "0" | "false" | "" => Ok(false),
        other => Err(ModelError::Config {
            key: "CAPRL_GENERIC_OPS",
            value: format!("`{other}`"),
            expected: "set it to 1 (the CPU runs the ops CUDA runs) or 0 (its own kernels), \
                       or unset it"
                .into(),
        }),
    }
}
