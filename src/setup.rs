//! Turning the run config into the objects a command needs: the data set
//! (generated on first use at the default synthetic location) and the device. The model shape
//! and the learning-rate schedule are the learner's ([`caprl_learner::run`]).

use std::path::Path;

use anyhow::{Context, Result};
use caprl_common::config::{DataConfig, RunConfig};
use caprl_data::{synth, Dataset, SynthConfig};
use caprl_model::model::{open_device, Device};

/// Opens `data.dir`. A missing directory is generated (the synthetic task, cached afterwards)
/// only when `generate_if_missing` is set and it is the default location `data/synth`: any
/// other missing path is a typo or an unmounted volume, and training on generated data in its
/// place would look like success.
pub fn open_data(cfg: &RunConfig, generate_if_missing: bool) -> Result<Dataset> {
    let dir = Path::new(&cfg.data.dir);
    if !dir.exists() {
        let default = DataConfig::default().dir;
        if !generate_if_missing || dir != Path::new(&default) {
            anyhow::bail!(
                "data.dir {} does not exist; check the path (`--set data.dir=...` or [data] dir in \
                 the config), or generate the synthetic task there with `caprl data synth --out {}` \
                 (only the default {default} is generated on first use)",
                dir.display(),
                dir.display()
            );
        }
        tracing::info!(
            "no data set at {}: generating the synthetic task (seed {})",
            dir.display(),
            cfg.seed
        );
        let summary = synth(
            dir,
            &SynthConfig {
                seed: cfg.seed,
                ..SynthConfig::default()
            },
        )
        .with_context(|| format!("generating the synthetic data set in {}", dir.display()))?;
        tracing::info!("{summary}");
    }
    let options = cfg.data.open_options();
    Dataset::open_with(dir, &options).with_context(|| {
        // `data synth` refuses a directory that is not empty, so the suggestion names a new one.
        let fresh = format!("{}-new", dir.display());
        format!(
            "opening the data set {} (fix the file named below, or generate a fresh synthetic set \
             with `caprl data synth --out {fresh}` and train on it with `--set data.dir={fresh}`)",
            dir.display(),
        )
    })
}

/// The compute device named by `device` in the config.
pub fn device(cfg: &RunConfig) -> Result<Device> {
    Ok(open_device(cfg.device)?)
}
