//! `caprl learner`: the learner role over NATS. Runs the XE warm start in
//! process, then the RL phase with actors and reward workers on the bus.

use std::sync::Arc;

use anyhow::Result;
use caprl_common::bus::Queue;
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
    /// NATS server URL (overrides nats.url).
    #[arg(long)]
    pub nats_url: Option<String>,
    /// Serve /metrics, /healthz, /readyz on HOST:PORT.
    #[arg(long)]
    pub metrics_addr: Option<String>,
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
    let data = Arc::new(setup::open_data(&cfg, true)?);
    let rt = roles::runtime()?;
    let bus = rt.block_on(roles::connect(&cfg, args.nats_url.as_deref(), &Queue::ALL))?;
    let (_metrics, readiness) =
        roles::serve_metrics(args.metrics_addr.as_deref(), "learner", &cfg, "learner")?;
    let (stop_tx, stop_rx) = watch::channel(false);
    roles::stop_on_signals(&rt, Arc::new(stop_tx));
    let heartbeat = {
        let _guard = rt.enter();
        let (_v_tx, v_rx) = watch::channel(0u64);
        caprl_actor::spawn_heartbeat(
            Arc::clone(&bus),
            "learner",
            "learner".into(),
            v_rx,
            stop_rx.clone(),
            std::time::Duration::from_secs(2),
        )
    };
    let mut driver = Driver::new(
        bus,
        rt.handle().clone(),
        stop_rx,
        roles::driver_options(&cfg),
    );
    driver.set_readiness(readiness);
    let outcome = training::train(
        &cfg,
        &data,
        &device,
        args.resume,
        args.start_from.as_deref(),
        &mut driver,
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
