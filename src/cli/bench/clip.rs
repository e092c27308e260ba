//! `caprl bench clip`: what paper 004's rewards cost per caption next to CIDEr-D, and the text
//! encoder's throughput. Rollouts are shaped as WTF-RL sends them (per image: the best beam,
//! the greedy caption and one ground-truth caption), with references standing in for decodes.

use std::collections::HashMap;
use std::time::Instant;

use anyhow::{Context, Result};
use caprl_clip::train::{self, Pairs, TrainOptions};
use caprl_clip::Discriminator;
use caprl_common::config::RewardSpec;
use caprl_data::{synth, Dataset, SynthConfig, Vocab};
use caprl_model::model::Device;
use caprl_reward_worker::{ClipReward, Rewarder};
use caprl_score::intern::Interner;
use caprl_score::{CiderD, PreparedRefs};
use caprl_wire::{DecodeKind, Rollout};

use super::rollouts;
use crate::cli::write_stdout;

#[derive(Debug, clap::Args)]
pub struct ClipBenchArgs {
    /// Training images of the generated data set (the image pool and neighbour mining).
    #[arg(long, default_value_t = 2000)]
    pub images: usize,
    /// Images per rollout (the contrastive batch; `runtime.images_per_task` is 8). The
    /// contrastive reward's pools grow with it, so its cost per caption does too.
    #[arg(long, default_value_t = 8)]
    pub batch: usize,
    /// Rollouts scored per measurement.
    #[arg(long, default_value_t = 200)]
    pub rollouts: usize,
}

/// A row of the table: its name and the work it times.
type Row<'a> = (&'static str, Box<dyn FnMut() -> Result<()> + 'a>);

/// The captions of each image in a rollout, as WTF-RL sends them.
const KINDS: [DecodeKind; 3] = [
    DecodeKind::Beam,
    DecodeKind::Greedy,
    DecodeKind::GroundTruth,
];

/// Interleaved timing rounds per row.
const ROUNDS: usize = 5;

/// What every row scores: the data set, the rollouts, and the rewarders built on them.
struct Setup {
    data: Dataset,
    rollouts: Vec<Rollout>,
    /// CIDEr-D as a reward worker scores it.
    cider: Rewarder,
    /// The contrastive reward alone.
    clip_only: ClipReward,
    /// `clip=0.94,disc=0.06`, the reward of WTF-RL.
    clip_rewarder: Rewarder,
    /// The CIDEr-D df of the training images, for the bare scorer.
    df: caprl_score::DocFreq,
}

/// Generates the data set in `dir`, trains an encoder for one epoch, and builds the rollouts
/// and rewarders.
fn setup(args: &ClipBenchArgs, dir: &std::path::Path) -> Result<Setup> {
    let data_dir = dir.join("data");
    synth(
        &data_dir,
        &SynthConfig {
            seed: 5,
            train: args.images.max(args.batch),
            val: 50,
            test: 10,
            progress: false,
        },
    )?;
    let data = Dataset::open(&data_dir)?;
    let items = &data.train.items;
    let pairs = Pairs::from_items(&data, items, &|_| None);
    let opts = TrainOptions {
        epochs: 1,
        ..TrainOptions::default()
    };
    let encoder = train::train(&data, &pairs, &opts, &mut |_| {})?;
    let encoder_path = dir.join("enc.safetensors");
    encoder.save(&encoder_path)?;
    let clip_only = ClipReward::new(
        caprl_clip::open_encoder(&encoder_path, &data.vocab)?,
        &data,
        items,
        0.05,
        8,
    )?;
    let rollouts: Vec<Rollout> = items
        .chunks(args.batch.max(1))
        .cycle()
        .take(args.rollouts)
        .enumerate()
        .map(|(i, chunk)| rollouts::of_references(&data, chunk, &KINDS, i as u64))
        .collect();
    // Plain CIDEr-D (no `<eos>` marker), so the bare scorer scores the same sentences.
    let df = Rewarder::training_df(&data, items, false);
    let cider = Rewarder::new(&data, items, &RewardSpec::default(), df.clone(), None)?;
    let clip = ClipReward::new(Box::new(encoder), &data, items, 0.05, 8)?;
    let disc = Discriminator::new(128, &Device::Cpu, 1)?;
    clip.set_discriminator(0, disc.scorer()?);
    let spec: RewardSpec = "clip=0.94,disc=0.06".parse()?;
    let clip_rewarder =
        Rewarder::new(&data, items, &spec, df.clone(), None)?.with_encoder_rewards(clip);
    Ok(Setup {
        data,
        rollouts,
        cider,
        clip_only,
        clip_rewarder,
        df,
    })
}

pub fn run(args: ClipBenchArgs) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let Setup {
        data,
        rollouts,
        cider,
        clip_only,
        clip_rewarder,
        df: df_for_scorer,
    } = setup(&args, dir.path())?;
    let items = &data.train.items;
    let captions: usize = rollouts.iter().map(|r| r.sequences.len()).sum();
    let clip = clip_rewarder.clip().context("clip rewarder")?;

    // CIDEr-D's own arithmetic, references prepared once (as the reward worker holds them),
    // beside the clip path on cached text embeddings: the like-for-like comparison.
    let scorer = CiderD::new(df_for_scorer);
    let prepared = prepared_refs(&scorer, &data);
    let texts: Vec<_> = rollouts
        .iter()
        .map(|r| clip.embed(r))
        .collect::<Result<_, _>>()?;
    let mut rows: Vec<Row> = vec![
        (
            "cider (CIDEr-D reward, as a worker scores it)",
            Box::new(|| {
                for r in &rollouts {
                    cider.score(r.clone())?;
                }
                Ok(())
            }),
        ),
        (
            "CIDEr-D scorer alone, references prepared",
            Box::new(|| {
                for r in &rollouts {
                    for s in &r.sequences {
                        let cand: Vec<u32> = s
                            .tokens
                            .iter()
                            .copied()
                            .take_while(|&t| t != Vocab::EOS)
                            .collect();
                        let refs = &prepared[&(s.image_row as usize)];
                        std::hint::black_box(scorer.score(refs, &cand));
                    }
                }
                Ok(())
            }),
        ),
        (
            "clip alone, text embeddings cached",
            Box::new(|| {
                for (r, t) in rollouts.iter().zip(&texts) {
                    clip_only.score_embedded(r, t)?;
                }
                Ok(())
            }),
        ),
        (
            "clip + disc, text embeddings cached",
            Box::new(|| {
                for (r, t) in rollouts.iter().zip(&texts) {
                    clip.score_embedded(r, t)?;
                }
                Ok(())
            }),
        ),
        (
            "clip + disc, embedding the captions too",
            Box::new(|| {
                for r in &rollouts {
                    clip_rewarder.score(r.clone())?;
                }
                Ok(())
            }),
        ),
        (
            "text encoder alone",
            Box::new(|| {
                for r in &rollouts {
                    clip.embed(r)?;
                }
                Ok(())
            }),
        ),
    ];
    let best = interleaved_best(&mut rows, captions)?;
    let setting = format!(
        "{} rollouts of {} images ({} captions: beam, greedy, ground truth per image), \
         {} training images, 8 mined neighbours, 1 process",
        rollouts.len(),
        args.batch,
        captions,
        items.len()
    );
    write_stdout(&table(&setting, &rows, &best))
}

/// Each training image's references prepared for the CIDEr-D scorer, by row (as a reward
/// worker holds them).
fn prepared_refs(scorer: &CiderD, data: &Dataset) -> HashMap<usize, PreparedRefs> {
    let mut interner = Interner::with_words(data.vocab.words());
    data.train
        .items
        .iter()
        .map(|it| {
            let refs = interner.intern_refs(&it.refs);
            (it.row, scorer.prepare(&refs))
        })
        .collect()
}

/// The printed table: the machine, the `setting`, and each row's µs per caption (`best`),
/// captions per second and speed against the first row.
fn table(setting: &str, rows: &[Row], best: &[f64]) -> String {
    let mut out = format!("{}\n{setting}\n\n", caprl_kernels::fastmath::describe());
    out.push_str("| reward | µs / caption | captions/s | vs cider |\n|---|---|---|---|\n");
    let t_cider = best[0];
    for ((name, _), t) in rows.iter().zip(best) {
        out.push_str(&format!(
            "| {name} | {t:.2} | {:.0} | {:.2}× |\n",
            1e6 / t,
            t_cider / t
        ));
    }
    out
}

/// The best of [`ROUNDS`] timings of each of `rows`, in µs per caption. Rounds run every row
/// once, in turn, so a slow spell of a shared machine hits all rows alike.
fn interleaved_best(rows: &mut [Row<'_>], captions: usize) -> Result<Vec<f64>> {
    let mut best = vec![f64::MAX; rows.len()];
    for _ in 0..ROUNDS {
        for ((_, f), best) in rows.iter_mut().zip(&mut best) {
            let t = Instant::now();
            f()?;
            *best = best.min(t.elapsed().as_secs_f64() * 1e6 / captions as f64);
        }
    }
    Ok(best)
}
