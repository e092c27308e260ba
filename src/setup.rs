//! Turning the run config into the objects a command needs: the data set
//! (generated on first use at the default synthetic location), the device, the
//! model shape and the learning-rate schedule.

use std::path::Path;

use anyhow::{Context, Result};
use caprl_common::config::{self, DataConfig, RunConfig};
use caprl_common::data::{synth, Dataset, SynthConfig};
use caprl_common::model::{parse_device, CaptionerConfig, DType, Device, ModelKind};
use caprl_common::optim::Schedule;

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
    Dataset::open(dir).with_context(|| {
        format!(
            "opening the data set {} (generate one with `caprl data synth --out {}`)",
            dir.display(),
            dir.display()
        )
    })
}

/// The compute device named by `device` in the config.
pub fn device(cfg: &RunConfig) -> Result<Device> {
    Ok(parse_device(&cfg.device.to_string())?)
}

/// The dtype of the forward passes named by the config's `dtype` key. Master weights, optimizer
/// moments and checkpoints stay f32 whatever it is.
pub fn compute_dtype(d: config::Dtype) -> DType {
    d.into()
}

/// The captioner's shape: the `[model]` section plus what the data set fixes.
pub fn captioner_config(cfg: &RunConfig, data: &Dataset) -> Result<CaptionerConfig> {
    let kind = cfg.model.kind;
    if kind == ModelKind::Crnn && data.att_shape().is_none() {
        anyhow::bail!(
            "model.kind = \"crnn\" needs log-mel frames, but {} has only global (fc) features; prepare audio with `caprl data audio` or `caprl data synth-audio`",
            cfg.data.dir
        );
    }
    if kind == ModelKind::Att && data.att_shape().is_none() {
        anyhow::bail!(
            "model.kind = \"att\" needs region features, but {} has only global (fc) features; use model.kind = \"fc\"",
            cfg.data.dir
        );
    }
    let c = CaptionerConfig {
        kind,
        rnn: cfg.model.rnn,
        layers: cfg.model.layers as usize,
        embed: cfg.model.embed as usize,
        hidden: cfg.model.hidden as usize,
        att_hidden: cfg.model.att_hidden as usize,
        crnn_width: cfg.model.crnn_width as usize,
        dropout: cfg.model.dropout as f32,
        vocab_size: data.vocab.len(),
        fc_dim: data.fc_dim(),
        att: data.att_shape(),
        max_len: cfg.data.max_len as usize,
        dtype: DType::F32,
        compute_dtype: cfg.dtype.into(),
    };
    c.validate()?;
    Ok(c)
}

/// The learning-rate schedule of one phase of `epochs` epochs over `n_items` images.
pub fn schedule(cfg: &RunConfig, lr: f64, epochs: u64, n_items: usize) -> Schedule {
    match cfg.optim.schedule {
        config::Schedule::Constant => Schedule::Constant { lr },
        config::Schedule::Step => Schedule::Step {
            lr,
            every: cfg.optim.decay_every as u64,
            rate: cfg.optim.decay_rate,
        },
        config::Schedule::Cosine => Schedule::Cosine {
            lr,
            warmup: cfg.optim.warmup_steps,
            total: epochs * n_items.div_ceil(cfg.train.batch_size.max(1) as usize) as u64,
        },
    }
}
