//! `caprl clip train`: trains the dual encoder of paper 004's rewards and retrieval metrics on
//! the data set's captions.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use caprl_clip::train::{self, Pairs, TrainOptions};
use caprl_data::{Dataset, Item};

use super::{write_stdout, Global};
use crate::setup;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: ClipCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum ClipCommand {
    /// Train a dual encoder (symmetric InfoNCE) on the training captions; prints val R@k per epoch.
    Train(TrainArgs),
}

#[derive(Debug, clap::Args)]
pub struct TrainArgs {
    /// Where to write the encoder (safetensors).
    #[arg(long)]
    pub out: PathBuf,
    /// Data set directory (default: data.dir of the config; the synthetic set is generated
    /// when that is the default `data/synth` and missing).
    #[arg(long)]
    pub data: Option<PathBuf>,
    #[arg(long, default_value_t = TrainOptions::default().epochs)]
    pub epochs: usize,
    #[arg(long, default_value_t = TrainOptions::default().batch)]
    pub batch: usize,
    #[arg(long, default_value_t = TrainOptions::default().lr)]
    pub lr: f64,
    /// Seed of the initialisation and the batches: train the evaluation encoder with another
    /// seed than the reward encoder.
    #[arg(long, default_value_t = TrainOptions::default().seed)]
    pub seed: u64,
    /// Do not pair images with their full descriptions (`descriptions.json`), only references.
    #[arg(long)]
    pub no_descriptions: bool,
}

pub fn run(args: Args, global: &Global) -> Result<()> {
    match args.command {
        ClipCommand::Train(a) => train_cmd(a, global),
    }
}

fn train_cmd(args: TrainArgs, global: &Global) -> Result<()> {
    let mut cfg = global.load_config()?.into_inner();
    if let Some(d) = &args.data {
        cfg.data.dir = d.display().to_string();
    }
    if args.epochs == 0 || args.batch < 2 {
        anyhow::bail!(
            "--epochs must be >= 1 and --batch >= 2 (a contrastive batch needs negatives)"
        );
    }
    let data = setup::open_data(&cfg, args.data.is_none())?;
    let (pairs, described) = training_pairs(&data, !args.no_descriptions)?;
    if pairs.rows.len() < 2 {
        anyhow::bail!(
            "{}: the training split has {} captioned images; a contrastive encoder needs at least 2",
            data.dir().display(),
            pairs.rows.len()
        );
    }
    tracing::info!(
        "training a dual encoder on {} images ({} with descriptions)",
        pairs.rows.len(),
        described
    );
    let opts = TrainOptions {
        epochs: args.epochs,
        batch: args.batch,
        lr: args.lr,
        seed: args.seed,
    };
    let mut lines = String::from("epoch  loss     val R@1 t2i  R@5 t2i  R@1 i2t  R@5 i2t\n");
    let enc = train::train(&data, &pairs, &opts, &mut |r| {
        lines.push_str(&format!(
            "{:>5}  {:<7.4}  {:>11.1}  {:>7.1}  {:>7.1}  {:>7.1}\n",
            r.epoch + 1,
            r.loss,
            r.val.t2i[0],
            r.val.t2i[1],
            r.val.i2t[0],
            r.val.i2t[1]
        ));
    })?;
    if let Some(dir) = args.out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    enc.save(&args.out)?;
    lines.push_str(&format!("wrote {}\n", args.out.display()));
    write_stdout(&lines)
}

/// Every training image with its references, plus its full description when `descriptions`
/// and the data set has them; also returns how many images had one.
pub(crate) fn training_pairs(data: &Dataset, descriptions: bool) -> Result<(Pairs, usize)> {
    let described = match descriptions {
        true => read_descriptions(data.dir())?,
        false => Default::default(),
    };
    let extra = |it: &Item| described.get(&it.id).map(|words| data.vocab.encode(words));
    let pairs = Pairs::from_items(data, &data.train.items, &extra);
    let n = data
        .train
        .items
        .iter()
        .filter(|it| described.contains_key(&it.id))
        .count();
    Ok((pairs, n))
}

/// `descriptions.json` of a synthetic data set (`[{id, description}]`), tokenised like the
/// references; empty when the data set has none.
fn read_descriptions(dir: &Path) -> Result<std::collections::HashMap<String, Vec<String>>> {
    #[derive(serde::Deserialize)]
    struct Record {
        id: String,
        description: String,
    }
    let path = dir.join("descriptions.json");
    if !path.exists() {
        return Ok(Default::default());
    }
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let records: Vec<Record> = serde_json::from_str(&text).with_context(|| {
        format!(
            "{}: expected a list of {{\"id\", \"description\"}} (pass --no-descriptions to skip it)",
            path.display()
        )
    })?;
    Ok(records
        .into_iter()
        .map(|r| (r.id, caprl_data::tokenize(&r.description)))
        .collect())
}
