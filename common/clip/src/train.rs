//! `caprl clip train`: the dual encoder learns by the symmetric InfoNCE loss of CLIP,
//! `L = ½[CE(s·F^I F^Tᵀ, diag) + CE(s·F^T F^Iᵀ, diag)]` over a batch of (image, caption) pairs
//! with L2-normalised embeddings and learnable scale `s = exp(logit_scale)`. Each epoch visits
//! every training image once with one of its captions drawn at random (its references, plus its
//! full description when the data set has one, as the synthetic set does).

use candle_core::{Tensor, D};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::dual::{batch_captions, DualConfig, DualEncoder};
use super::retrieval::{recall, Recall};
use super::{Encoder, Result};
use caprl_common::progress::Progress;
use caprl_data::{Dataset, Item};
use caprl_model::optim::{AdamW, AdamWParams};

/// How to train.
#[derive(Debug, Clone, Copy)]
pub struct TrainOptions {
    pub epochs: usize,
    /// Pairs per step (the contrastive batch).
    pub batch: usize,
    pub lr: f64,
    pub seed: u64,
}

impl Default for TrainOptions {
    fn default() -> Self {
        Self {
            epochs: 20,
            batch: 256,
            lr: 2e-3,
            seed: 1,
        }
    }
}

/// One epoch's result.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct EpochReport {
    pub epoch: usize,
    pub loss: f64,
    /// Validation retrieval with each image's first reference.
    pub val: Recall,
}

/// The captions an image can be paired with, as vocabulary ids.
pub struct Pairs {
    pub rows: Vec<usize>,
    pub captions: Vec<Vec<Vec<u32>>>,
}

impl Pairs {
    /// The references of `items`, plus `extra` captions of a row (e.g. full descriptions).
    pub fn from_items(
        data: &Dataset,
        items: &[Item],
        extra: &dyn Fn(&Item) -> Option<Vec<u32>>,
    ) -> Self {
        let mut rows = Vec::with_capacity(items.len());
        let mut captions = Vec::with_capacity(items.len());
        for it in items {
            let mut c: Vec<Vec<u32>> = it.refs.iter().map(|r| data.vocab.encode(r)).collect();
            c.extend(extra(it));
            if !c.is_empty() {
                rows.push(it.row);
                captions.push(c);
            }
        }
        Self { rows, captions }
    }
}

/// Trains a fresh encoder on `pairs`, reporting each epoch to `on_epoch`.
pub fn train(
    data: &Dataset,
    pairs: &Pairs,
    opts: &TrainOptions,
    on_epoch: &mut dyn FnMut(&EpochReport),
) -> Result<DualEncoder> {
    let enc = DualEncoder::new(
        DualConfig::for_data(data),
        data.vocab.hash(),
        &candle_core::Device::Cpu,
        opts.seed,
    )?;
    let mut opt = AdamW::new(enc.varmap(), AdamWParams::default())
        .map_err(|e| super::ClipError::Input(format!("optimizer: {e}")))?;
    let mut rng = ChaCha8Rng::seed_from_u64(opts.seed);
    let n = pairs.rows.len();
    let steps_per_epoch = n.div_ceil(opts.batch.max(2));
    let total = (steps_per_epoch * opts.epochs) as u64;
    let bar = Progress::new(total, "clip train");
    let mut step = 0usize;
    for epoch in 0..opts.epochs {
        let mut order: Vec<usize> = (0..n).collect();
        order.shuffle(&mut rng);
        let mut loss_sum = 0.0;
        for chunk in order.chunks(opts.batch.max(2)) {
            if chunk.len() < 2 {
                continue;
            }
            let rows: Vec<usize> = chunk.iter().map(|&i| pairs.rows[i]).collect();
            let caps: Vec<Vec<u32>> = chunk
                .iter()
                .map(|&i| {
                    let c = &pairs.captions[i];
                    c[rng.random_range(0..c.len())].clone()
                })
                .collect();
            // Cosine warm-down over the whole run.
            let lr =
                opts.lr * 0.5 * (1.0 + (std::f64::consts::PI * step as f64 / total as f64).cos());
            let loss = step_loss(&enc, data, &rows, &caps)?;
            loss_sum += loss.to_scalar::<f32>()? as f64;
            let grads = loss.backward()?;
            opt.step(&grads, lr)
                .map_err(|e| super::ClipError::Input(format!("optimizer: {e}")))?;
            step += 1;
            bar.inc(1);
        }
        let report = EpochReport {
            epoch,
            loss: loss_sum / steps_per_epoch.max(1) as f64,
            val: validation_recall(&enc, data)?,
        };
        bar.set_message(&format!(
            "loss {:.3} val R@1 t2i {:.1}",
            report.loss, report.val.t2i[0]
        ));
        on_epoch(&report);
    }
    bar.finish();
    Ok(enc)
}

fn step_loss(
    enc: &DualEncoder,
    data: &Dataset,
    rows: &[usize],
    caps: &[Vec<u32>],
) -> Result<Tensor> {
    let b = rows.len();
    let fc = Tensor::from_vec(data.fc_rows(rows)?, (b, data.fc_dim()), enc.device())?;
    let fi = l2(&enc.image_tower(&fc)?)?;
    let (ids, mask) = batch_captions(caps, enc.device())?;
    let ft = l2(&enc.text_tower(&ids, &mask)?)?;
    let logits = fi.matmul(&ft.t()?)?.broadcast_mul(&enc.scale()?)?;
    let target = Tensor::arange(0u32, b as u32, enc.device())?;
    let i2t = candle_nn::loss::cross_entropy(&logits, &target)?;
    let t2i = candle_nn::loss::cross_entropy(&logits.t()?, &target)?;
    Ok(((i2t + t2i)? * 0.5)?)
}

fn l2(x: &Tensor) -> Result<Tensor> {
    let n = x.sqr()?.sum_keepdim(D::Minus1)?.sqrt()?.maximum(1e-6)?;
    Ok(x.broadcast_div(&n)?)
}

/// Recall on (up to 1000 images of) the val split, each with its first reference.
pub fn validation_recall(enc: &dyn Encoder, data: &Dataset) -> Result<Recall> {
    let items: Vec<&Item> = data
        .val
        .items
        .iter()
        .filter(|it| !it.refs.is_empty())
        .take(1000)
        .collect();
    let rows: Vec<usize> = items.iter().map(|it| it.row).collect();
    let caps: Vec<Vec<u32>> = items
        .iter()
        .map(|it| data.vocab.encode(&it.refs[0]))
        .collect();
    Ok(recall(
        &enc.embed_captions(&caps)?,
        &enc.embed_images(data, &rows)?,
    ))
}
