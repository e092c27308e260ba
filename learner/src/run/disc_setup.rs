//! The online discriminator of paper 004 at the start of the RL phase: restored with a resumed
//! run, or pre-trained on ground-truth vs beam captions of the model RL starts from.

use std::path::Path;

use super::Result;
use crate::error::Doing;
use caprl_common::config::RunConfig;
use caprl_common::progress::Progress;
use caprl_data::Dataset;
use caprl_model::model::inputs_for_rows;

use crate::disc_online::{OnlineDisc, PretrainOptions};
use crate::trainer::Trainer;

/// The discriminator of a resumed run, or a fresh one pre-trained on ground-truth vs beam
/// captions of the model RL starts from (paper 004 §4).
pub(super) fn online_disc(
    cfg: &RunConfig,
    data: &Dataset,
    trainer: &Trainer,
    resumed_from: Option<&Path>,
) -> Result<OnlineDisc> {
    let open = || {
        caprl_clip::open_encoder(Path::new(&cfg.clip.reward), &data.vocab).doing(|| {
            format!(
                "opening the reward encoder [clip] reward = {}",
                cfg.clip.reward
            )
        })
    };
    if let Some(dir) = resumed_from {
        if let Some(d) = OnlineDisc::restore(open()?, dir, cfg.clip.disc_lr)? {
            tracing::info!("discriminator restored from {}", dir.display());
            return Ok(d);
        }
    }
    let mut disc = OnlineDisc::new(open()?, cfg.seed, cfg.clip.disc_lr)?;
    let n = (cfg.clip.disc_pretrain_images as usize).min(data.train.items.len());
    let items = &data.train.items[..n];
    let model = &trainer.model;
    let mcfg = model.config();
    let mut real = Vec::new();
    let mut fake = Vec::new();
    let bar = Progress::new(n as u64, "discriminator: XE beam captions");
    let decoder = model.decoder()?;
    for chunk in items.chunks(64) {
        let rows: Vec<usize> = chunk.iter().map(|it| it.row).collect();
        let x = inputs_for_rows(data, &rows, mcfg, model.device())?;
        let beams = decoder.beam(
            &x,
            &caprl_model::model::BeamOptions::plain(cfg.decode.beam as usize, mcfg.max_len),
        )?;
        for (it, hyps) in chunk.iter().zip(beams) {
            if let Some(h) = hyps.into_iter().next() {
                fake.push((it.row, h.tokens));
            }
            for t in it.targets(&data.vocab, mcfg.max_len) {
                real.push((it.row, t));
            }
        }
        bar.inc(chunk.len() as u64);
    }
    bar.finish();
    let stats = disc.pretrain(
        data,
        &real,
        &fake,
        PretrainOptions {
            epochs: cfg.clip.disc_pretrain_epochs as usize,
            batch: 64,
            seed: cfg.seed,
        },
        &mut |epoch, s| {
            tracing::info!(
                "discriminator pre-training epoch {}: loss {:.4} accuracy {:.3} P_D(gt) {:.3} P_D(beam) {:.3}",
                epoch + 1,
                s.loss,
                s.accuracy,
                s.p_real,
                s.p_fake
            )
        },
    )?;
    tracing::info!(
        "discriminator pre-trained on {} ground-truth and {} beam captions: accuracy {:.3}",
        real.len(),
        fake.len(),
        stats.accuracy
    );
    Ok(disc)
}
