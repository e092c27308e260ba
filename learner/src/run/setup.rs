//! What the run config fixes for training: the captioner's shape, the compute dtype, the
//! learning-rate schedule of a phase and AdamW's settings.

use super::Result;
use crate::trainer::Phase;
use crate::LearnerError;
use caprl_common::config::{self, RunConfig};
use caprl_common::data::Dataset;
use caprl_common::model::{CaptionerConfig, DType, ModelKind, TransformerShape};
use caprl_common::optim::{AdamWParams, Schedule};

/// The captioner's shape: the `[model]` section plus what the data set fixes.
pub fn captioner_config(cfg: &RunConfig, data: &Dataset) -> Result<CaptionerConfig> {
    let kind = cfg.model.kind;
    if kind == ModelKind::Crnn && data.att_shape().is_none() {
        return Err(LearnerError::Misconfigured(format!(
            "model.kind = \"crnn\" needs log-mel frames, but {} has only global (fc) features; prepare audio with `caprl data audio` or `caprl data synth-audio`",
            cfg.data.dir
        )));
    }
    if kind == ModelKind::Att && data.att_shape().is_none() {
        return Err(LearnerError::Misconfigured(format!(
            "model.kind = \"att\" needs region features, but {} has only global (fc) features; use model.kind = \"fc\"",
            cfg.data.dir
        )));
    }
    let c = CaptionerConfig {
        kind,
        rnn: cfg.model.rnn,
        layers: cfg.model.layers as usize,
        embed: cfg.model.embed as usize,
        hidden: cfg.model.hidden as usize,
        att_hidden: cfg.model.att_hidden as usize,
        crnn_width: cfg.model.crnn_width as usize,
        transformer: TransformerShape {
            enc_layers: cfg.model.enc_layers as usize,
            dec_layers: cfg.model.dec_layers as usize,
            d_model: cfg.model.d_model as usize,
            heads: cfg.model.heads as usize,
            d_ff: cfg.model.d_ff as usize,
            tie_embed: cfg.model.tie_embed,
            global_region: cfg.model.global_region,
        },
        dropout: cfg.model.dropout as f32,
        vocab_size: data.vocab.len(),
        fc_dim: data.fc_dim(),
        att: data.att_shape(),
        max_len: cfg.data.max_len as usize,
        dtype: DType::F32,
        // Master weights, optimizer moments and checkpoints stay f32 whatever `dtype` is.
        compute_dtype: cfg.dtype.into(),
    };
    c.validate()?;
    Ok(c)
}

/// The learning-rate schedule of one phase of `epochs` epochs over `n_items` images.
pub fn schedule(cfg: &RunConfig, phase: Phase, epochs: u64, n_items: usize) -> Schedule {
    let lr = match phase {
        Phase::Xe => cfg.optim.lr,
        Phase::Rl => cfg.optim.rl_lr,
    };
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
        // The width it scales by is the Transformer's; a recurrent model's is its hidden size.
        config::Schedule::Noam if phase == Phase::Xe => Schedule::Noam {
            factor: cfg.optim.noam_factor,
            d_model: match cfg.model.kind {
                ModelKind::Transformer => cfg.model.d_model,
                _ => cfg.model.hidden,
            } as u64,
            warmup: cfg.optim.warmup_steps,
        },
        config::Schedule::Noam => Schedule::Constant { lr },
    }
}

/// AdamW's settings from `[optim]`.
pub fn adam_params(cfg: &RunConfig) -> AdamWParams {
    AdamWParams {
        beta1: cfg.optim.beta1,
        beta2: cfg.optim.beta2,
        eps: cfg.optim.eps,
        weight_decay: cfg.optim.weight_decay,
    }
}
