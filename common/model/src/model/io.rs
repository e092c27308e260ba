//! Weights as safetensors under the stable names listed in [`Captioner::new`].

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor, Var};

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
        let loaded: HashMap<String, Tensor> = candle_core::safetensors::load_buffer(bytes, device)
            .map_err(|e| ModelError::Weights {
                path: "<memory>".into(),
                reason: format!("not a safetensors file: {e}"),
            })?;
        Captioner::from_loaded(cfg, device, &loaded)
    }
}

/// The parameter `name` of a model built from `loaded` tensors: present, floating point and of
/// `shape`, as a variable in `dtype`.
pub(crate) fn loaded_param(
    loaded: &HashMap<String, Tensor>,
    name: &str,
    shape: &[usize],
    dtype: DType,
) -> Result<Var> {
    let t = loaded.get(name).ok_or_else(|| ModelError::Weights {
        path: "<memory>".into(),
        reason: format!(
            "parameter `{name}` is missing; the file was saved from a model with a different \
             [model] config"
        ),
    })?;
    // An integer tensor would convert to float without complaint: refuse it.
    if !t.dtype().is_float() {
        return Err(ModelError::Weights {
            path: "<memory>".into(),
            reason: format!(
                "parameter `{name}` is stored as {:?}; weights are floating point",
                t.dtype()
            ),
        });
    }
    if t.dims() != shape {
        return Err(ModelError::Weights {
            path: "<memory>".into(),
            reason: format!(
                "parameter `{name}` has shape {:?}, the config implies {shape:?}",
                t.dims()
            ),
        });
    }
    Ok(Var::from_tensor(&t.to_dtype(dtype)?)?)
}

/// Every variable of `varmap` as safetensors bytes, sorted by name (deterministic bytes).
pub(crate) fn varmap_to_safetensors(varmap: &candle_nn::VarMap) -> Result<Vec<u8>> {
    to_sorted_safetensors(named_tensors(varmap)?, None).map_err(|e| ModelError::Weights {
        path: "<memory>".into(),
        reason: format!("cannot serialise: {e}"),
    })
}
