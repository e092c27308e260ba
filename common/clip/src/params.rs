//! The dual encoder's and the discriminator's parameter tables, built by caprl-model's one
//! table builder (`ParamSource`): uniform `±1/√fan_in` initialisation from a seed or checked
//! loading, shape-checked lookup, safetensors round trip with a metadata map (the vocabulary
//! hash, the architecture).

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarMap;

use super::{ClipError, Result};
use caprl_model::model::params::{self, Init, LoadedTensors, ParamOrigin, ParamSource};
use caprl_model::model::ModelError;

/// One parameter: name, shape, fan-in of its initialisation (0 = start at zero).
pub(crate) struct Spec<'a> {
    pub name: &'a str,
    pub shape: Vec<usize>,
    pub fan_in: usize,
}

impl Spec<'_> {
    /// The entry of a parameter table: a zero fan-in starts at zero, drawing as many values as
    /// a uniform start would.
    fn entry(&self) -> (String, Vec<usize>, Init) {
        let init = match self.fan_in {
            0 => Init::Uniform(0.0),
            f => Init::fan_in(f),
        };
        (self.name.to_string(), self.shape.clone(), init)
    }
}

/// A fresh `VarMap` holding `specs`, drawn from `(seed, stream)`.
pub(crate) fn init(specs: &[Spec], device: &Device, seed: u64, stream: u64) -> Result<VarMap> {
    let origin = ParamOrigin::Seed(seed);
    let mut source = ParamSource::new(&origin, device, DType::F32).on_stream(stream);
    Ok(source.table(specs.iter().map(Spec::entry))?)
}

/// The tensors of safetensors `bytes`, read only when a table asks for them; `path` names them
/// in errors.
pub(crate) fn parse<'a>(bytes: &'a [u8], path: &Path) -> Result<LoadedTensors<'a>> {
    LoadedTensors::parse(bytes, &Device::Cpu).map_err(|e| in_file(e, path))
}

/// The table of `specs` taken from `loaded` (the tensors of file `path`), each checked by
/// name, dtype and shape.
pub(crate) fn load(specs: &[Spec], loaded: &LoadedTensors, path: &Path) -> Result<VarMap> {
    let origin = ParamOrigin::Loaded(loaded);
    let mut source = ParamSource::new(&origin, &Device::Cpu, DType::F32);
    source
        .table(specs.iter().map(Spec::entry))
        .map_err(|e| in_file(e, path))
}

/// A model error about weights, told of file `path`.
fn in_file(e: ModelError, path: &Path) -> ClipError {
    match e {
        ModelError::Weights { reason, .. } => ClipError::File {
            path: path.to_path_buf(),
            reason,
        },
        other => other.into(),
    }
}

/// The metadata of safetensors `bytes`; `path` names them in errors.
pub(crate) fn metadata(bytes: &[u8], path: &Path) -> Result<HashMap<String, String>> {
    let (_, meta) =
        safetensors::SafeTensors::read_metadata(bytes).map_err(|e| ClipError::File {
            path: path.to_path_buf(),
            reason: format!("not a safetensors file: {e}"),
        })?;
    Ok(meta.metadata().clone().unwrap_or_default())
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

/// Reads `path` whole, naming it in the error.
pub(crate) fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| ClipError::File {
        path: path.to_path_buf(),
        reason: format!("cannot read: {e}"),
    })
}
