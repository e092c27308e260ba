//! `caprl reward-worker`: the reward-worker role over NATS.

use anyhow::{Context, Result};
use caprl_common::role::Role;

use super::Global;
use crate::{roles, setup};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub role: roles::RoleArgs,
    /// This worker's name (default: hostname-pid).
    #[arg(long)]
    pub id: Option<String>,
}

pub fn run(args: Args, global: &Global) -> Result<()> {
    let cfg = global.load_config()?;
    let id = args.id.unwrap_or_else(roles::default_id);
    // The data set is needed only to build the references and document frequencies.
    let worker = caprl_common::process::handing_back_freed_pages(|| -> Result<_> {
        let started = std::time::Instant::now();
        let data = setup::open_data(&cfg, false)?;
        tracing::info!(
            "reward worker {id}: data set read in {:.1} s",
            started.elapsed().as_secs_f64()
        );
        roles::worker_config(&cfg, &data, id.clone())
    })?;
    let Some(started) = roles::start_role(&cfg, Role::RewardWorker, &id, &args.role)? else {
        return Ok(());
    };
    let stats = started
        .run(|bus, shutdown| caprl_reward_worker::run(worker, bus, shutdown))
        .with_context(|| format!("reward worker {id}"))?;
    tracing::info!(
        "reward worker {id} stopped: {} scored, {} rejected, {} redeliveries, {} internal faults",
        stats.scored,
        stats.rejected,
        stats.redeliveries,
        stats.internal_faults
    );
    Ok(())
}
