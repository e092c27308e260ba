//! The discriminator of paper 004 (§3.2): `P_D(x) = σ(MLP([f^T(x); f^I(i)]))`, a 3-layer MLP on
//! the frozen encoder's text and image embeddings that tells ground-truth captions of an image
//! from generated ones. Its probability is the `disc` reward (`r_regu`); it is pre-trained on
//! GT vs beam captions of the XE model and trained online at every learner iteration on that
//! batch's GT and generated captions, so it adapts to what the policy currently produces
//! (repetitions, stock phrases) that a fixed fluency model would miss. The encoder is never
//! fine-tuned (§3.2: no mismatch between the rewarded and the evaluated retrieval model).
//!
//! Its weights (`disc.fc{1,2,3}.{weight,bias}`) ride along in the policy snapshot, beside the
//! captioner's, so reward workers always score with the learner's current `D`.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarMap;

use super::disc_scorer::DiscScorer;
use super::params::{self, Spec};
use super::{ClipError, Embeddings, Result};
use caprl_model::optim::AdamW;

/// Hidden width of a fresh MLP. Paper 004 asks for "a very simple MLP" without a width; 32
/// units over 128-d embeddings keep the `clip` + `disc` reward as cheap per caption as CIDEr-D
/// (`caprl bench clip`) and, trained at `clip.disc_lr` 1e-3, still track the policy online.
/// A loaded discriminator keeps the width of its weights.
pub const DISC_HIDDEN: usize = 32;
const NAMES: [&str; 6] = [
    "disc.fc1.weight",
    "disc.fc1.bias",
    "disc.fc2.weight",
    "disc.fc2.bias",
    "disc.fc3.weight",
    "disc.fc3.bias",
];

pub struct Discriminator {
    /// Embedding width of the encoder it reads.
    dim: usize,
    hidden: usize,
    varmap: VarMap,
    device: Device,
}

/// What one training step saw.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DiscStats {
    /// Binary cross-entropy.
    pub loss: f32,
    /// Fraction classified right at 0.5.
    pub accuracy: f32,
    /// Mean `P_D` of the real (GT) and the generated captions.
    pub p_real: f32,
    pub p_fake: f32,
}

/// A batch of (caption, image) embedding pairs; `images[i]` goes with `texts[i]`.
pub struct Pairs<'a> {
    pub texts: &'a Embeddings,
    pub images: &'a Embeddings,
}

impl Discriminator {
    /// A fresh discriminator over `dim`-d embeddings, drawn from `seed`.
    pub fn new(dim: usize, device: &Device, seed: u64) -> Result<Self> {
        let varmap = params::init(&specs(dim, DISC_HIDDEN), device, seed, 0x6469_7363)?;
        Ok(Self {
            dim,
            hidden: DISC_HIDDEN,
            varmap,
            device: device.clone(),
        })
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    pub fn varmap(&self) -> &VarMap {
        &self.varmap
    }

    fn t(&self, i: usize) -> Result<Tensor> {
        let s = &specs(self.dim, self.hidden)[i];
        params::get(&self.varmap, s.name, &s.shape, "discriminator")
    }

    /// Logits `[N]` for embedding pairs.
    fn logits(&self, pairs: &Pairs) -> Result<Tensor> {
        let n = pairs.texts.len();
        if pairs.images.len() != n || pairs.texts.dim != self.dim || pairs.images.dim != self.dim {
            return Err(ClipError::Input(format!(
                "discriminator over {}-d embeddings got {} texts of {} and {} images of {}",
                self.dim,
                n,
                pairs.texts.dim,
                pairs.images.len(),
                pairs.images.dim
            )));
        }
        let t = Tensor::from_slice(&pairs.texts.data, (n, self.dim), &self.device)?;
        let i = Tensor::from_slice(&pairs.images.data, (n, self.dim), &self.device)?;
        let mut x = Tensor::cat(&[&t, &i], 1)?;
        for layer in 0..3 {
            let w = self.t(2 * layer)?;
            let b = self.t(2 * layer + 1)?;
            x = x.matmul(&w.t()?)?.broadcast_add(&b)?;
            if layer < 2 {
                x = x.relu()?;
            }
        }
        Ok(x.squeeze(1)?)
    }

    /// `P_D` of each pair.
    pub fn probabilities(&self, pairs: &Pairs) -> Result<Vec<f32>> {
        if pairs.texts.is_empty() {
            return Ok(Vec::new());
        }
        let p = candle_nn::ops::sigmoid(&self.logits(pairs)?.detach())?;
        Ok(p.to_dtype(DType::F32)?.to_vec1()?)
    }

    /// One step of binary cross-entropy: `real` pairs are labelled 1, `fake` ones 0.
    pub fn train_step(
        &self,
        opt: &mut AdamW,
        real: &Pairs,
        fake: &Pairs,
        lr: f64,
    ) -> Result<DiscStats> {
        let (nr, nf) = (real.texts.len(), fake.texts.len());
        if nr == 0 || nf == 0 {
            return Ok(DiscStats::default());
        }
        let logits = Tensor::cat(&[&self.logits(real)?, &self.logits(fake)?], 0)?;
        let mut labels = vec![1f32; nr];
        labels.extend(std::iter::repeat_n(0f32, nf));
        let y = Tensor::from_vec(labels, nr + nf, &self.device)?;
        // Each class weighs half, whatever the counts.
        let mut w = vec![0.5 / nr as f32; nr];
        w.extend(std::iter::repeat_n(0.5 / nf as f32, nf));
        let w = Tensor::from_vec(w, nr + nf, &self.device)?;
        // BCE with logits: softplus(z) − y·z, computed stably.
        let z = &logits;
        let softplus = (z.relu()? + (z.abs()?.neg()?.exp()? + 1.0)?.log()?)?;
        let loss = ((softplus - (z * &y)?)? * &w)?.sum_all()?;
        let grads = loss.backward()?;
        opt.step(&grads, lr)
            .map_err(|e| ClipError::Input(format!("discriminator optimizer: {e}")))?;
        let p: Vec<f32> = candle_nn::ops::sigmoid(&logits.detach())?.to_vec1()?;
        let correct = p[..nr].iter().filter(|&&x| x >= 0.5).count()
            + p[nr..].iter().filter(|&&x| x < 0.5).count();
        Ok(DiscStats {
            loss: loss.to_scalar::<f32>()?,
            accuracy: correct as f32 / (nr + nf) as f32,
            p_real: p[..nr].iter().sum::<f32>() / nr as f32,
            p_fake: p[nr..].iter().sum::<f32>() / nf as f32,
        })
    }

    /// The current weights on the host, for scoring many captions cheaply.
    pub fn scorer(&self) -> Result<DiscScorer> {
        let v = |i: usize| -> Result<Vec<f32>> {
            Ok(self.t(i)?.flatten_all()?.to_dtype(DType::F32)?.to_vec1()?)
        };
        let b3 = v(5)?.first().copied().unwrap_or(0.0);
        Ok(DiscScorer::new(
            self.dim,
            (v(0)?, v(1)?),
            (v(2)?, v(3)?),
            (v(4)?, b3),
        ))
    }

    /// The weights as named tensors (for checkpoints and policy snapshots).
    pub fn tensors(&self) -> Result<Vec<(String, Tensor)>> {
        NAMES
            .iter()
            .enumerate()
            .map(|(i, n)| Ok((n.to_string(), self.t(i)?)))
            .collect()
    }

    /// The weights as safetensors bytes.
    pub fn to_safetensors(&self) -> Result<Vec<u8>> {
        params::to_bytes(&self.varmap, HashMap::new())
    }

    /// The discriminator riding in policy snapshot `bytes` (`None` when it carries none), after
    /// checking that it was trained on vocabulary `vocab_hash`; `name` names the snapshot in
    /// errors.
    pub fn from_snapshot(bytes: &[u8], name: &str, vocab_hash: &str) -> Result<Option<Self>> {
        caprl_common::snapshot::check_stamp(bytes, vocab_hash)?;
        Self::from_safetensors(bytes, Path::new(name))
    }

    /// A discriminator from the `disc.*` tensors of safetensors `bytes` (a checkpoint file or
    /// a policy snapshot, where the captioner's tensors are ignored); `None` when there are none.
    pub fn from_safetensors(bytes: &[u8], path: &Path) -> Result<Option<Self>> {
        let loaded = params::parse(bytes, path)?;
        let Some(first) = loaded.shape(NAMES[0]) else {
            return Ok(None);
        };
        let (hidden, dim) = match first[..] {
            [h, d2] => (h, d2 / 2),
            _ => (0, 0),
        };
        let d = Self {
            dim,
            hidden,
            varmap: params::load(&specs(dim, hidden), &loaded, path)?,
            device: Device::Cpu,
        };
        Ok(Some(d))
    }
}

fn specs(dim: usize, h: usize) -> Vec<Spec<'static>> {
    vec![
        Spec {
            name: NAMES[0],
            shape: vec![h, 2 * dim],
            fan_in: 2 * dim,
        },
        Spec {
            name: NAMES[1],
            shape: vec![h],
            fan_in: 2 * dim,
        },
        Spec {
            name: NAMES[2],
            shape: vec![h, h],
            fan_in: h,
        },
        Spec {
            name: NAMES[3],
            shape: vec![h],
            fan_in: h,
        },
        Spec {
            name: NAMES[4],
            shape: vec![1, h],
            fan_in: h,
        },
        Spec {
            name: NAMES[5],
            shape: vec![1],
            fan_in: h,
        },
    ]
}
