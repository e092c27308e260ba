//! Named parameter tables, written once for every model: the captioners (recurrent, CRNN,
//! Transformer), the value head, and CLIP's dual encoder and discriminator.
//!
//! - [`Init`] and [`draw`]: a parameter's initial values from the seeded RNG (uniform
//!   `±bound`, PyTorch's `±1/√fan_in` or Xavier's bound, or a constant).
//! - [`ParamOrigin`], [`ParamSource`]: where a new model's parameters come from (drawn from a
//!   seed, or loaded from safetensors bytes and checked by name, dtype and shape) and the one
//!   loop that builds a model's table from (name, shape, [`Init`]) specs.
//! - [`locked`]: the one way into a `VarMap`'s table, with the one message for a poisoned lock.
//! - [`checked`]: a parameter by name, present and of the expected shape.
//! - [`to_sorted_safetensors`]: tensors as safetensors bytes sorted by name, so the same
//!   weights always give the same bytes (checkpoints, snapshots and their checksums).

use std::collections::HashMap;
use std::sync::MutexGuard;

use candle_core::safetensors::Load;
use candle_core::{DType, Device, Tensor, Var};
use candle_nn::VarMap;
use safetensors::Dtype;

use super::error::{ModelError, Result as ModelResult};
use super::rng::CaprlRng;

/// How a parameter starts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Init {
    /// Uniform in `[−bound, bound)`, one draw per value in row-major order.
    Uniform(f64),
    /// Every value `c`; nothing is drawn.
    Const(f64),
}

impl Init {
    /// PyTorch's default for linear and recurrent layers: uniform `±1/√fan_in` (a zero fan-in
    /// counts as one).
    pub fn fan_in(fan_in: usize) -> Init {
        Init::Uniform(1.0 / (fan_in.max(1) as f64).sqrt())
    }

    /// Xavier (Glorot) uniform: `±√(6 / (fan_in + fan_out))`.
    pub fn xavier(fan_in: usize, fan_out: usize) -> Init {
        Init::Uniform((6.0 / (fan_in + fan_out) as f64).sqrt())
    }
}

/// The `n` initial values of a parameter, drawn from `rng` when `init` is uniform.
pub fn draw(init: Init, n: usize, rng: &mut CaprlRng) -> Vec<f64> {
    match init {
        Init::Uniform(bound) => (0..n)
            .map(|_| (2.0 * rng.uniform_open() - 1.0) * bound)
            .collect(),
        Init::Const(c) => vec![c; n],
    }
}

/// A `VarMap`'s lock was poisoned: a thread panicked while it held the table.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("a parameter table's lock was poisoned by a panic in another thread")]
pub struct Poisoned;

impl From<Poisoned> for ModelError {
    fn from(e: Poisoned) -> Self {
        ModelError::Internal(e.to_string())
    }
}

/// The parameter table of `varmap`.
pub fn locked(varmap: &VarMap) -> Result<MutexGuard<'_, HashMap<String, Var>>, Poisoned> {
    varmap.data().lock().map_err(|_| Poisoned)
}

/// Why [`checked`] found no usable parameter.
#[derive(Debug, thiserror::Error)]
pub enum Lookup {
    #[error(transparent)]
    Poisoned(#[from] Poisoned),
    #[error("tensor `{0}` is missing")]
    Missing(String),
    #[error("tensor `{name}` has shape {found:?}, expected {expected:?}")]
    Shape {
        name: String,
        found: Vec<usize>,
        expected: Vec<usize>,
    },
}

/// The tensor `name` of `varmap`, checked to have `shape`.
pub fn checked(varmap: &VarMap, name: &str, shape: &[usize]) -> Result<Tensor, Lookup> {
    let data = locked(varmap)?;
    let t = data
        .get(name)
        .ok_or_else(|| Lookup::Missing(name.to_string()))?
        .as_tensor()
        .clone();
    if t.dims() != shape {
        return Err(Lookup::Shape {
            name: name.to_string(),
            found: t.dims().to_vec(),
            expected: shape.to_vec(),
        });
    }
    Ok(t)
}

/// Every variable of `varmap` as `(name, tensor)` pairs.
pub fn named_tensors(varmap: &VarMap) -> Result<Vec<(String, Tensor)>, Poisoned> {
    Ok(locked(varmap)?
        .iter()
        .map(|(k, v)| (k.clone(), v.as_tensor().clone()))
        .collect())
}

/// `named` as safetensors bytes with `metadata`, sorted by name: the same weights always give
/// the same bytes.
pub fn to_sorted_safetensors(
    mut named: Vec<(String, Tensor)>,
    metadata: Option<HashMap<String, String>>,
) -> Result<Vec<u8>, safetensors::SafeTensorError> {
    named.sort_by(|a, b| a.0.cmp(&b.0));
    safetensors::tensor::serialize(named, metadata)
}

/// Hands out one parameter of a model by name, shape and initialisation: what a model's
/// `visit` asks for each parameter it has, so that its names are written once.
pub(crate) type ParamFn<'a> = dyn FnMut(&str, &[usize], Init) -> ModelResult<Var> + 'a;

/// The (name, shape, initialisation) of every parameter `visit` asks for, in its order.
pub(crate) fn specs_of<T>(
    visit: impl FnOnce(&mut ParamFn) -> ModelResult<T>,
) -> ModelResult<Vec<(String, Vec<usize>, Init)>> {
    let mut specs = Vec::new();
    // What the model builds from the placeholders is dropped: only the names count here.
    let placeholder = Var::from_tensor(&Tensor::zeros(0, DType::F32, &Device::Cpu)?)?;
    visit(&mut |name, shape, init| {
        specs.push((name.to_string(), shape.to_vec(), init));
        Ok(placeholder.clone())
    })?;
    Ok(specs)
}

/// A model's parameters looked up by name in `varmap` (one that holds them all, such as the
/// table [`ParamSource::table`] built from the same `visit`).
pub(crate) fn lookup_in<'v>(
    varmap: &'v VarMap,
) -> ModelResult<impl FnMut(&str, &[usize], Init) -> ModelResult<Var> + 'v> {
    let data = locked(varmap)?;
    Ok(move |name: &str, _: &[usize], _: Init| {
        data.get(name)
            .cloned()
            .ok_or_else(|| ModelError::Internal(format!("missing parameter `{name}`")))
    })
}

/// Where a new model's parameters come from.
pub enum ParamOrigin<'a> {
    /// Drawn from this seed (each architecture's initialisation).
    Seed(u64),
    /// Taken from loaded tensors (a snapshot or a checkpoint), each checked against the config
    /// by name, dtype and shape ([`ParamSource::param`]): nothing is drawn.
    Loaded(&'a LoadedTensors<'a>),
}

/// Hands out a model's parameters by name from a [`ParamOrigin`]: drawn in the order asked
/// (callers ask in sorted name order, so the draws follow the names alone) or loaded.
pub struct ParamSource<'a> {
    origin: &'a ParamOrigin<'a>,
    rng: CaprlRng,
    device: Device,
    dtype: DType,
}

impl<'a> ParamSource<'a> {
    /// Parameters from `origin` on `device`, as variables in `dtype`.
    pub fn new(origin: &'a ParamOrigin<'a>, device: &Device, dtype: DType) -> Self {
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

    /// Draws from stream `stream` of the seed instead of stream 0 (a model whose draws must not
    /// repeat another's from the same seed); loading ignores it.
    pub fn on_stream(mut self, stream: u64) -> Self {
        if let ParamOrigin::Seed(seed) = self.origin {
            self.rng = CaprlRng::with_stream(*seed, stream);
        }
        self
    }

    /// A new table of the parameters `specs` (name, shape, initialisation), drawn in the order
    /// given or loaded: the one init loop of every model.
    pub fn table(
        &mut self,
        specs: impl IntoIterator<Item = (String, Vec<usize>, Init)>,
    ) -> ModelResult<VarMap> {
        let varmap = VarMap::new();
        {
            let mut data = locked(&varmap)?;
            for (name, shape, init) in specs {
                let var = self.param(&name, &shape, init)?;
                data.insert(name, var);
            }
        }
        Ok(varmap)
    }

    /// The parameter `name` of `shape`: drawn by `init`, or loaded and checked.
    pub fn param(&mut self, name: &str, shape: &[usize], init: Init) -> ModelResult<Var> {
        if let ParamOrigin::Loaded(loaded) = self.origin {
            return loaded_param(loaded, name, shape, self.dtype);
        }
        let vals = draw(init, shape.iter().product(), &mut self.rng);
        let t = Tensor::from_vec(vals, shape, &self.device)?.to_dtype(self.dtype)?;
        Ok(Var::from_tensor(&t)?)
    }
}

/// The tensors of a safetensors buffer, each copied out only when a model asks for it, straight
/// into its variable: a snapshot's bytes are read once, not into tensors and then into variables.
pub struct LoadedTensors<'a> {
    file: safetensors::SafeTensors<'a>,
    device: Device,
}

impl<'a> LoadedTensors<'a> {
    /// Reads the header of `bytes`; the tensors stay where they are.
    pub fn parse(bytes: &'a [u8], device: &Device) -> ModelResult<Self> {
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

    /// The shape of tensor `name`, if the buffer holds it.
    pub fn shape(&self, name: &str) -> Option<Vec<usize>> {
        self.file.tensor(name).ok().map(|v| v.shape().to_vec())
    }
}

/// The parameter `name` of a model built from `loaded` tensors: present, floating point and of
/// `shape`, as a variable in `dtype`.
fn loaded_param(
    loaded: &LoadedTensors<'_>,
    name: &str,
    shape: &[usize],
    dtype: DType,
) -> ModelResult<Var> {
    let refuse = |reason: String| ModelError::Weights {
        path: "<memory>".into(),
        reason,
    };
    let view = loaded.file.tensor(name).map_err(|_| {
        refuse(format!(
            "parameter `{name}` is missing; the file was saved from a model of another kind or \
             size"
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
            "parameter `{name}` has shape {:?}, the model's size implies {shape:?}",
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

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn draws_follow_the_rng_and_bounds() {
        let mut a = CaprlRng::new(3);
        let mut b = CaprlRng::new(3);
        let xs = draw(Init::fan_in(4), 100, &mut a);
        assert!(xs.iter().all(|x| x.abs() < 0.5), "±1/√4");
        let again: Vec<f64> = (0..100)
            .map(|_| (2.0 * b.uniform_open() - 1.0) * 0.5)
            .collect();
        assert_eq!(xs, again, "one draw per value, in order");
        assert_eq!(draw(Init::Const(1.5), 3, &mut a), vec![1.5; 3]);
        assert_eq!(Init::fan_in(0), Init::Uniform(1.0));
        assert_eq!(Init::xavier(2, 4), Init::Uniform(1.0));
    }

    #[test]
    fn lookups_name_what_is_missing_or_misshapen_and_saves_are_sorted() {
        let varmap = VarMap::new();
        {
            let mut data = locked(&varmap).unwrap();
            for name in ["b", "a"] {
                let t = Tensor::zeros((2, 3), candle_core::DType::F32, &Device::Cpu).unwrap();
                data.insert(name.to_string(), Var::from_tensor(&t).unwrap());
            }
        }
        assert!(checked(&varmap, "a", &[2, 3]).is_ok());
        let missing = checked(&varmap, "c", &[2, 3]).unwrap_err().to_string();
        assert_eq!(missing, "tensor `c` is missing");
        let shape = checked(&varmap, "a", &[3, 2]).unwrap_err().to_string();
        assert!(
            shape.contains("[2, 3]") && shape.contains("[3, 2]"),
            "{shape}"
        );
        let named = named_tensors(&varmap).unwrap();
        let mut reversed = named.clone();
        reversed.reverse();
        assert_eq!(
            to_sorted_safetensors(named, None).unwrap(),
            to_sorted_safetensors(reversed, None).unwrap()
        );
    }
}
