//! `caprl actor`: the actor role over NATS.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use caprl_actor::ActorConfig;
use caprl_common::role::Role;

use super::compute_args::ComputeArgs;
use super::Global;
use crate::{roles, setup};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub compute: ComputeArgs,
    #[command(flatten)]
    pub role: roles::RoleArgs,
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
        ActorConfig::for_run(&cfg, data, device, id.clone(), args.compute.compute_dtype())?;
    actor.delay = Duration::from_millis(args.delay_ms);
    let Some(started) = roles::start_role(&cfg, Role::Actor, &id, &args.role)? else {
        return Ok(());
    };
    let stats = started
        .run(|bus, shutdown| caprl_actor::run(actor, bus, shutdown))
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
