//! Device strings: `cpu` or `cuda:N`.

use candle_core::Device;

use super::error::{ModelError, Result};

/// Opens the device named by the run config's `device` key: `"cpu"`, `"cuda"` (= `cuda:0`) or
/// `"cuda:N"`. A CUDA device in a build without the `cuda` feature is an error that says how to
/// rebuild.
pub fn parse_device(s: &str) -> Result<Device> {
    let err = |reason: String| ModelError::Device {
        given: s.to_string(),
        reason,
    };
    let t = s.trim();
    if t == "cpu" {
        return Ok(Device::Cpu);
    }
    let ordinal = if t == "cuda" {
        0
    } else if let Some(n) = t.strip_prefix("cuda:") {
        n.parse::<usize>().map_err(|_| {
            err(format!(
                "`{n}` is not a GPU index; write `cuda:N` with N a number, e.g. `cuda:0`"
            ))
        })?
    } else {
        return Err(err("expected `cpu` or `cuda:N` (e.g. `cuda:0`)".into()));
    };
    open_cuda(ordinal).map_err(err)
}

#[cfg(feature = "cuda")]
fn open_cuda(ordinal: usize) -> std::result::Result<Device, String> {
    Device::new_cuda(ordinal).map_err(|e| format!("cannot open CUDA device {ordinal}: {e}"))
}

#[cfg(not(feature = "cuda"))]
fn open_cuda(_ordinal: usize) -> std::result::Result<Device, String> {
    Err(
        "this build has no CUDA support; rebuild with `--features cuda` \
         (e.g. `cargo build --release --features cuda`) or set device = \"cpu\""
            .into(),
    )
}
