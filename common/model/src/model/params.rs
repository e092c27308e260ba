//! Named parameter tables, written once for every model: the captioners (recurrent, CRNN,
//! Transformer), the value head, and CLIP's dual encoder and discriminator.
//!
//! - [`Init`] and [`draw`]: a parameter's initial values from the seeded RNG (uniform
//!   `±bound`, PyTorch's `±1/√fan_in` or Xavier's bound, or a constant).
//! - [`locked`]: the one way into a `VarMap`'s table, with the one message for a poisoned lock.
//! - [`checked`]: a parameter by name, present and of the expected shape.
//! - [`to_sorted_safetensors`]: tensors as safetensors bytes sorted by name, so the same
//!   weights always give the same bytes (checkpoints, snapshots and their checksums).

use std::collections::HashMap;
use std::sync::MutexGuard;

use candle_core::{Tensor, Var};
use candle_nn::VarMap;

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
