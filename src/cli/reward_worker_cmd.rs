//! `caprl reward-worker`: the reward-worker role over NATS.

use std::sync::Arc;

use anyhow::{Context, Result};
use caprl_common::bus::Queue;
use tokio::sync::watch;

use super::Global;
use crate::{roles, setup};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// NATS server URL (overrides nats.url).
    #[arg(long)]
    pub nats_url: Option<String>,
    /// Serve /metrics, /healthz, /readyz on HOST:PORT.
    #[arg(long)]
    pub metrics_addr: Option<String>,
    /// This worker's name (default: hostname-pid).
    #[arg(long)]
    pub id: Option<String>,
}

pub fn run(args: Args, global: &Global) -> Result<()> {
    let cfg = global.load_config()?;
    let data = setup::open_data(&cfg, false)?;
    let id = args.id.unwrap_or_else(roles::default_id);
    let worker = roles::worker_config(&cfg, &data, id.clone())?;
    drop(data);
    let rt = roles::runtime()?;
    let bus = rt.block_on(roles::connect(
        &cfg,
        args.nats_url.as_deref(),
        &[Queue::Rollouts],
    ))?;
    let (_metrics, readiness) =
        roles::serve_metrics(args.metrics_addr.as_deref(), "reward-worker", &cfg, &id)?;
    readiness.set_ready(true);
    let (stop_tx, stop_rx) = watch::channel(false);
    roles::stop_on_signals(&rt, Arc::new(stop_tx));
    tracing::info!("reward worker {id} running (run {})", cfg.runtime.run_id);
    let stats = rt
        .block_on(caprl_reward_worker::run(worker, bus, stop_rx))
        .with_context(|| format!("reward worker {id}"))?;
    tracing::info!(
        "reward worker {id} stopped: {} scored, {} rejected, {} redeliveries",
        stats.scored,
        stats.rejected,
        stats.redeliveries
    );
    Ok(())
}
