//! `caprl bench reward`: what a reward written in Python costs per rollout beside a built-in one,
//! scored as a reward worker scores it (`Rewarder::score`: the batch sent to the Python child
//! process, the call, the reply checked). Rollouts are shaped as SCST sends them at COCO's
//! batch: per image, `--samples` sampled captions and the greedy one.

use std::time::Instant;

use anyhow::{Context, Result};
use caprl_common::config::RewardSpec;
use caprl_data::{synth, Dataset, SynthConfig};
use caprl_reward_worker::Rewarder;
use caprl_wire::{DecodeKind, Rollout};

use super::rollouts;
use crate::cli::write_stdout;

#[derive(Debug, clap::Args)]
pub struct RewardBenchArgs {
    /// The module of the Python rewards (`reward.python`).
    #[arg(long, default_value = "scripts/python/bench_rewards.py")]
    pub python: String,
    /// Rewards to time, each a spec name: built-in ones and `py:<function>` of `--python`.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "bleu4,py:zero,py:bleu4,cider"
    )]
    pub rewards: Vec<String>,
    /// Images per rollout (self-critical.pytorch's batch: 10).
    #[arg(long, default_value_t = 10)]
    pub images: usize,
    /// Sampled captions per image, besides the greedy one (self-critical.pytorch: 5).
    #[arg(long, default_value_t = 5)]
    pub samples: usize,
    /// Rollouts scored per measurement.
    #[arg(long, default_value_t = 50)]
    pub rollouts: usize,
    /// Print the figures as JSON instead of a table (scripts/results/reward_cost.sh keeps them).
    #[arg(long)]
    pub json: bool,
}

/// What `--json` prints.
#[derive(serde::Serialize)]
struct Measured<'a> {
    rollouts: usize,
    images: usize,
    samples: usize,
    captions: usize,
    references: usize,
    rounds: usize,
    rows: Vec<Row<'a>>,
}

#[derive(serde::Serialize)]
struct Row<'a> {
    reward: &'a str,
    ms_per_rollout: f64,
    us_per_caption: f64,
}

/// Timing rounds per reward, interleaved; the best counts.
const ROUNDS: usize = 5;

pub fn run(args: RewardBenchArgs) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let data_dir = dir.path().join("data");
    let train = (args.images * args.rollouts).max(args.images);
    let config = SynthConfig {
        seed: 5,
        train,
        val: 10,
        test: 10,
        progress: false,
    };
    synth(&data_dir, &config)?;
    let data = Dataset::open(&data_dir)?;
    let items = &data.train.items;
    // Per image `--samples` sampled captions and the greedy one.
    let mut kinds = vec![DecodeKind::Sample; args.samples];
    kinds.push(DecodeKind::Greedy);
    let rollouts: Vec<Rollout> = items
        .chunks(args.images.max(1))
        .take(args.rollouts)
        .enumerate()
        .map(|(i, chunk)| rollouts::of_references(&data, chunk, &kinds, i as u64))
        .collect();
    let df = Rewarder::training_df(&data, items, true);
    let mut rewarders = Vec::with_capacity(args.rewards.len());
    for name in &args.rewards {
        let spec: RewardSpec = format!("{name}=1").parse()?;
        let r = Rewarder::serving(&data, items, &spec, df.clone(), None, &args.python)
            .with_context(|| format!("preparing reward {name}"))?;
        rewarders.push(r);
    }
    let mut best = vec![f64::MAX; rewarders.len()];
    for _ in 0..ROUNDS {
        for (r, best) in rewarders.iter().zip(&mut best) {
            let t = Instant::now();
            for rollout in &rollouts {
                r.score(rollout.clone())?;
            }
            *best = best.min(t.elapsed().as_secs_f64() * 1e3 / rollouts.len() as f64);
        }
    }
    let captions = rollouts[0].sequences.len();
    let measured = Measured {
        rollouts: rollouts.len(),
        images: args.images,
        samples: args.samples,
        captions,
        references: items[0].refs.len(),
        rounds: ROUNDS,
        rows: args
            .rewards
            .iter()
            .zip(&best)
            .map(|(name, &t)| Row {
                reward: name,
                ms_per_rollout: t,
                us_per_caption: t * 1e3 / captions as f64,
            })
            .collect(),
    };
    if args.json {
        return write_stdout(&(serde_json::to_string_pretty(&measured)? + "\n"));
    }
    let mut out = format!(
        "{}\n{} rollouts of {} images x ({} samples + greedy) = {captions} captions, {} \
         references per image, best of {ROUNDS}, 1 process\n\n",
        caprl_kernels::fastmath::describe(),
        measured.rollouts,
        measured.images,
        measured.samples,
        measured.references,
    );
    out.push_str("| reward | ms / rollout | µs / caption | vs first |\n|---|---|---|---|\n");
    for row in &measured.rows {
        out.push_str(&format!(
            "| {} | {:.3} | {:.1} | {:.2}× |\n",
            row.reward,
            row.ms_per_rollout,
            row.us_per_caption,
            row.ms_per_rollout / measured.rows[0].ms_per_rollout
        ));
    }
    write_stdout(&out)
}
