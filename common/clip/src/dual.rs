//! A small CLIP-style dual encoder of our own (paper 004 uses a pre-trained CLIP; on the
//! synthetic set and on any data set with precomputed features we train one on the captions).
//!
//! - Image tower: `f^I(i) = W₂ relu(W₁ fc(i) + b₁) + b₂` over the data set's global features.
//! - Text tower: the caption's word embeddings, mean- and max-pooled, then
//!   `f^T(x) = W₄ relu(W₃ [mean; max] + b₃) + b₄`. Pooling keeps it cheap enough that scoring a
//!   caption costs a few dot products (the reward must not be slower than CIDEr-D).
//! - A learnable temperature `exp(logit_scale)` (CLIP's parameterisation, capped at 100).
//!
//! Weights are saved as one safetensors file whose metadata records the vocabulary hash, so
//! an encoder is never used with captions of another vocabulary.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor, D};
use candle_nn::VarMap;

use super::params::{self, Spec};
use super::{ClipError, Embeddings, Encoder, Result};
use caprl_data::{Dataset, Vocab};
use caprl_model::model::{BOS, EOS, PAD};

/// Sizes of the two towers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DualConfig {
    pub vocab: usize,
    /// Width of the data set's global feature vector.
    pub fc_dim: usize,
    /// Word embedding width.
    pub embed: usize,
    /// Hidden width of both towers' MLPs.
    pub hidden: usize,
    /// Joint embedding width.
    pub dim: usize,
}

impl DualConfig {
    /// Default sizes for `data`.
    pub fn for_data(data: &Dataset) -> Self {
        Self {
            vocab: data.vocab.len(),
            fc_dim: data.fc_dim(),
            embed: 128,
            hidden: 256,
            dim: 128,
        }
    }
}

/// `ln(1/0.07)`, CLIP's initial temperature.
const LOGIT_SCALE_INIT: f32 = 2.659_26;
/// Captions embedded per forward pass.
const CHUNK: usize = 1024;

pub struct DualEncoder {
    cfg: DualConfig,
    vocab_hash: String,
    varmap: VarMap,
    device: Device,
}

impl DualEncoder {
    /// A fresh encoder for the vocabulary with hash `vocab_hash`, drawn from `seed`.
    pub fn new(cfg: DualConfig, vocab_hash: &str, device: &Device, seed: u64) -> Result<Self> {
        let varmap = params::init(&specs(&cfg), device, seed, 0x636c_6970)?;
        {
            let data = caprl_model::model::params::locked(&varmap)?;
            if let Some(v) = data.get("clip.logit_scale") {
                v.set(&Tensor::new(&[LOGIT_SCALE_INIT], device)?)?;
            }
        }
        Ok(Self {
            cfg,
            vocab_hash: vocab_hash.to_string(),
            varmap,
            device: device.clone(),
        })
    }

    pub fn config(&self) -> DualConfig {
        self.cfg
    }

    /// The trainable variables.
    pub fn varmap(&self) -> &VarMap {
        &self.varmap
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    fn t(&self, name: &str) -> Result<Tensor> {
        let shape = specs(&self.cfg)
            .into_iter()
            .find(|s| s.name == name)
            .map(|s| s.shape)
            .unwrap_or_default();
        params::get(&self.varmap, name, &shape, "dual encoder")
    }

    /// `exp(logit_scale)`, capped at 100, as a scalar tensor (with gradient).
    pub fn scale(&self) -> Result<Tensor> {
        Ok(self
            .t("clip.logit_scale")?
            .clamp(0f32, 100f32.ln())?
            .exp()?)
    }

    /// Unnormalised `f^I` of global features `fc` `[B, fc_dim]`.
    pub fn image_tower(&self, fc: &Tensor) -> Result<Tensor> {
        let h = linear(
            fc,
            &self.t("clip.img.fc1.weight")?,
            &self.t("clip.img.fc1.bias")?,
        )?;
        linear(
            &h.relu()?,
            &self.t("clip.img.fc2.weight")?,
            &self.t("clip.img.fc2.bias")?,
        )
    }

    /// Unnormalised `f^T` of token ids `[B, L]` (u32) with mask `[B, L]` (f32, ≥1 token a row).
    pub fn text_tower(&self, ids: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let (b, l) = ids.dims2()?;
        let emb = self
            .t("clip.tok.weight")?
            .index_select(&ids.flatten_all()?, 0)?
            .reshape((b, l, self.cfg.embed))?;
        let m = mask.unsqueeze(2)?;
        let count = mask.sum_keepdim(1)?.maximum(1f32)?;
        let mean = emb.broadcast_mul(&m)?.sum(1)?.broadcast_div(&count)?;
        let max = emb.broadcast_add(&((m - 1f64)? * 1e4f64)?)?.max(1)?;
        let pooled = Tensor::cat(&[&mean, &max], D::Minus1)?;
        let h = linear(
            &pooled,
            &self.t("clip.txt.fc1.weight")?,
            &self.t("clip.txt.fc1.bias")?,
        )?;
        linear(
            &h.relu()?,
            &self.t("clip.txt.fc2.weight")?,
            &self.t("clip.txt.fc2.bias")?,
        )
    }

    /// Saves weights and the vocabulary hash to `path`.
    pub fn save(&self, path: &Path) -> Result<()> {
        let bytes = params::to_bytes(&self.varmap, self.metadata())?;
        caprl_data::atomic::write_atomic(path, &bytes).map_err(|e| ClipError::File {
            path: path.to_path_buf(),
            reason: format!("cannot write: {e}"),
        })
    }

    fn metadata(&self) -> HashMap<String, String> {
        let c = &self.cfg;
        HashMap::from([
            ("format".into(), "caprl-dual-encoder-1".into()),
            ("vocab_hash".into(), self.vocab_hash.clone()),
            (
                "sizes".into(),
                format!(
                    "{} {} {} {} {}",
                    c.vocab, c.fc_dim, c.embed, c.hidden, c.dim
                ),
            ),
        ])
    }

    /// An encoder saved by [`DualEncoder::save`], checked against `vocab`.
    pub fn load(path: &Path, vocab: &Vocab) -> Result<Self> {
        let bytes = params::read(path)?;
        let meta = params::metadata(&bytes, path)?;
        let bad = |reason: String| ClipError::File {
            path: path.to_path_buf(),
            reason,
        };
        if meta.get("format").map(String::as_str) != Some("caprl-dual-encoder-1") {
            return Err(bad(
                "not a dual encoder written by `caprl clip train` (for a Hugging Face CLIP \
                 checkpoint pass its directory)"
                    .into(),
            ));
        }
        let hash = meta.get("vocab_hash").cloned().unwrap_or_default();
        caprl_data::check_made_for(&hash, vocab.hash()).map_err(|e| {
            bad(format!(
                "{e}: train one on this data set with `caprl clip train`"
            ))
        })?;
        let sizes: Vec<usize> = meta
            .get("sizes")
            .map(|s| s.split(' ').filter_map(|x| x.parse().ok()).collect())
            .unwrap_or_default();
        let [vocab_n, fc_dim, embed, hidden, dim] = sizes[..] else {
            return Err(bad("metadata `sizes` is missing or malformed".into()));
        };
        let cfg = DualConfig {
            vocab: vocab_n,
            fc_dim,
            embed,
            hidden,
            dim,
        };
        let loaded = params::parse(&bytes, path)?;
        Ok(Self {
            cfg,
            vocab_hash: hash,
            varmap: params::load(&specs(&cfg), &loaded, path)?,
            device: Device::Cpu,
        })
    }
}

/// `x Wᵀ + b`.
fn linear(x: &Tensor, w: &Tensor, b: &Tensor) -> Result<Tensor> {
    Ok(x.matmul(&w.t()?)?.broadcast_add(b)?)
}

/// Caption ids → `[B, L]` ids and mask: tokens up to EOS, specials dropped; an empty caption
/// becomes one PAD token (its own learned embedding).
pub(crate) fn batch_captions(captions: &[Vec<u32>], device: &Device) -> Result<(Tensor, Tensor)> {
    let clean: Vec<Vec<u32>> = captions
        .iter()
        .map(|c| {
            let mut w: Vec<u32> = c
                .iter()
                .copied()
                .take_while(|&t| t != EOS)
                .filter(|&t| t != PAD && t != BOS)
                .collect();
            if w.is_empty() {
                w.push(PAD);
            }
            w
        })
        .collect();
    let l = clean.iter().map(Vec::len).max().unwrap_or(1);
    let mut ids = vec![PAD; clean.len() * l];
    let mut mask = vec![0f32; clean.len() * l];
    for (i, c) in clean.iter().enumerate() {
        ids[i * l..i * l + c.len()].copy_from_slice(c);
        mask[i * l..i * l + c.len()]
            .iter_mut()
            .for_each(|m| *m = 1.0);
    }
    Ok((
        Tensor::from_vec(ids, (clean.len(), l), device)?,
        Tensor::from_vec(mask, (clean.len(), l), device)?,
    ))
}

impl Encoder for DualEncoder {
    fn dim(&self) -> usize {
        self.cfg.dim
    }

    fn embed_captions(&self, captions: &[Vec<u32>]) -> Result<Embeddings> {
        let mut out = Vec::with_capacity(captions.len() * self.cfg.dim);
        for chunk in captions.chunks(CHUNK) {
            if let Some(bad) = chunk
                .iter()
                .flatten()
                .find(|&&t| t as usize >= self.cfg.vocab)
            {
                return Err(ClipError::Input(format!(
                    "token id {bad} is outside the encoder's vocabulary of {}",
                    self.cfg.vocab
                )));
            }
            let (ids, mask) = batch_captions(chunk, &self.device)?;
            let f = self.text_tower(&ids, &mask)?.detach();
            out.extend(f.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?);
        }
        Ok(Embeddings::normalised(self.cfg.dim, out))
    }

    fn embed_images(&self, data: &Dataset, rows: &[usize]) -> Result<Embeddings> {
        if data.fc_dim() != self.cfg.fc_dim {
            return Err(ClipError::Input(format!(
                "the dual encoder was trained on {}-d features, this data set has {}-d ones",
                self.cfg.fc_dim,
                data.fc_dim()
            )));
        }
        let mut out = Vec::with_capacity(rows.len() * self.cfg.dim);
        for chunk in rows.chunks(CHUNK) {
            let fc = Tensor::from_vec(
                data.fc_rows(chunk)?,
                (chunk.len(), self.cfg.fc_dim),
                &self.device,
            )?;
            let f = self.image_tower(&fc)?.detach();
            out.extend(f.flatten_all()?.to_vec1::<f32>()?);
        }
        Ok(Embeddings::normalised(self.cfg.dim, out))
    }
}

fn specs(c: &DualConfig) -> Vec<Spec<'static>> {
    let s = |name, shape: Vec<usize>, fan_in| Spec {
        name,
        shape,
        fan_in,
    };
    vec![
        s("clip.tok.weight", vec![c.vocab, c.embed], 1),
        s("clip.img.fc1.weight", vec![c.hidden, c.fc_dim], c.fc_dim),
        s("clip.img.fc1.bias", vec![c.hidden], c.fc_dim),
        s("clip.img.fc2.weight", vec![c.dim, c.hidden], c.hidden),
        s("clip.img.fc2.bias", vec![c.dim], c.hidden),
        s(
            "clip.txt.fc1.weight",
            vec![c.hidden, 2 * c.embed],
            2 * c.embed,
        ),
        s("clip.txt.fc1.bias", vec![c.hidden], 2 * c.embed),
        s("clip.txt.fc2.weight", vec![c.dim, c.hidden], c.hidden),
        s("clip.txt.fc2.bias", vec![c.dim], c.hidden),
        s("clip.logit_scale", vec![1], 0),
    ]
}
