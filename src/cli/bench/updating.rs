//! A model of a benchmark shape taking real AdamW updates, so that its versions differ as a
//! trained policy's do (`caprl bench delta`, `caprl bench broadcast`): each update is on the XE
//! loss of random captions of the shape's XE batch; Adam's steps are about the learning rate in
//! size whatever the loss, so the values an update changes are those an SCST update at that
//! rate would.

use anyhow::Result;
use caprl_model::model::{batch_tokens, on_rayon, CaprlRng, Captioner, Device, Inputs, Tensor};
use caprl_model::optim::{AdamW, AdamWParams};

use super::model::random_captions;
use super::transformer::{bench_model, random_images, BenchShape};

pub(super) struct Updating {
    model: Captioner,
    images: Inputs,
    targets: Tensor,
    opt: AdamW,
    drop_rng: CaprlRng,
}

impl Updating {
    /// The Transformer of `shape` (`caprl bench transformer`'s), with AdamW's defaults.
    pub(super) fn new(shape: BenchShape) -> Result<Updating> {
        let s = shape.spec();
        let device = Device::Cpu;
        let (model, cfg) = bench_model(&s, &device)?;
        let (images, _) = random_images(&s, &cfg, &device)?;
        let targets = batch_tokens(
            &random_captions(&mut CaprlRng::new(2), s.xe_rows, s.max_len, s.vocab),
            &device,
        )?;
        let opt = AdamW::new(model.varmap(), AdamWParams::default())?;
        Ok(Updating {
            model,
            images,
            targets,
            opt,
            drop_rng: CaprlRng::new(3),
        })
    }

    /// One update at learning rate `lr`: forward, backward, AdamW.
    pub(super) fn step(&mut self, lr: f64) -> Result<()> {
        let Updating {
            model,
            images,
            targets,
            opt,
            drop_rng,
        } = self;
        on_rayon(&Device::Cpu, || -> Result<()> {
            let (logp, mask) = model.token_logprobs(images, targets, Some(drop_rng))?;
            let loss = (logp.sum_all()?.neg()? / mask.sum_all()?.to_scalar::<f32>()? as f64)?;
            opt.step(&loss.backward()?, lr)?;
            Ok(())
        })
    }

    pub(super) fn model(&self) -> &Captioner {
        &self.model
    }
}
