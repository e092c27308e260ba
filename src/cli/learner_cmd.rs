//! `caprl learner`: the learner role over NATS. Runs the XE warm start in
//! process, then the RL phase with actors and reward workers on the bus.

use std::sync::Arc;

use anyhow::{bail, Result};
use caprl_common::bus::Bus;
use caprl_common::role::{self, HeartbeatOf, Problem, Role, Roster, HEARTBEAT_EVERY};
use caprl_learner::driver::{Driver, DriverOptions};
use caprl_learner::run as training;
use caprl_wire::DataFingerprint;
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
    let me = roles::default_id();
    let run_id = &cfg.runtime.run_id;
    started
        .rt
        .block_on(refuse_a_live_learner(started.bus.as_ref(), run_id, &me))?;
    let heartbeat = {
        let _guard = started.rt.enter();
        let (_v_tx, v_rx) = watch::channel(0u64);
        role::spawn_heartbeat(
            Arc::clone(&started.bus),
            HeartbeatOf {
                role: Role::Learner,
                id: me.clone(),
                data: DataFingerprint(data.fingerprint().to_string()),
                version: v_rx,
                problem: Problem::default(),
            },
            started.shutdown.clone(),
        )
    };
    let mut driver = Driver::new(
        Arc::clone(&started.bus),
        started.rt.handle().clone(),
        started.shutdown.clone(),
        DriverOptions::for_run(&cfg),
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
    let _ = started.rt.block_on(
        started
            .bus
            .kv_delete(&role::heartbeat_key(Role::Learner, &me)),
    );
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

/// Stops a second learner for a run id whose learner is alive: two would publish over each
/// other's policy and wait for each other's tasks. A learner heartbeat that is recent but stops
/// (a learner killed moments ago, now being restarted) is no reason to stop: it is watched for
/// two heartbeat periods first.
async fn refuse_a_live_learner(bus: &dyn Bus, run_id: &str, me: &str) -> Result<()> {
    let seen = Roster::read(bus).await?;
    if seen.live_learners(me).is_empty() {
        return Ok(());
    }
    tokio::time::sleep(HEARTBEAT_EVERY * 2 + std::time::Duration::from_millis(500)).await;
    let now = Roster::read(bus).await?;
    for other in now.live_learners(me) {
        let beat_again = seen.live_learners(me).iter().any(|before| {
            before.heartbeat.id == other.heartbeat.id
                && before.heartbeat.unix_ms < other.heartbeat.unix_ms
        });
        if beat_again {
            bail!(
                "run {run_id} already has a live learner, {} (its last heartbeat {:.1} s ago): \
                 stop it first, or give this learner another runtime.run_id",
                other.heartbeat.id,
                other.age.as_secs_f64()
            );
        }
    }
    Ok(())
}
