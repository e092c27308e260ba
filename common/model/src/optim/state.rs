//! Saving and restoring AdamW state: one safetensors file with `m.<name>` and `v.<name>` tensors
//! and a JSON header (step count, hyper-parameters, parameter names) in its metadata.

use std::collections::HashMap;
use std::path::Path;

use candle_core::Tensor;
use serde::{Deserialize, Serialize};

use super::adamw::{AdamW, AdamWParams};
use super::error::{OptimError, Result};

const HEADER_KEY: &str = "caprl.adamw";

#[derive(Serialize, Deserialize)]
struct Header {
    step: u64,
    beta1: f64,
    beta2: f64,
    eps: f64,
    weight_decay: f64,
    names: Vec<String>,
}

impl AdamW {
    /// Writes the step count, hyper-parameters and both moments of every parameter to `path`.
    pub fn save(&self, path: &Path) -> Result<()> {
        let bytes = self.to_bytes().map_err(|e| match e {
            OptimError::State { reason, .. } => OptimError::State {
                path: path.to_path_buf(),
                reason,
            },
            other => other,
        })?;
        std::fs::write(path, bytes).map_err(|e| OptimError::State {
            path: path.to_path_buf(),
            reason: format!("cannot write: {e}"),
        })
    }

    /// What [`AdamW::save`] writes, as bytes (for checkpoints assembled in memory).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let err = |reason: String| OptimError::State {
            path: "<memory>".into(),
            reason,
        };
        let header = Header {
            step: self.t,
            beta1: self.params.beta1,
            beta2: self.params.beta2,
            eps: self.params.eps,
            weight_decay: self.params.weight_decay,
            names: self.slots.iter().map(|s| s.name.clone()).collect(),
        };
        let json = serde_json::to_string(&header).map_err(|e| err(e.to_string()))?;
        // A hand-off point: the moments leave the device only after every queued update.
        if let Some(s) = self.slots.first() {
            s.m.device().synchronize()?;
        }
        let mut meta = HashMap::new();
        meta.insert(HEADER_KEY.to_string(), json);
        let mut tensors: Vec<(String, Tensor)> = Vec::with_capacity(2 * self.slots.len());
        for s in &self.slots {
            tensors.push((format!("m.{}", s.name), s.m.clone()));
            tensors.push((format!("v.{}", s.name), s.v.clone()));
        }
        safetensors::tensor::serialize(tensors, Some(meta))
            .map_err(|e| err(format!("cannot serialise: {e}")))
    }

    /// Restores state saved by [`AdamW::save`] into this optimizer (built over the same
    /// `VarMap`); every parameter must be present with the same shape.
    pub fn load(&mut self, path: &Path) -> Result<()> {
        let err = |reason: String| OptimError::State {
            path: path.to_path_buf(),
            reason,
        };
        let bytes = std::fs::read(path).map_err(|e| err(format!("cannot read: {e}")))?;
        let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes)
            .map_err(|e| err(format!("not a safetensors file: {e}")))?;
        let json = meta
            .metadata()
            .as_ref()
            .and_then(|m| m.get(HEADER_KEY))
            .ok_or_else(|| {
                err(format!(
                    "no `{HEADER_KEY}` header: not an optimizer state file"
                ))
            })?;
        let header: Header =
            serde_json::from_str(json).map_err(|e| err(format!("bad header: {e}")))?;
        let device = match self.slots.first() {
            Some(s) => s.var.device().clone(),
            None => candle_core::Device::Cpu,
        };
        let tensors = candle_core::safetensors::load_buffer(&bytes, &device)?;
        let mut restored = Vec::with_capacity(self.slots.len());
        for s in &self.slots {
            let get = |k: String| -> Result<Tensor> {
                let t = tensors.get(&k).ok_or_else(|| {
                    err(format!(
                        "missing `{k}`: the state was saved for a different model"
                    ))
                })?;
                if t.dims() != s.var.dims() {
                    return Err(err(format!(
                        "`{k}` has shape {:?}, the parameter has {:?}",
                        t.dims(),
                        s.var.dims()
                    )));
                }
                Ok(t.to_dtype(s.var.dtype())?)
            };
            restored.push((get(format!("m.{}", s.name))?, get(format!("v.{}", s.name))?));
        }
        for (s, (m, v)) in self.slots.iter_mut().zip(restored) {
            s.m = m;
            s.v = v;
        }
        self.t = header.step;
        self.params = AdamWParams {
            beta1: header.beta1,
            beta2: header.beta2,
            eps: header.eps,
            weight_decay: header.weight_decay,
        };
        Ok(())
    }
}
