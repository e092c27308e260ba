//! `caprl data synth-audio --out DIR` and `caprl data audio --clotho DIR --out DIR`:
//! generated sound scenes, and log-mel features for a Clotho-layout directory.

use super::{out, outln};
use std::path::PathBuf;

use anyhow::Context;
use caprl_data::audio::{self, MelConfig, PrepareConfig, SynthAudioConfig};
use caprl_data::Dataset;

/// Front-end settings shared by both commands.
#[derive(Debug, Clone, clap::Args)]
pub struct FrontEndArgs {
    /// Audio is resampled to this rate before the log-mel analysis.
    #[arg(long, default_value_t = 16_000)]
    pub sample_rate: u32,
    /// Frames per clip (cropped or padded); default: the longest training clip.
    #[arg(long)]
    pub frames: Option<usize>,
}

impl FrontEndArgs {
    fn prepare(&self) -> PrepareConfig {
        PrepareConfig {
            mel: MelConfig {
                sample_rate: self.sample_rate,
                ..MelConfig::default()
            },
            frames: self.frames,
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct SynthAudioArgs {
    /// Output directory; must not exist or be empty.
    #[arg(long)]
    pub out: PathBuf,
    /// Random seed; the same seed gives byte-identical WAV and CSV files.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Training clips (the size `configs/audio-scst.toml` is scaled for).
    #[arg(long, default_value_t = 1200)]
    pub train: usize,
    /// Validation clips.
    #[arg(long, default_value_t = 200)]
    pub val: usize,
    /// Test clips.
    #[arg(long, default_value_t = 200)]
    pub test: usize,
    /// Clip length in seconds.
    #[arg(long, default_value_t = 2.0)]
    pub seconds: f64,
    #[command(flatten)]
    pub front: FrontEndArgs,
}

#[derive(Debug, clap::Args)]
pub struct AudioArgs {
    /// Clotho directory: clotho_captions_{development,validation,evaluation}.csv and one
    /// audio directory per split (development/, validation/, evaluation/).
    #[arg(long)]
    pub clotho: PathBuf,
    /// Data set directory to write (captions.csv, features, audio_norm.json, mel-cache/).
    #[arg(long)]
    pub out: PathBuf,
    #[command(flatten)]
    pub front: FrontEndArgs,
}

pub fn synth_audio(a: SynthAudioArgs) -> anyhow::Result<()> {
    let config = SynthAudioConfig {
        seed: a.seed,
        train: a.train,
        val: a.val,
        test: a.test,
        seconds: a.seconds,
        sample_rate: a.front.sample_rate,
        prepare: a.front.prepare(),
    };
    let summary = audio::synth_audio(&a.out, &config)
        .with_context(|| format!("generating sound scenes in {}", a.out.display()))?;
    outln!("wrote {} (seed {}): {summary}", a.out.display(), a.seed)?;
    print_stats(&a.out)
}

pub fn prepare(a: AudioArgs) -> anyhow::Result<()> {
    let summary = audio::prepare_clotho(&a.clotho, &a.out, &a.front.prepare())
        .with_context(|| format!("preparing audio features from {}", a.clotho.display()))?;
    outln!("wrote {}: {summary}", a.out.display())?;
    print_stats(&a.out)
}

fn print_stats(dir: &std::path::Path) -> anyhow::Result<()> {
    let ds = Dataset::open(dir).with_context(|| format!("opening data set {}", dir.display()))?;
    out!("{}", caprl_data::stats(&ds))?;
    Ok(())
}
