//! Weights as safetensors under the stable names listed in [`Captioner::new`].

use std::path::Path;

use candle_core::safetensors::Load;
use candle_core::{DType, Device, Var};
use safetensors::Dtype;

use super::captioner::Captioner;
use super::config::CaptionerConfig;
use super::error::{ModelError, Result};
use super::params::{named_tensors, to_sorted_safetensors};

impl Captioner {
    /// Writes every weight to `path` (safetensors).
    pub fn save(&self, path: &Path) -> Result<()> {
        let bytes = self.to_safetensors()?;
        std::fs::write(path, bytes).map_err(|e| ModelError::Weights {
            path: path.to_path_buf(),
            reason: format!("cannot write: {e}"),
        })
    }

    /// A captioner shaped by `cfg` with the weights of `path`; every parameter must be present
    /// with the shape `cfg` implies.
    pub fn load(path: &Path, cfg: &CaptionerConfig, device: &Device) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(|e| ModelError::Weights {
            path: path.to_path_buf(),
            reason: format!("cannot read: {e}"),
        })?;
        Self::from_safetensors(&bytes, cfg, device).map_err(|e| match e {
            ModelError::Weights { reason, .. } => ModelError::Weights {
                path: path.to_path_buf(),
                reason,
            },
            other => other,
        })
    }

    /// The weights serialised as safetensors bytes (policy snapshots and checkpoints).
    pub fn to_safetensors(&self) -> Result<Vec<u8>> {
        // A hand-off point: the bytes leave the device only after every queued update.
        self.device().synchronize()?;
        varmap_to_safetensors(self.varmap())
    }

    /// A captioner from safetensors bytes made by [`Captioner::to_safetensors`].
    pub fn from_safetensors(bytes: &[u8], cfg: &CaptionerConfig, device: &Device) -> Result<Self> {
        Captioner::from_loaded(cfg, device, &LoadedTensors::parse(bytes, device)?)
    }
}

/// The tensors of a safetensors buffer, each copied out only when a model asks for it, straight
/// into its variable: a snapshot's bytes are read once, not into tensors and then into variables.
pub(crate) struct LoadedTensors<'a> {
    file: safetensors::SafeTensors<'a>,
    device: Device,
}

impl<'a> LoadedTensors<'a> {
    /// Reads the header of `bytes`; the tensors stay where they are.
    pub(crate) fn parse(bytes: &'a [u8], device: &Device) -> Result<Self> {
        let file =
            safetensors::SafeTensors::deserialize(bytes).map_err(|e| ModelError::Weights {
                path: "<memory>".into(),
                reason: format!("not a safetensors file: {e}"),
            })?;
        Ok(Self {
            file,
            device: device.clone(),
        })
    }
}

/// The parameter `name` of a model built from `loaded` tensors: present, floating point and of
/// `shape`, as a variable in `dtype`.
pub(crate) fn loaded_param(
    loaded: &LoadedTensors<'_>,
    name: &str,
    shape: &[usize],
    dtype: DType,
) -> Result<Var> {
    let refuse = |reason: String| ModelError::Weights {
        path: "<memory>".into(),
        reason,
    };
    let view = loaded.file.tensor(name).map_err(|_| {
        refuse(format!(
            "parameter `{name}` is missing; the file was saved from a model with a different \
             [model] config"
        ))
    })?;
    // An integer tensor would convert to float without complaint: refuse it.
    if !matches!(
        view.dtype(),
        Dtype::F16 | Dtype::BF16 | Dtype::F32 | Dtype::F64
    ) {
        return Err(refuse(format!(
            "parameter `{name}` is stored as {:?}; weights are floating point",
            view.dtype()
        )));
    }
    if view.shape() != shape {
        return Err(refuse(format!(
            "parameter `{name}` has shape {:?}, the config implies {shape:?}",
            view.shape()
        )));
    }
    // f32 variables, the parameters' dtype, in one copy from the bytes (or one widening pass
    // from a bf16 or f16 snapshot: the same values as converting a loaded tensor).
    let device = &loaded.device;
    fn widened(data: &[u8], from: impl Fn([u8; 2]) -> f32) -> Vec<f32> {
        let pairs = data.chunks_exact(2);
        pairs.map(|b| from([b[0], b[1]])).collect()
    }
    match (view.dtype(), dtype) {
        (Dtype::F32, DType::F32) => {
            // SAFETY: any four bytes are an f32; `align_to` only hands out aligned values.
            let (head, values, tail) = unsafe { view.data().align_to::<f32>() };
            if head.is_empty() && tail.is_empty() && cfg!(target_endian = "little") {
                return Ok(Var::from_slice(values, shape, device)?);
            }
        }
        (Dtype::BF16, DType::F32) => {
            let values = widened(view.data(), |b| half::bf16::from_le_bytes(b).to_f32());
            return Ok(Var::from_vec(values, shape, device)?);
        }
        (Dtype::F16, DType::F32) => {
            let values = widened(view.data(), |b| half::f16::from_le_bytes(b).to_f32());
            return Ok(Var::from_vec(values, shape, device)?);
        }
        _ => {}
    }
    let t = view.load(device)?;
    Ok(Var::from_tensor(&t.to_dtype(dtype)?)?)
}

/// Every variable of `varmap` as safetensors bytes, sorted by name (deterministic bytes).
pub(crate) fn varmap_to_safetensors(varmap: &candle_nn::VarMap) -> Result<Vec<u8>> {
    to_sorted_safetensors(named_tensors(varmap)?, None).map_err(|e| ModelError::Weights {
        path: "<memory>".into(),
        reason: format!("cannot serialise: {e}"),
    })
}
