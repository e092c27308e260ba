//! Weights as safetensors under the stable names listed in [`Captioner::new`].

use std::path::Path;

use candle_core::Device;

use super::captioner::Captioner;
use super::config::CaptionerConfig;
use super::error::{ModelError, Result};
use super::params::LoadedTensors;
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

/// Every variable of `varmap` as safetensors bytes, sorted by name (deterministic bytes).
pub(crate) fn varmap_to_safetensors(varmap: &candle_nn::VarMap) -> Result<Vec<u8>> {
    to_sorted_safetensors(named_tensors(varmap)?, None).map_err(|e| ModelError::Weights {
        path: "<memory>".into(),
        reason: format!("cannot serialise: {e}"),
    })
}
