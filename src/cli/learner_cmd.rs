//! `caprl learner`: the learner role over NATS. Runs the XE warm start in
//! process, then the RL phase with actors and reward workers on the bus.

use std::sync::Arc;

use anyhow::Result;
use caprl_common::role::{self, Role};
use caprl_learner::driver::Driver;
use caprl_learner::run as training;
use tokio::sync::watch;

use super::compute_args::ComputeArgs;
use super::{write_stdout, Global};
use crate::{roles, setup};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub compute: ComputeArgs,
    #[command(flatten)]
    pub role: roles::RoleArgs,
    /// Continue from the newest valid checkpoint; rollouts and scored results
    /// already in JetStream are used, not dropped.
    #[arg(long)]
    pub resume: bool,
    /// Skip XE and start RL from this checkpoint's weights (ignored when --resume finds one).
    #[arg(long, value_name = "CHECKPOINT")]
    pub start_from: Option<std::path::PathBuf>,
}

pub fn run(args: Args, global: &Global) -> Result<()> {
    let cfg = args.compute.load_config(global)?;
    // The device first: a bad one fails before any data is generated or read.
    let device = setup::device(&cfg)?;
    // Before anything touches the run directory (or the bus): one learner per run_dir.
    let lock = training::lock_run_dir(&cfg)?;
    let data = Arc::new(setup::open_data(&cfg, true)?);
    let Some(started) = roles::start_role(&cfg, Role::Learner, "learner", &args.role)? else {
        return Ok(());
    };
    let heartbeat = {
        let _guard = started.rt.enter();
        let (_v_tx, v_rx) = watch::channel(0u64);
        role::spawn_heartbeat(
            Arc::clone(&started.bus),
            Role::Learner,
            "learner".into(),
            v_rx,
            started.shutdown.clone(),
        )
    };
    let mut driver = Driver::new(
        Arc::clone(&started.bus),
        started.rt.handle().clone(),
        started.shutdown.clone(),
        roles::driver_options(&cfg),
    );
    driver.set_readiness(started.readiness.clone());
    let outcome = training::train(
        &cfg,
        &data,
        &device,
        args.resume,
        args.start_from.as_deref(),
        &mut driver,
        &lock,
    );
    heartbeat.abort();
    let outcome = outcome?;
    let t = &driver.totals;
    let distinct: std::collections::BTreeSet<_> = t.used.iter().collect();
    let mut out = format!(
        "scored rollouts used {}, {} duplicates, {} dropped stale, {} rejected, {} redeliveries\n\
         task ids used {} ({} distinct)\n",
        t.scored,
        t.duplicates,
        t.dropped_stale,
        t.rejected,
        t.redeliveries,
        t.used.len(),
        distinct.len()
    );
    if let Some(p) = &outcome.best_rl {
        out.push_str(&format!("best RL checkpoint: {}\n", p.display()));
    }
    write_stdout(&out)
}
