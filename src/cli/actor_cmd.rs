//! `caprl actor`: the actor role over NATS.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use caprl_common::bus::Queue;
use tokio::sync::watch;

use super::compute_args::ComputeArgs;
use super::Global;
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
    /// This actor's name (default: hostname-pid).
    #[arg(long)]
    pub id: Option<String>,
    /// Wait this long before each decode (to test slow actors).
    #[arg(long, hide = true, default_value_t = 0)]
    pub delay_ms: u64,
}

pub fn run(args: Args, global: &Global) -> Result<()> {
    let cfg = args.compute.load_config(global)?;
    // The device first: a bad one fails before any data is generated or read.
    let device = setup::device(&cfg)?;
    let data = Arc::new(setup::open_data(&cfg, false)?);
    let id = args.id.unwrap_or_else(roles::default_id);
    let mut actor =
        roles::actor_config(&cfg, data, device, id.clone(), args.compute.compute_dtype())?;
    actor.delay = Duration::from_millis(args.delay_ms);
    let rt = roles::runtime()?;
    let bus = rt.block_on(roles::connect(
        &cfg,
        args.nats_url.as_deref(),
        &[Queue::Tasks],
    ))?;
    let (_metrics, readiness) =
        roles::serve_metrics(args.metrics_addr.as_deref(), "actor", &cfg, &id)?;
    readiness.set_ready(true);
    let (stop_tx, stop_rx) = watch::channel(false);
    roles::stop_on_signals(&rt, Arc::new(stop_tx));
    tracing::info!("actor {id} running (run {})", cfg.runtime.run_id);
    let stats = rt
        .block_on(caprl_actor::run(actor, bus, stop_rx))
        .with_context(|| format!("actor {id}"))?;
    tracing::info!(
        "actor {id} stopped: {} rollouts, {} rejected, {} redeliveries, {} refused snapshots",
        stats.rollouts,
        stats.rejected,
        stats.redeliveries,
        stats.refused_snapshots
    );
    Ok(())
}
