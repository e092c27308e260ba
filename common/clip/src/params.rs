//! Named parameter tables shared by the dual encoder and the discriminator: uniform
//! `±1/√fan_in` initialisation from a seed, shape-checked lookup, safetensors round trip with
//! a metadata map (the vocabulary hash, the architecture).

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::VarMap;

use super::{ClipError, Result};
use caprl_model::model::params::{self, Init};
use caprl_model::model::CaprlRng;

/// One parameter: name, shape, fan-in of its initialisation (0 = start at zero).
pub(crate) struct Spec<'a> {
    pub name: &'a str,
    pub shape: Vec<usize>,
    pub fan_in: usize,
}

/// A fresh `VarMap` holding `specs`, drawn from `(seed, stream)`.
pub(crate) fn init(specs: &[Spec], device: &Device, seed: u64, stream: u64) -> Result<VarMap> {
    let varmap = VarMap::new();
    let mut rng = CaprlRng::with_stream(seed, stream);
    {
        let mut data = params::locked(&varmap)?;
        for s in specs {
            let n: usize = s.shape.iter().product();
            // A zero fan-in starts at zero, drawing as many values as a uniform start would.
            let bound = match s.fan_in {
                0 => Init::Uniform(0.0),
                f => Init::fan_in(f),
            };
            let vals = params::draw(bound, n, &mut rng);
            let vals: Vec<f32> = vals.into_iter().map(|x| x as f32).collect();
            let t = Tensor::from_vec(vals, s.shape.clone(), device)?;
            data.insert(s.name.to_string(), Var::from_tensor(&t)?);
        }
    }
    Ok(varmap)
}

/// The tensor `name` of `varmap`, checked to have `shape`.
pub(crate) fn get(varmap: &VarMap, name: &str, shape: &[usize], what: &str) -> Result<Tensor> {
    params::checked(varmap, name, shape).map_err(|e| ClipError::Input(format!("{what}: {e}")))
}

/// `varmap` (names sorted) as safetensors bytes with `metadata`.
pub(crate) fn to_bytes(varmap: &VarMap, metadata: HashMap<String, String>) -> Result<Vec<u8>> {
    params::to_sorted_safetensors(params::named_tensors(varmap)?, Some(metadata))
        .map_err(|e| ClipError::Input(format!("cannot serialise weights: {e}")))
}

/// Tensors (as f32 `Var`s) and metadata of safetensors `bytes`; `path` names them in errors.
pub(crate) fn from_bytes(
    bytes: &[u8],
    path: &Path,
    device: &Device,
) -> Result<(VarMap, HashMap<String, String>)> {
    let bad = |reason: String| ClipError::File {
        path: path.to_path_buf(),
        reason,
    };
    let (_, meta) = safetensors::SafeTensors::read_metadata(bytes)
        .map_err(|e| bad(format!("not a safetensors file: {e}")))?;
    let metadata = meta.metadata().clone().unwrap_or_default();
    let loaded: HashMap<String, Tensor> = candle_core::safetensors::load_buffer(bytes, device)
        .map_err(|e| bad(format!("not a safetensors file: {e}")))?;
    let varmap = VarMap::new();
    {
        let mut data = params::locked(&varmap)?;
        for (k, t) in loaded {
            data.insert(k, Var::from_tensor(&t.to_dtype(DType::F32)?)?);
        }
    }
    Ok((varmap, metadata))
}

/// Reads `path` whole, naming it in the error.
pub(crate) fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| ClipError::File {
        path: path.to_path_buf(),
        reason: format!("cannot read: {e}"),
    })
}
