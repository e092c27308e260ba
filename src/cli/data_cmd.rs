//! `caprl data synth --out DIR [--profile scenes|coco|regions] [--seed S] [--train N --val N --test N]` and
//! `caprl data stats DIR`; the audio commands are in `audio_data_cmd`.

use super::output_paths::{check_output, Input};
use super::{out, outln};
use std::path::PathBuf;

use anyhow::Context;
use caprl_data::{Dataset, SynthConfig, SynthProfile};

use super::audio_data_cmd::{self, AudioArgs, SynthAudioArgs};
use super::Global;

/// Data set tools.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Generate the synthetic captioning data set (Karpathy format + safetensors features).
    Synth(SynthArgs),
    /// Generate sound scenes: WAV clips with Clotho-style captions, prepared as log-mel features.
    SynthAudio(SynthAudioArgs),
    /// Compute log-mel features (with a cache) for a Clotho-layout directory of WAV files.
    Audio(AudioArgs),
    /// Print a summary of a data set directory (any supported format).
    Stats(StatsArgs),
    /// Open and check the run config's data set (`data.dir`; the default synthetic task is
    /// generated when missing): what `caprl local` runs before any server or role starts.
    Check,
    /// Precompute CIDEr-D document frequencies from the training references
    /// (what SCST rewards use; `caprl score --df FILE` reads it).
    Df(DfArgs),
}

/// Where `data df` writes by default, beside the captions.
const DF_FILE: &str = "train-df.bin";

#[derive(Debug, clap::Args)]
pub struct DfArgs {
    /// Data set directory.
    pub dir: PathBuf,
    /// Output file (default: DIR/train-df.bin).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct SynthArgs {
    /// Output directory; must not exist or be empty.
    #[arg(long)]
    pub out: PathBuf,
    /// `scenes`: coloured objects, 66 words, small features (trains in minutes). `coco`:
    /// COCO's sizes and word statistics (about 10,000 words, 8–15-word captions, 2,048-d fc
    /// and 36 x 2,048-d regions, about 300 KB of features per image). `regions`: the
    /// benchmark task (2–6 objects bound only in 36 shuffled regions, relations and counts,
    /// held-out colour–category pairs in val/test, annotators that differ, near-duplicate
    /// images; its ceilings in ceilings.json).
    #[arg(long, value_enum, default_value = "scenes")]
    pub profile: ProfileArg,
    /// Random seed; the same seed gives byte-identical files.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Training images [default: 10000 for scenes, 5000 for coco, 4000 for regions].
    #[arg(long)]
    pub train: Option<usize>,
    /// Validation images [default: 1000 for scenes, 500 for coco and regions].
    #[arg(long)]
    pub val: Option<usize>,
    /// Test images [default: 1000 for scenes and regions, 500 for coco].
    #[arg(long)]
    pub test: Option<usize>,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum ProfileArg {
    Scenes,
    Coco,
    Regions,
}

impl From<ProfileArg> for SynthProfile {
    fn from(p: ProfileArg) -> Self {
        match p {
            ProfileArg::Scenes => SynthProfile::Scenes,
            ProfileArg::Coco => SynthProfile::Coco,
            ProfileArg::Regions => SynthProfile::Regions,
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct StatsArgs {
    /// Data set directory.
    pub dir: PathBuf,
}

/// `quiet`: the global `-q` (no progress bar).
pub fn run(args: Args, global: &Global) -> anyhow::Result<()> {
    let quiet = global.quiet;
    match args.command {
        Command::Synth(a) => {
            let profile = SynthProfile::from(a.profile);
            let (train, val, test) = profile.default_sizes();
            let config = SynthConfig {
                seed: a.seed,
                train: a.train.unwrap_or(train),
                val: a.val.unwrap_or(val),
                test: a.test.unwrap_or(test),
                progress: !quiet,
            };
            if caprl_data::already_generated(&a.out, profile, &config) {
                // Said even under `-q`: nothing was generated, and that is news.
                outln!(
                    "{} already holds this data set (same generator version, seed and sizes); \
                     left as it is",
                    a.out.display()
                )?;
                return Ok(());
            }
            let summary =
                caprl_data::synth_profile(&a.out, profile, &config).with_context(|| {
                    format!("generating the synthetic data set in {}", a.out.display())
                })?;
            // `-q`: the data set is the output; its statistics are `caprl data stats DIR`.
            if !quiet {
                out!("{summary}")?;
            }
        }
        Command::SynthAudio(a) => audio_data_cmd::synth_audio(a)?,
        Command::Audio(a) => audio_data_cmd::prepare(a)?,
        Command::Check => {
            let cfg = global.load_config()?;
            let ds = crate::setup::open_data(&cfg, true)?;
            if !quiet {
                outln!(
                    "{}: {} train, {} val, {} test images; captions, features and vocabulary check",
                    cfg.data.dir,
                    ds.train.len(),
                    ds.val.len(),
                    ds.test.len()
                )?;
            }
        }
        Command::Stats(a) => {
            let ds = Dataset::open(&a.dir)
                .with_context(|| format!("opening data set {}", a.dir.display()))?;
            out!("{}", caprl_data::stats(&ds))?;
            print_ceilings(&a.dir)?;
        }
        Command::Df(a) => {
            if let Some(out) = &a.out {
                let data = Input {
                    what: "data set",
                    path: &a.dir,
                };
                check_output("--out", out, &[data], &[DF_FILE])?;
            }
            let ds = Dataset::open(&a.dir)
                .with_context(|| format!("opening data set {}", a.dir.display()))?;
            // Without the `<eos>` marker: `caprl score --df` scores plain captions, and the
            // marked table differs only by the n-grams that end in the marker.
            let df = caprl_reward_worker::Rewarder::training_df(&ds, &ds.train.items, false);
            let out = a.out.unwrap_or_else(|| a.dir.join(DF_FILE));
            df.save(&out)
                .with_context(|| format!("writing {}", out.display()))?;
            outln!(
                "{}: document frequencies of {} n-grams over {} training images",
                out.display(),
                df.len(),
                df.num_images()
            )?;
        }
    }
    Ok(())
}

/// The ceilings a generated task stores beside its data (`ceilings.json`), as a table.
fn print_ceilings(dir: &std::path::Path) -> anyhow::Result<()> {
    let path = dir.join(caprl_data::CEILINGS_JSON);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let c: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))?;
    let mut rows = vec![("all".to_string(), &c["all"])];
    if let Some(subsets) = c["subsets"].as_object() {
        rows.extend(subsets.iter().map(|(name, v)| (name.clone(), v)));
    }
    outln!(
        "ceilings on the {} split ({})",
        c["split"].as_str().unwrap_or("test"),
        c["scoring"].as_str().unwrap_or("")
    )?;
    outln!("  images        human CIDEr-D  BLEU-4   oracle CIDEr-D  BLEU-4")?;
    for (name, v) in rows {
        let num = |k: &str, m: &str| v[k][m].as_f64().unwrap_or(f64::NAN);
        outln!(
            "  {name:<7} {:>5}  {:>13.3}  {:>6.3}  {:>14.3}  {:>6.3}",
            v["images"].as_u64().unwrap_or(0),
            num("human", "cider_d"),
            num("human", "bleu4"),
            num("oracle", "cider_d"),
            num("oracle", "bleu4")
        )?;
    }
    Ok(())
}
