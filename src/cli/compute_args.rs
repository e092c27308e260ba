//! `--device` and `--dtype`, shared by every command that computes (train, run, learner, actor,
//! eval, caption, bench).

use anyhow::Result;
use caprl_common::config::Dtype;
use caprl_learner::objective::{load_checked, CheckedConfig};
use caprl_model::model::{parse_device, DType, Device};

use super::Global;

/// Where and in what precision the model computes.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ComputeArgs {
    /// Compute device (same as --set device=...): cpu or cuda:N. A CUDA device needs a build
    /// with `--features cuda` (scripts/build-cuda.sh).
    #[arg(long)]
    pub device: Option<String>,
    /// Dtype of the forward passes (same as --set dtype=...): f32, bf16 or f16. Master weights,
    /// optimizer moments and checkpoints stay f32.
    #[arg(long, value_parser = ["f32", "bf16", "f16"])]
    pub dtype: Option<String>,
}

impl ComputeArgs {
    /// The flags as `--set` overrides, so they are validated exactly like the keys.
    pub fn sets(&self) -> Vec<String> {
        let mut sets = Vec::new();
        if let Some(d) = &self.device {
            sets.push(format!("device={d:?}"));
        }
        if let Some(d) = &self.dtype {
            sets.push(format!("dtype={d:?}"));
        }
        sets
    }

    /// The run config with these flags applied after the global `--set`s.
    pub fn load_config(&self, global: &Global) -> Result<CheckedConfig> {
        let mut sets = global.sets.clone();
        sets.extend(self.sets());
        Ok(load_checked(global.config.as_deref(), &sets)?)
    }

    /// The device for commands that read a checkpoint rather than a run config (default cpu).
    pub fn device_or_cpu(&self) -> Result<Device> {
        Ok(parse_device(self.device.as_deref().unwrap_or("cpu"))?)
    }

    /// The compute dtype given by `--dtype`, if any.
    pub fn compute_dtype(&self) -> Option<DType> {
        // Loading the config has refused a bad spelling already (`--dtype` is a config key).
        let told = self.dtype.as_deref()?.parse::<Dtype>().ok()?;
        Some(told.into())
    }
}
