//! `caprl eval`: caption a split with a checkpoint and print every metric.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use caprl_data::SplitName;
use caprl_learner::eval::{self, EvalOptions, EvalReport};
use caprl_learner::run::{load_checkpoint, Loaded};
use caprl_learner::trainer::Phase;
use caprl_model::model::Lookahead;
use caprl_wire::Sampling;

use super::beam_args::DiverseBeamArgs;
use super::compute_args::ComputeArgs;
use super::output_paths::{check_output, Input};
use super::{write_stdout, Global};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// A checkpoint directory (ckpt-*) or a directory holding them (the newest valid is used).
    #[arg(long)]
    pub checkpoint: PathBuf,
    /// Split to evaluate: train, val or test.
    #[arg(long, default_value = "test")]
    pub split: String,
    /// Beam width; 1 = greedy (default: decode.beam of the checkpoint's config).
    #[arg(long, value_parser = super::ranges::config_key::<usize>("decode.beam"))]
    pub beam: Option<usize>,
    /// Diverse beam search and bad endings; the beam groups must divide the beam.
    #[command(flatten)]
    pub diverse: DiverseBeamArgs,
    /// Nucleus mass of the samples of the diversity metrics, in (0, 1] (default:
    /// decode.top_p of the checkpoint's config).
    #[arg(long, value_name = "P", value_parser = super::ranges::config_key::<f32>("decode.top_p"))]
    pub top_p: Option<f32>,
    /// Evaluate only the first N images (default: all of the split).
    #[arg(long, value_parser = super::ranges::at_least_one)]
    pub limit: Option<usize>,
    /// Data set directory (default: the one the checkpoint was trained on).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Write the generated captions in COCO results format to this file.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Lookahead inference (paper 001): rank beams by λ·log π + (1−λ)·v with the checkpoint's
    /// value head (actor-critic / mc-pg runs); 1 = plain beam search. Default:
    /// decode.lookahead_lambda of the checkpoint's config.
    #[arg(long, value_name = "LAMBDA", value_parser = super::ranges::config_key::<f32>("decode.lookahead_lambda"))]
    pub lookahead: Option<f32>,
    /// Frozen text–image encoder for the retrieval metrics R@1/5/10 (paper 004): a file from
    /// `caprl clip train` or a Hugging Face CLIP directory. Default: `[clip] eval`, else
    /// `[clip] reward` of the checkpoint's config; none = no retrieval metrics.
    #[arg(long, value_name = "PATH")]
    pub clip: Option<PathBuf>,
    /// Also METEOR 1.5, with the jar pycocoevalcap ships (needs Java and `pip install
    /// pycocoevalcap`; CAPRL_METEOR_JAR overrides the jar's path).
    #[arg(long)]
    pub meteor: bool,
    #[command(flatten)]
    pub compute: ComputeArgs,
}

pub fn run(args: Args, global: &Global) -> Result<()> {
    let device = args.compute.device_or_cpu()?;
    let mut loaded = load_checkpoint(&args.checkpoint, args.data.as_deref(), &device)?;
    loaded.cfg = with_decode_sets(&loaded.cfg, &global.sets)?;
    if let Some(out) = &args.out {
        let inputs = [
            Input {
                what: "checkpoint",
                path: &args.checkpoint,
            },
            Input {
                what: "data set",
                path: loaded.data.dir(),
            },
        ];
        check_output("--out", out, &inputs, &[])?;
    }
    if let Some(dtype) = args.compute.compute_dtype() {
        loaded.model.set_compute_dtype(dtype)?;
    }
    let split: SplitName = args
        .split
        .parse()
        .map_err(|e| anyhow::anyhow!("--split {}: {e}", args.split))?;
    let items = &loaded.data.split(split).items;
    let beam = args.beam.unwrap_or(loaded.cfg.decode.beam as usize);
    let diverse = args.diverse.resolve(&loaded.cfg.decode, beam)?;
    let opts = EvalOptions {
        beam,
        length_norm: loaded.cfg.decode.length_norm,
        block_trigrams: loaded.cfg.decode.block_trigrams,
        beam_groups: diverse.groups,
        diversity_lambda: diverse.lambda,
        remove_bad_endings: diverse.remove_bad_endings,
        sampling: Sampling {
            top_p: args.top_p.unwrap_or(loaded.cfg.decode.top_p as f32),
            ..Sampling::default()
        },
        limit: args.limit.unwrap_or(0),
        seed: loaded.cfg.seed,
        progress: true,
        ..EvalOptions::default()
    };
    let lambda = args
        .lookahead
        .unwrap_or(loaded.cfg.decode.lookahead_lambda as f32);
    let lookahead = match (lambda < 1.0, &loaded.value) {
        (false, _) => None,
        (true, Some(value)) => Some(Lookahead { value, lambda }),
        (true, None) => anyhow::bail!(
            "--lookahead {lambda}: {} has no value head (value.safetensors); lookahead needs a checkpoint of an actor-critic or mc-pg run",
            args.checkpoint.display()
        ),
    };
    if lookahead.is_some() && opts.beam <= 1 {
        anyhow::bail!("--lookahead ranks beams: use --beam 2 or more");
    }
    let encoder = match eval_encoder_path(args.clip.as_deref(), &loaded.cfg) {
        Some(path) => Some(
            caprl_clip::open_encoder(&path, &loaded.data.vocab)
                .with_context(|| format!("opening the evaluation encoder {}", path.display()))?,
        ),
        None => None,
    };
    // Started before decoding: a missing jar or Java is reported before the long part.
    let mut meteor = match args.meteor {
        true => Some(caprl_score::Meteor::start(&caprl_score::locate_jar()?)?),
        false => None,
    };
    let mut report = eval::evaluate_with(
        &loaded.model,
        lookahead.as_ref(),
        &loaded.data,
        items,
        &opts,
    )?;
    if let Some(enc) = &encoder {
        eval::add_retrieval(&mut report, enc.as_ref(), &loaded.data, items)?;
    }
    if let Some(m) = &mut meteor {
        eval::add_meteor(&mut report, m, items)?;
    }
    if let Some(out) = &args.out {
        write_results(out, &report)?;
    }
    print_report(&args, &loaded, &opts, lambda, &report)
}

/// The metrics of `report` on stdout: a table, or JSON with `--json`.
fn print_report(
    args: &Args,
    loaded: &Loaded,
    opts: &EvalOptions,
    lambda: f32,
    report: &EvalReport,
) -> Result<()> {
    if args.json {
        let json = serde_json::json!({
            "checkpoint": loaded.checkpoint.display().to_string(),
            "step": loaded.step,
            "split": args.split,
            "beam": opts.beam,
            "lookahead_lambda": (lambda as f64 * 1e6).round() / 1e6,
            "metrics": report.metrics,
        });
        write_stdout(&format!("{}\n", serde_json::to_string_pretty(&json)?))
    } else {
        let mut out = format!(
            "{} ({} phase, step {}) on {} ({} images, beam {})\n",
            loaded.checkpoint.display(),
            match loaded.phase {
                Phase::Xe => "xe",
                Phase::Rl => "rl",
            },
            loaded.step,
            args.split,
            report.captions.len(),
            opts.beam
        );
        for (k, v) in &report.metrics {
            out.push_str(&format!("  {k:<14} {v:>10.4}\n"));
        }
        write_stdout(&out)
    }
}

/// The checkpoint's config with the command line's `--set decode.KEY=VALUE` on top. Other keys
/// are refused: the rest of the config describes the model the checkpoint holds.
pub(crate) fn with_decode_sets(
    cfg: &caprl_common::config::RunConfig,
    sets: &[String],
) -> Result<caprl_common::config::RunConfig> {
    if let Some(data) = sets.iter().find(|s| s.trim_start().starts_with("data.dir")) {
        anyhow::bail!("--set {data}: name the data set to evaluate on with --data DIR instead");
    }
    if let Some(other) = sets.iter().find(|s| !s.trim_start().starts_with("decode.")) {
        anyhow::bail!(
            "--set {other}: only decode.* keys can change here; the rest of the config is the \
             checkpoint's (retrain, or evaluate another checkpoint, to change it)"
        );
    }
    cfg.with_sets(sets)
        .context("applying --set to the checkpoint's config")
}

/// `--clip`, else `[clip] eval`, else `[clip] reward` (with a warning: the encoder the policy
/// was rewarded against flatters it), else none.
pub(crate) fn eval_encoder_path(
    flag: Option<&Path>,
    cfg: &caprl_common::config::RunConfig,
) -> Option<PathBuf> {
    if let Some(p) = flag {
        return Some(p.to_path_buf());
    }
    if !cfg.clip.eval.is_empty() {
        return Some(PathBuf::from(&cfg.clip.eval));
    }
    if !cfg.clip.reward.is_empty() {
        tracing::warn!(
            "retrieval metrics use the reward encoder {} (set [clip] eval or --clip to a separately trained one for an unbiased R@k)",
            cfg.clip.reward
        );
        return Some(PathBuf::from(&cfg.clip.reward));
    }
    None
}

/// Captions in COCO results format: `[{"image_id", "caption"}]`, written atomically.
pub(crate) fn write_results(path: &Path, report: &EvalReport) -> Result<()> {
    let rows: Vec<serde_json::Value> = report
        .captions
        .iter()
        .map(|(id, c)| {
            let id = id
                .parse::<u64>()
                .map(serde_json::Value::from)
                .unwrap_or_else(|_| serde_json::Value::from(id.clone()));
            serde_json::json!({"image_id": id, "caption": c})
        })
        .collect();
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let tmp = tempfile::NamedTempFile::new_in(dir)?;
    serde_json::to_writer_pretty(&tmp, &rows)?;
    tmp.persist(path)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}
