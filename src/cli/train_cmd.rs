//! `caprl train`: XE warm start, then the configured RL objective, in one process.

use std::path::PathBuf;

use anyhow::Result;
use caprl_learner::run as training;

use super::compute_args::ComputeArgs;
use super::{write_stdout, Global};
use crate::{roles, setup};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Objective (same as --set train.objective=...): xe, scst, sle, mc-pg, actor-critic.
    #[arg(long)]
    pub objective: Option<String>,
    /// Continue from the newest valid checkpoint in the checkpoint dir.
    #[arg(long)]
    pub resume: bool,
    /// Skip XE and start the RL objective from this checkpoint's weights (e.g. an earlier
    /// run's `best-xe`); it is also the reference model of `train.kl_coef`.
    #[arg(long, value_name = "CHECKPOINT")]
    pub start_from: Option<PathBuf>,
    #[command(flatten)]
    pub compute: ComputeArgs,
}

/// The config with the command's shortcut flags applied as `--set` overrides,
/// so they are validated (and reported) exactly like the keys they stand for.
pub(crate) fn config_with(
    global: &Global,
    objective: Option<&str>,
    compute: &ComputeArgs,
) -> Result<caprl_learner::objective::CheckedConfig> {
    let mut sets = global.sets.clone();
    if let Some(o) = objective {
        sets.push(format!("train.objective={o:?}"));
    }
    sets.extend(compute.sets());
    Ok(caprl_learner::objective::load_checked(
        global.config.as_deref(),
        &sets,
    )?)
}

pub fn run(args: Args, global: &Global) -> Result<()> {
    let cfg = config_with(global, args.objective.as_deref(), &args.compute)?;
    // The device first: a bad one fails before any data is generated or read.
    let device = setup::device(&cfg)?;
    // Before anything touches the run directory (or the bus): one learner per run_dir.
    let lock = training::lock_run_dir(&cfg)?;
    let data = std::sync::Arc::new(setup::open_data(&cfg, true)?);
    let outcome = roles::with_inproc_roles(&cfg, &data, &device, |driver| {
        Ok(training::train(
            &cfg,
            &data,
            &device,
            args.resume,
            args.start_from.as_deref(),
            driver,
            &lock,
        )?)
    })?;
    let show = |p: &Option<PathBuf>| p.as_ref().map(|p| p.display().to_string());
    let mut out = String::new();
    if let Some(p) = show(&outcome.best_xe) {
        out.push_str(&format!("best XE checkpoint: {p}\n"));
    }
    if let Some(p) = show(&outcome.best_rl) {
        out.push_str(&format!("best RL checkpoint: {p}\n"));
    }
    write_stdout(&out)
}
