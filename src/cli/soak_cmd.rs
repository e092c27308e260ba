//! `caprl soak`: a long run under random kills, pauses, broker restarts, duplicate roles and
//! full disks, checked at the end of every round against an undisturbed run (see
//! [`crate::soak`] and docs/runtime.md).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Result};

use super::Global;
use crate::soak::{self, Options};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// How long to inject faults, in minutes (the round under way then finishes, unfaulted).
    #[arg(long, default_value_t = 30.0)]
    pub minutes: f64,
    /// Seed of the fault schedule: the same seed draws the same faults in the same order.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Mean seconds between two faults.
    #[arg(long, default_value_t = 6.0)]
    pub fault_every: f64,
    /// Actor processes.
    #[arg(long, default_value_t = 2)]
    pub actors: usize,
    /// Reward-worker processes.
    #[arg(long, default_value_t = 2)]
    pub reward_workers: usize,
    /// Where the data, the reference run, the rounds, faults.log and soak.json go.
    #[arg(long, default_value = "runs/soak")]
    pub out: PathBuf,
    /// The most resident memory (MiB) any role may reach.
    #[arg(long, default_value_t = 1024)]
    pub max_rss_mib: u64,
    /// Minutes after which an unfinished round counts as stalled.
    #[arg(long, default_value_t = 10.0)]
    pub round_timeout: f64,
}

pub fn run(args: Args, global: &Global) -> Result<()> {
    if args.actors == 0 || args.reward_workers == 0 {
        bail!("caprl soak needs --actors >= 1 and --reward-workers >= 1");
    }
    let positive = |name: &str, v: f64| match v.is_finite() && v > 0.0 {
        true => Ok(Duration::from_secs_f64(v)),
        false => bail!("{name} must be a positive number, got {v}"),
    };
    let opts = Options {
        duration: positive("--minutes", args.minutes * 60.0)?,
        seed: args.seed,
        mean_gap: positive("--fault-every", args.fault_every)?,
        actors: args.actors,
        reward_workers: args.reward_workers,
        out: args.out,
        max_rss_mib: args.max_rss_mib,
        round_timeout: positive("--round-timeout", args.round_timeout * 60.0)?,
    };
    let report = soak::run(&opts, global)?;
    if !report.passed {
        bail!(
            "the soak failed an invariant: see {} (replay the schedule with --seed {})",
            opts.out.join("faults.log").display(),
            opts.seed
        );
    }
    Ok(())
}
