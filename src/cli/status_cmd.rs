//! `caprl status`: what a run on NATS is doing: policy version, queue
//! depths, live actors / reward workers / learner (heartbeats in KV) and
//! each actor's policy lag.

use anyhow::{Context, Result};
use caprl_common::bus::{Bus, BusOptions, NatsBus, Queue};
use caprl_common::role::{Role, Roster, LIVE_WITHIN};

use super::{write_stdout, Global};
use crate::roles;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// NATS server URL (overrides nats.url).
    #[arg(long)]
    pub nats_url: Option<String>,
    /// Run id (overrides runtime.run_id).
    #[arg(long)]
    pub run: Option<String>,
}

/// Prints the run's state; creates nothing on the broker (an unknown run is an error).
pub fn run(args: Args, global: &Global) -> Result<()> {
    let mut cfg = global.load_config()?.into_inner();
    if let Some(r) = args.run {
        cfg.runtime.run_id = r;
    }
    let rt = roles::runtime()?;
    let text = rt.block_on(async {
        let nc = cfg.nats.resolved(args.nats_url.as_deref());
        let bus = NatsBus::open_existing(&nc, &BusOptions::of(&cfg.runtime, &cfg.nats))
            .await
            .with_context(|| format!("asking NATS at {} about the run", nc.url))?;
        describe(&bus, &cfg.runtime.run_id).await
    })?;
    write_stdout(&text)
}

/// The run's policy version, queue depths and live processes (with their problems).
async fn describe(bus: &dyn Bus, run_id: &str) -> Result<String> {
    let latest = bus.latest().await?;
    let mut out = format!("run {run_id}\n");
    let version = latest.as_ref().map(|m| m.version);
    match &latest {
        Some(m) => out.push_str(&format!(
            "policy version {} (snapshot {} bytes, {})\n",
            m.version, m.bytes, m.checksum
        )),
        None => out.push_str("policy version: none published yet\n"),
    }
    out.push_str("queues (waiting + in flight):\n");
    for q in Queue::ALL {
        out.push_str(&format!("  {:<9} {}\n", q.name(), bus.depth(q).await?));
    }
    let roster = Roster::read(bus).await?;
    let run_data = roster
        .of(Role::Learner)
        .next()
        .map(|m| m.heartbeat.data.clone());
    for role in Role::ALL {
        let members: Vec<_> = roster.of(role).collect();
        out.push_str(&format!("live {}s: {}\n", role.name(), members.len()));
        for m in members {
            let hb = &m.heartbeat;
            let lag = match (role, version) {
                (Role::Actor, Some(v)) => format!(
                    ", policy v{} (lag {})",
                    hb.policy_version.0,
                    v.saturating_sub(hb.policy_version.0)
                ),
                _ => String::new(),
            };
            out.push_str(&format!(
                "  {} (seen {:.1} s ago{lag}, data set {})\n",
                hb.id,
                m.age.as_secs_f64(),
                hb.data
            ));
            let unable = match &run_data {
                Some(data) if role != Role::Learner => m.unable(data),
                _ => hb.problem.clone(),
            };
            if let Some(why) = unable {
                out.push_str(&format!("    cannot work: {why}\n"));
            }
        }
    }
    if roster.gone > 0 {
        out.push_str(&format!(
            "stale heartbeats (no sign for > {} s): {}\n",
            LIVE_WITHIN.as_secs(),
            roster.gone
        ));
    }
    Ok(out)
}
