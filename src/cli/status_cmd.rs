//! `caprl status`: what a run on NATS is doing: policy version, queue
//! depths, live actors / reward workers / learner (heartbeats in KV) and
//! each actor's policy lag.

use std::time::{Duration, SystemTime};

use anyhow::Result;
use caprl_common::bus::Queue;
use caprl_common::role::{self, Role};
use caprl_wire::Heartbeat;

use super::{write_stdout, Global};
use crate::roles;

/// A heartbeat older than this marks its process as gone.
const LIVE_WITHIN: Duration = Duration::from_secs(10);

#[derive(Debug, clap::Args)]
pub struct Args {
    /// NATS server URL (overrides nats.url).
    #[arg(long)]
    pub nats_url: Option<String>,
    /// Run id (overrides runtime.run_id).
    #[arg(long)]
    pub run: Option<String>,
}

pub fn run(args: Args, global: &Global) -> Result<()> {
    let mut cfg = global.load_config()?;
    if let Some(r) = args.run {
        cfg.runtime.run_id = r;
    }
    let rt = roles::runtime()?;
    let text = rt.block_on(async {
        let bus = roles::connect(&cfg, args.nats_url.as_deref(), &[]).await?;
        let latest = bus.latest().await?;
        let mut out = format!("run {}\n", cfg.runtime.run_id);
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
        let now = SystemTime::now();
        let mut live: Vec<(Heartbeat, Duration)> = Vec::new();
        let mut gone = 0usize;
        for e in bus.kv_entries(role::HEARTBEAT_PREFIX).await? {
            let age = now.duration_since(e.updated).unwrap_or_default();
            match caprl_wire::decode::<Heartbeat>(&e.value, caprl_wire::DEFAULT_MAX_MESSAGE_BYTES) {
                Ok(hb) if age <= LIVE_WITHIN => live.push((hb, age)),
                Ok(_) => gone += 1,
                Err(err) => tracing::warn!("heartbeat {} unreadable: {err}", e.key),
            }
        }
        for role in Role::ALL.map(Role::name) {
            let of_role: Vec<&(Heartbeat, Duration)> =
                live.iter().filter(|(h, _)| h.role == role).collect();
            out.push_str(&format!("live {role}s: {}\n", of_role.len()));
            for (hb, age) in of_role {
                let lag = match (role, version) {
                    ("actor", Some(v)) => format!(
                        ", policy v{} (lag {})",
                        hb.policy_version.0,
                        v.saturating_sub(hb.policy_version.0)
                    ),
                    _ => String::new(),
                };
                out.push_str(&format!(
                    "  {} (seen {:.1} s ago{lag})\n",
                    hb.id,
                    age.as_secs_f64()
                ));
            }
        }
        if gone > 0 {
            out.push_str(&format!(
                "stale heartbeats (no sign for > {} s): {gone}\n",
                LIVE_WITHIN.as_secs()
            ));
        }
        Ok::<_, anyhow::Error>(out)
    })?;
    write_stdout(&text)
}
