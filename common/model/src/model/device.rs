//! Device strings: `cpu` or `cuda:N`.

use candle_core::Device;

use super::device_spec::DeviceSpec;
use super::error::{ModelError, Result};

/// Opens the device named by the run config's `device` key: `"cpu"`, `"cuda"` (= `cuda:0`) or
/// `"cuda:N"`, read by the config's own grammar ([`DeviceSpec`]: one parser for the key and the
/// flags). A CUDA device in a build without the `cuda` feature is an error that says how to
/// rebuild.
pub fn parse_device(s: &str) -> Result<Device> {
    let spec: DeviceSpec = s.trim().parse().map_err(|_| ModelError::Device {
        given: s.to_string(),
        reason: "expected `cpu` or `cuda:N` with N a GPU index (e.g. `cuda:0`)".into(),
    })?;
    open_device(spec)
}

/// Opens the device `spec` names.
pub fn open_device(spec: DeviceSpec) -> Result<Device> {
    match spec {
        DeviceSpec::Cpu => Ok(Device::Cpu),
        DeviceSpec::Cuda(ordinal) => open_cuda(ordinal).map_err(|reason| ModelError::Device {
            given: spec.to_string(),
            reason,
        }),
    }
}

/// Opens GPU `ordinal` once per process, on one stream of its own, and hands out that device
/// from then on.
///
/// Candle's `Device::new_cuda` takes CUDA's per-thread default stream, so work queued from two
/// host threads lands on two streams, and nothing orders step N's optimizer writes before step
/// N+1's forward pass when a different thread runs it (rayon, `spawn_blocking`). With one
/// explicit stream every launch of the process is ordered as it was issued; one device per
/// ordinal also lets tensors opened by different roles of one process (`caprl run`) meet.
#[cfg(feature = "cuda")]
fn open_cuda(ordinal: usize) -> std::result::Result<Device, String> {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static OPEN: OnceLock<Mutex<HashMap<usize, Device>>> = OnceLock::new();
    let mut open = OPEN
        .get_or_init(|| Mutex::new(HashMap::new()))
        .lock()
        .map_err(|_| "the table of open CUDA devices was poisoned by a panic".to_string())?;
    if let Some(d) = open.get(&ordinal) {
        return Ok(d.clone());
    }
    let d = Device::new_cuda_with_stream(ordinal)
        .map_err(|e| format!("cannot open CUDA device {ordinal}: {e}"))?;
    open.insert(ordinal, d.clone());
    Ok(d)
}

#[cfg(not(feature = "cuda"))]
fn open_cuda(_ordinal: usize) -> std::result::Result<Device, String> {
    Err(
        "this build has no CUDA support; rebuild with `--features cuda` \
         (e.g. `cargo build --release --features cuda`) or set device = \"cpu\""
            .into(),
    )
}

/// Keeps candle's element-wise ops on the calling thread unless `CANDLE_NUM_THREADS` is set.
///
/// Candle runs element-wise ops on a pool of its own whose workers spin for a while after every
/// op, and its matmuls (and the fused recurrent layer's) on rayon's threads. With both pools at
/// full width the spinning workers take the cores the matmuls need: on 2 cores, decoding on 2
/// threads measured slower than on 1. With this, matmuls still use `RAYON_NUM_THREADS` threads.
/// Call it first thing in `main`, before any other thread exists and before the first tensor op
/// (candle reads the variable once, when its pool starts).
pub fn keep_elementwise_ops_on_one_thread() {
    if std::env::var_os("CANDLE_NUM_THREADS").is_none() {
        std::env::set_var("CANDLE_NUM_THREADS", "1");
    }
}

/// Below this many logits in a step, the per-row work on them (drawing tokens, beam
/// log-softmaxes) stays on the calling thread: handing it to rayon costs more than it saves.
pub(crate) const PARALLEL_MIN_LOGITS: usize = 16 * 1024;

/// Runs `f` (a whole decode, a whole training step) on one of rayon's threads, unless it
/// already is on one or rayon has a single thread. Its parallel parts (matmuls, gate rows,
/// per-row token choices, optimizer chunks) then start from a worker that takes its own share,
/// instead of waking every worker from a thread that sleeps meanwhile: on 2 cores that made
/// beam search about a third faster and an XE step about a tenth.
///
/// Work on any other device than the CPU stays on the calling thread: the hop buys nothing
/// there, and keeping a GPU model's work on the thread that owns it keeps the order of its
/// kernel launches plain to read (the device has one stream, see [`parse_device`]).
pub fn on_rayon<R: Send>(device: &Device, f: impl FnOnce() -> R + Send) -> R {
    if !device.is_cpu()
        || rayon::current_thread_index().is_some()
        || rayon::current_num_threads() <= 1
    {
        f()
    } else {
        rayon::scope(|_| f())
    }
}
