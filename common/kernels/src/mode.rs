//! Whether the hand-written kernels or Candle's generic ops run: the generic-ops mode
//! (`CAPRL_GENERIC_OPS`, or set for the whole process by `caprl selftest`).

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

use candle_core::{DType, Device};

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
pub fn generic_ops_from_env() -> Result<bool, BadGenericOps> {
    let Some(raw) = std::env::var_os(GENERIC_OPS_ENV) else {
        return Ok(false);
    };
    match raw.to_string_lossy().trim() {
        "1" | "true" => Ok(true),
        "0" | "false" | "" => Ok(false),
        other => Err(BadGenericOps(other.to_string())),
    }
}

/// [`GENERIC_OPS_ENV`] holds a value that is neither on nor off.
#[derive(Debug, thiserror::Error)]
#[error(
    "`CAPRL_GENERIC_OPS` = `{0}`: set it to 1 (the CPU runs the ops CUDA runs) or 0 (its own \
     kernels), or unset it"
)]
pub struct BadGenericOps(pub String);
