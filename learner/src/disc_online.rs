//! The discriminator as the learner trains it (paper 004 §3.2, §4): pre-trained on ground-truth
//! vs beam captions of the XE model, then one step per learner iteration on that batch's
//! ground-truth and generated captions, on the frozen encoder's embeddings. Its weights and
//! optimizer moments are checkpointed beside the captioner's, and its weights ride in every
//! policy snapshot so reward workers score `disc` with the current `D`.

use std::path::Path;

use caprl_clip::disc::{DiscStats, Pairs};
use caprl_clip::{Discriminator, Encoder};
use caprl_data::Dataset;
use caprl_model::optim::{AdamW, AdamWParams};

use crate::LearnerError;

/// Checkpoint files of the discriminator.
pub const DISC_WEIGHTS: &str = "disc.safetensors";
pub const DISC_OPTIM: &str = "disc-optim.safetensors";

/// Captions of images: `(feature row, tokens)`.
pub type Captions = [(usize, Vec<u32>)];

/// How [`OnlineDisc::pretrain`] runs.
#[derive(Debug, Clone, Copy)]
pub struct PretrainOptions {
    pub epochs: usize,
    /// Real and generated captions per step (each).
    pub batch: usize,
    pub seed: u64,
}

pub struct OnlineDisc {
    pub disc: Discriminator,
    opt: AdamW,
    encoder: Box<dyn Encoder>,
    lr: f64,
}

/// A discriminator failure, kept as a [`LearnerError::Clip`] under what was being done.
fn clip_err(e: caprl_clip::ClipError) -> LearnerError {
    LearnerError::While {
        doing: "the discriminator".into(),
        source: Box::new(e.into()),
    }
}

impl OnlineDisc {
    /// A fresh discriminator over `encoder`'s embeddings.
    pub fn new(encoder: Box<dyn Encoder>, seed: u64, lr: f64) -> Result<Self, LearnerError> {
        let disc =
            Discriminator::new(encoder.dim(), &candle_core::Device::Cpu, seed).map_err(clip_err)?;
        let opt = AdamW::new(disc.varmap(), AdamWParams::default())?;
        Ok(Self {
            disc,
            opt,
            encoder,
            lr,
        })
    }

    /// The discriminator of checkpoint directory `dir`, if it has one.
    pub fn restore(
        encoder: Box<dyn Encoder>,
        dir: &Path,
        lr: f64,
    ) -> Result<Option<Self>, LearnerError> {
        let weights = dir.join(DISC_WEIGHTS);
        if !weights.exists() {
            return Ok(None);
        }
        let bytes = std::fs::read(&weights).map_err(|e| LearnerError::Io {
            path: weights.clone(),
            source: e,
        })?;
        let disc = Discriminator::from_safetensors(&bytes, &weights)
            .map_err(clip_err)?
            .ok_or_else(|| LearnerError::Corrupt {
                path: weights.clone(),
                reason: "holds no discriminator tensors".into(),
            })?;
        if disc.dim() != encoder.dim() {
            return Err(LearnerError::Misconfigured(format!(
                "{} reads {}-d embeddings but [clip] reward gives {}-d ones: use the encoder it was trained with",
                weights.display(),
                disc.dim(),
                encoder.dim()
            )));
        }
        let mut opt = AdamW::new(disc.varmap(), AdamWParams::default())?;
        opt.load(&dir.join(DISC_OPTIM))?;
        Ok(Some(Self {
            disc,
            opt,
            encoder,
            lr,
        }))
    }

    /// Weights and optimizer state as checkpoint files.
    pub fn files(&self) -> Result<Vec<(&'static str, Vec<u8>)>, LearnerError> {
        Ok(vec![
            (DISC_WEIGHTS, self.disc.to_safetensors().map_err(clip_err)?),
            (DISC_OPTIM, self.opt.to_bytes()?),
        ])
    }

    /// One step: `real` captions labelled human, `fake` ones generated.
    pub fn step(
        &mut self,
        data: &Dataset,
        real: &Captions,
        fake: &Captions,
    ) -> Result<DiscStats, LearnerError> {
        let (rt, ri) = self.embed(data, real)?;
        let (ft, fi) = self.embed(data, fake)?;
        self.disc
            .train_step(
                &mut self.opt,
                &Pairs {
                    texts: &rt,
                    images: &ri,
                },
                &Pairs {
                    texts: &ft,
                    images: &fi,
                },
                self.lr,
            )
            .map_err(clip_err)
    }

    fn embed(
        &self,
        data: &Dataset,
        caps: &Captions,
    ) -> Result<(caprl_clip::Embeddings, caprl_clip::Embeddings), LearnerError> {
        let rows: Vec<usize> = caps.iter().map(|(r, _)| *r).collect();
        let toks: Vec<Vec<u32>> = caps.iter().map(|(_, t)| t.clone()).collect();
        Ok((
            self.encoder.embed_captions(&toks).map_err(clip_err)?,
            self.encoder.embed_images(data, &rows).map_err(clip_err)?,
        ))
    }

    /// Pre-training: `opts.epochs` passes over `real` and `fake` in shuffled mini-batches of
    /// `opts.batch` of each; returns the last epoch's mean statistics.
    pub fn pretrain(
        &mut self,
        data: &Dataset,
        real: &Captions,
        fake: &Captions,
        opts: PretrainOptions,
        on_epoch: &mut dyn FnMut(usize, &DiscStats),
    ) -> Result<DiscStats, LearnerError> {
        let PretrainOptions {
            epochs,
            batch,
            seed,
        } = opts;
        use rand::seq::SliceRandom;
        use rand::SeedableRng;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x6469_7363);
        let mut last = DiscStats::default();
        for epoch in 0..epochs {
            let mut r: Vec<usize> = (0..real.len()).collect();
            let mut f: Vec<usize> = (0..fake.len()).collect();
            r.shuffle(&mut rng);
            f.shuffle(&mut rng);
            let steps = r.len().max(f.len()).div_ceil(batch.max(1));
            let mut sum = DiscStats::default();
            for s in 0..steps {
                let pick = |idx: &[usize], all: &Captions| -> Vec<(usize, Vec<u32>)> {
                    (0..batch)
                        .map(|k| idx[(s * batch + k) % idx.len()])
                        .map(|i| all[i].clone())
                        .collect()
                };
                if r.is_empty() || f.is_empty() {
                    break;
                }
                let st = self.step(data, &pick(&r, real), &pick(&f, fake))?;
                sum.loss += st.loss / steps as f32;
                sum.accuracy += st.accuracy / steps as f32;
                sum.p_real += st.p_real / steps as f32;
                sum.p_fake += st.p_fake / steps as f32;
            }
            on_epoch(epoch, &sum);
            last = sum;
        }
        Ok(last)
    }
}
