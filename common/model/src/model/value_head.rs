//! A value head: a two-layer MLP on the decoder's top hidden state estimating the return
//! expected from that state, `v(s_t) = w₂ᵀ relu(W₁ h_t + b₁) + b₂`.
//!
//! It is the learned baseline `b_φ(s_t)` of Monte-Carlo-rollout policy gradient (paper 003) and
//! the critic `v_θ(s_t)` of actor-critic training and lookahead inference (paper 001). It reads
//! the hidden states *detached*: trained by MSE to its targets, it never sends gradient into the
//! decoder. Its weights live in their own [`VarMap`] (names `value.fc1.weight`, `value.fc1.bias`,
//! `value.fc2.weight`, `value.fc2.bias`) and are saved beside the captioner's.

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarMap;

use super::error::{ModelError, Result};
use super::io::varmap_to_safetensors;
use super::params::{self, Init, LoadedTensors, ParamOrigin, ParamSource};

/// Width of the MLP's hidden layer.
pub const VALUE_WIDTH: usize = 256;

/// The random stream of the head's initial draws (its own, so that they never repeat the
/// captioner's from the same seed).
const VALUE_STREAM: u64 = 0x7661_6c75;

pub struct ValueHead {
    varmap: VarMap,
    hidden: usize,
    w1: Tensor,
    b1: Tensor,
    w2: Tensor,
    b2: Tensor,
}

impl ValueHead {
    /// A fresh head for decoder hidden size `hidden`, drawn from `seed` (uniform `±1/√fan_in`).
    pub fn new(hidden: usize, device: &Device, seed: u64) -> Result<Self> {
        Self::build(hidden, &ParamOrigin::Seed(seed), device)
    }

    /// A head for hidden size `hidden` with its parameters from `origin`.
    fn build(hidden: usize, origin: &ParamOrigin, device: &Device) -> Result<Self> {
        let specs = [
            ("value.fc1.bias", vec![VALUE_WIDTH], hidden),
            ("value.fc1.weight", vec![VALUE_WIDTH, hidden], hidden),
            ("value.fc2.bias", vec![1], VALUE_WIDTH),
            ("value.fc2.weight", vec![1, VALUE_WIDTH], VALUE_WIDTH),
        ]
        .map(|(name, shape, fan_in)| (name.to_string(), shape, Init::fan_in(fan_in)));
        let varmap = ParamSource::new(origin, device, DType::F32)
            .on_stream(VALUE_STREAM)
            .table(specs)?;
        Self::from_varmap(varmap, hidden)
    }

    fn from_varmap(varmap: VarMap, hidden: usize) -> Result<Self> {
        let get = |name: &str, shape: &[usize]| -> Result<Tensor> {
            params::checked(&varmap, name, shape).map_err(|e| ModelError::Weights {
                path: "<value head>".into(),
                reason: format!("{e} (a value head for hidden size {hidden})"),
            })
        };
        let w1 = get("value.fc1.weight", &[VALUE_WIDTH, hidden])?;
        let b1 = get("value.fc1.bias", &[VALUE_WIDTH])?;
        let w2 = get("value.fc2.weight", &[1, VALUE_WIDTH])?;
        let b2 = get("value.fc2.bias", &[1])?;
        Ok(Self {
            varmap,
            hidden,
            w1,
            b1,
            w2,
            b2,
        })
    }

    /// The trainable variables (the head's own optimizer steps them).
    pub fn varmap(&self) -> &VarMap {
        &self.varmap
    }

    /// `v(s)` for hidden states `[.., H]` (any leading shape), returned as `[..]` in f32.
    /// The input is detached here, so no gradient of the value loss reaches the decoder.
    pub fn forward(&self, hidden: &Tensor) -> Result<Tensor> {
        let dims = hidden.dims().to_vec();
        let h = *dims.last().unwrap_or(&0);
        if h != self.hidden {
            return Err(ModelError::Input(format!(
                "value head expects hidden states of size {}, got {h}",
                self.hidden
            )));
        }
        let rows: usize = dims[..dims.len() - 1].iter().product();
        let x = hidden.detach().to_dtype(DType::F32)?.reshape((rows, h))?;
        let a = x.matmul(&self.w1.t()?)?.broadcast_add(&self.b1)?.relu()?;
        let v = a.matmul(&self.w2.t()?)?.broadcast_add(&self.b2)?;
        Ok(v.reshape(&dims[..dims.len() - 1])?)
    }

    /// The weights as safetensors bytes.
    pub fn to_safetensors(&self) -> Result<Vec<u8>> {
        varmap_to_safetensors(&self.varmap)
    }

    /// A head for hidden size `hidden` with the weights of `path` (written by
    /// [`ValueHead::to_safetensors`]).
    pub fn load(path: &Path, hidden: usize, device: &Device) -> Result<Self> {
        let weights_err = |reason: String| ModelError::Weights {
            path: path.to_path_buf(),
            reason,
        };
        let bytes = std::fs::read(path).map_err(|e| weights_err(format!("cannot read: {e}")))?;
        let loaded = LoadedTensors::parse(&bytes, device);
        let head = loaded.and_then(|l| Self::build(hidden, &ParamOrigin::Loaded(&l), device));
        head.map_err(|e| match e {
            ModelError::Weights { reason, .. } => weights_err(reason),
            other => other,
        })
    }
}
