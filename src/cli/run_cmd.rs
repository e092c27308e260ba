//! `caprl run`: the whole job on one machine. Generates the synthetic data
//! set when missing, trains XE, then the RL objective (SCST by default),
//! evaluates both on the test split and prints one comparison table.

use std::path::Path;

use anyhow::{Context, Result};
use caprl_common::config::RunConfig;
use caprl_learner::eval::{self, EvalOptions, EvalReport};
use caprl_learner::objective::Objective;
use caprl_learner::run as training;
use caprl_wire::Sampling;

use super::compute_args::ComputeArgs;
use super::train_cmd::config_with;
use super::{write_stdout, Global};
use crate::{roles, setup};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// RL objective after the XE warm start (same as --set train.objective=...): scst, sle,
    /// mc-pg, actor-critic, wtf, wtf-rl. For wtf / wtf-rl without a config of your own, the
    /// reward is paper 004's `clip=0.94,disc=0.06` and the two dual encoders are trained on the
    /// data set first (`runs/clip/`), unless there already.
    #[arg(long)]
    pub objective: Option<String>,
    #[command(flatten)]
    pub compute: ComputeArgs,
    /// Print the table as JSON as well, to this file.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
}

/// Metrics of the final table, in order, with their display names.
const TABLE: [(&str, &str); 11] = [
    ("cider_d", "CIDEr-D"),
    ("bleu4", "BLEU-4"),
    ("rouge_l", "ROUGE-L"),
    ("div2_sample", "Div-2 (5 samples)"),
    ("mbleu4_sample", "mBLEU-4 (5 samples)"),
    ("div2_beam", "Div-2 (5 beams)"),
    ("mbleu4_beam", "mBLEU-4 (5 beams)"),
    ("vocab_used", "vocabulary used"),
    ("r1_t2i", "R@1 text→image"),
    ("r1_i2t", "R@1 image→text"),
    ("self_bleu", "Self-BLEU"),
];

/// Where `caprl run --objective wtf|wtf-rl` keeps the encoders it trains.
const AUTO_REWARD_ENCODER: &str = "runs/clip/reward.safetensors";
const AUTO_EVAL_ENCODER: &str = "runs/clip/eval.safetensors";

/// Whether `--objective` names one that learns from the encoder rewards (wtf, wtf-rl).
fn wants_encoder_reward(objective: Option<&str>) -> Result<bool> {
    let Some(name) = objective else {
        return Ok(false);
    };
    let cfg = RunConfig::load(None, &[format!("train.objective={name:?}")])?;
    Ok(Objective::from_config(&cfg).needs_encoder_reward())
}

pub fn run(args: Args, global: &Global) -> Result<()> {
    let auto_clip = wants_encoder_reward(args.objective.as_deref())?
        && global.config.is_none()
        && !global
            .sets
            .iter()
            .any(|s| s.starts_with("reward.spec") || s.starts_with("clip."));
    let mut global = global.clone();
    if auto_clip {
        global.sets.extend([
            "reward.spec=\"clip=0.94,disc=0.06\"".to_string(),
            format!("clip.reward={AUTO_REWARD_ENCODER:?}"),
            format!("clip.eval={AUTO_EVAL_ENCODER:?}"),
        ]);
    }
    let global = &global;
    let cfg = config_with(global, args.objective.as_deref(), &args.compute)?;
    let objective = Objective::from_config(&cfg);
    if !objective.has_rl_phase() {
        anyhow::bail!("`caprl run` compares XE with an RL objective; use `caprl train --objective xe` for XE alone");
    }
    // The device first: a bad one fails before any data is generated or read.
    let device = setup::device(&cfg)?;
    // Before anything touches the run directory (or the bus): one learner per run_dir.
    let lock = training::lock_run_dir(&cfg)?;
    let data = std::sync::Arc::new(setup::open_data(&cfg, true)?);
    let started = std::time::Instant::now();
    if auto_clip {
        for (path, seed) in [(AUTO_REWARD_ENCODER, 1), (AUTO_EVAL_ENCODER, 2)] {
            ensure_encoder(Path::new(path), &data, seed)?;
        }
    }
    let encoder = match super::eval_cmd::eval_encoder_path(None, &cfg) {
        Some(p) => Some(
            caprl_clip::open_encoder(&p, &data.vocab)
                .with_context(|| format!("opening the evaluation encoder {}", p.display()))?,
        ),
        None => None,
    };
    let outcome = roles::with_inproc_roles(&cfg, &data, &device, |driver| {
        Ok(training::train(
            &cfg, &data, &device, false, None, driver, &lock,
        )?)
    })?;
    let test = &data.test.items;
    let opts = EvalOptions {
        beam: cfg.decode.beam as usize,
        length_norm: cfg.decode.length_norm,
        block_trigrams: cfg.decode.block_trigrams,
        beam_groups: cfg.decode.beam_groups as usize,
        diversity_lambda: cfg.decode.diversity_lambda as f32,
        remove_bad_endings: cfg.decode.remove_bad_endings,
        sampling: Sampling {
            top_p: cfg.decode.top_p as f32,
            ..Sampling::default()
        },
        seed: cfg.seed,
        progress: true,
        ..EvalOptions::default()
    };
    let evaluate = |ck: &Path| -> Result<EvalReport> {
        let loaded = training::load_checkpoint(ck, None, &device)?;
        let mut report = eval::evaluate(&loaded.model, &data, test, &opts)?;
        if let Some(enc) = &encoder {
            eval::add_retrieval(&mut report, enc.as_ref(), &data, test)?;
        }
        Ok(report)
    };
    let xe = evaluate(
        outcome
            .best_xe
            .as_deref()
            .context("the XE phase did not run (train.xe_epochs = 0)")?,
    )?;
    let rl = evaluate(
        outcome
            .best_rl
            .as_deref()
            .context("the RL phase did not run (train.rl_epochs = 0)")?,
    )?;
    let name = objective.name().to_uppercase();
    let minutes = started.elapsed().as_secs_f64() / 60.0;
    let mut out = comparison(test.len(), opts.beam, minutes, &name, &xe, &rl);
    out.push_str(&format!("\nrun dir: {}\n", cfg.run_dir));
    if let Some(path) = &args.json {
        let json = serde_json::json!({"xe": xe.metrics, "rl": rl.metrics, "objective": name});
        std::fs::write(path, serde_json::to_string_pretty(&json)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    write_stdout(&out)
}

/// The table `caprl run` prints: each metric of the XE and RL checkpoints on the test split
/// (`images` of them, decoded with beam `beam`), and the change.
fn comparison(
    images: usize,
    beam: usize,
    minutes: f64,
    name: &str,
    xe: &EvalReport,
    rl: &EvalReport,
) -> String {
    let mut out = format!(
        "\nTest split ({images} images, beam {beam}), {minutes:.1} min\n\n{:<22} {:>9} {:>9} {:>9}\n",
        "metric", "XE", name, "change"
    );
    for (key, label) in TABLE {
        let (a, b) = (xe.metrics.get(key).copied(), rl.metrics.get(key).copied());
        if let (Some(a), Some(b)) = (a, b) {
            let change = if a.abs() > 1e-12 {
                format!("{:+.1}%", 100.0 * (b - a) / a.abs())
            } else {
                "-".into()
            };
            out.push_str(&format!("{label:<22} {a:>9.4} {b:>9.4} {change:>9}\n"));
        }
    }
    out
}

/// Trains a dual encoder into `path` unless one for this data set's vocabulary is there.
fn ensure_encoder(path: &Path, data: &caprl_data::Dataset, seed: u64) -> Result<()> {
    use caprl_clip::train::{self as clip_train, TrainOptions};
    if caprl_clip::DualEncoder::load(path, &data.vocab).is_ok() {
        return Ok(());
    }
    tracing::info!("training the dual encoder {} (seed {seed})", path.display());
    let (pairs, _) = super::clip_cmd::training_pairs(data, true)?;
    let opts = TrainOptions {
        seed,
        ..TrainOptions::default()
    };
    let enc = clip_train::train(data, &pairs, &opts, &mut |_| {})?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    enc.save(path)?;
    Ok(())
}
