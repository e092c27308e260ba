//! Where a new model's parameters come from, for every architecture: drawn from a seed, or
//! taken from loaded safetensors bytes and checked against the config. Architectures build
//! their weights through [`ParamSource`], one parameter at a time, so the draw and the load
//! follow one path.

use candle_core::safetensors::Load;
use candle_core::{DType, Device, Tensor, Var};
use safetensors::Dtype;

use super::error::{ModelError, Result};
use super::params::{self, Init};
use super::rng::CaprlRng;

/// Where a new model's parameters come from.
pub(crate) enum ParamOrigin<'a> {
    /// Drawn from this seed (each architecture's initialisation).
    Seed(u64),
    /// Taken from loaded tensors (a snapshot or a checkpoint), each checked against the config
    /// by [`loaded_param`]: nothing is drawn.
    Loaded(&'a LoadedTensors<'a>),
}

/// Hands out a model's parameters by name from a [`ParamOrigin`]: drawn in the order asked
/// (callers ask in sorted name order, so the draws follow the names alone) or loaded.
pub(crate) struct ParamSource<'a> {
    origin: &'a ParamOrigin<'a>,
    rng: CaprlRng,
    device: Device,
    dtype: DType,
}

impl<'a> ParamSource<'a> {
    /// Parameters from `origin` on `device`, as variables in `dtype`.
    pub(crate) fn new(origin: &'a ParamOrigin<'a>, device: &Device, dtype: DType) -> Self {
        let seed = match origin {
            ParamOrigin::Seed(seed) => *seed,
            ParamOrigin::Loaded(_) => 0,
        };
        Self {
            origin,
            rng: CaprlRng::new(seed),
            device: device.clone(),
            dtype,
        }
    }

    /// The parameter `name` of `shape`: drawn by `init`, or loaded and checked.
    pub(crate) fn param(&mut self, name: &str, shape: &[usize], init: Init) -> Result<Var> {
        if let ParamOrigin::Loaded(loaded) = self.origin {
            return loaded_param(loaded, name, shape, self.dtype);
        }
        let vals = params::draw(init, shape.iter().product(), &mut self.rng);
        let t = Tensor::from_vec(vals, shape, &self.device)?.to_dtype(self.dtype)?;
        Ok(Var::from_tensor(&t)?)
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
fn loaded_param(
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
