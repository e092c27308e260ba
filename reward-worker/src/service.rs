//! The reward-worker role: pull rollouts, score them with the reward spec off
//! the async executor, publish the scored rollout, and only then ack the
//! rollout (at-least-once; the learner de-duplicates by task id).
//!
//! Undecodable messages, future schema versions and rollouts naming images
//! the data set does not have are rejected with `term`, logged and counted.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use caprl_common::bus::{Backoff, Bus, BusError, Delivery, Queue};
use caprl_common::telemetry;
use caprl_common::wire::{self, Heartbeat, PolicyVersion, Rollout};
use tokio::sync::watch;

use crate::Rewarder;

/// Everything a reward worker needs besides the bus.
#[derive(Clone)]
pub struct WorkerConfig {
    pub id: String,
    pub rewarder: Arc<Rewarder>,
    /// `nats.max_message_bytes`.
    pub max_message_bytes: usize,
}

/// Why a reward worker stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("reward worker bus failure: {0}")]
    Bus(#[from] BusError),
    #[error("reward worker thread failed: {0}")]
    Join(String),
}

/// What a reward worker did, returned when it stops.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerStats {
    pub scored: u64,
    pub rejected: u64,
    pub redeliveries: u64,
}

/// Runs the reward worker until `shutdown` turns true.
pub async fn run(
    cfg: WorkerConfig,
    bus: Arc<dyn Bus>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<WorkerStats, WorkerError> {
    let heartbeat = spawn_heartbeat(Arc::clone(&bus), cfg.id.clone(), shutdown.clone());
    let mut stats = WorkerStats::default();
    let mut backoff = Backoff::default();
    let result = loop {
        if *shutdown.borrow() {
            break Ok(());
        }
        let deliveries = tokio::select! {
            d = bus.pull(Queue::Rollouts, 4, Duration::from_millis(300)) => d,
            _ = shutdown.changed() => continue,
        };
        let deliveries = match deliveries {
            Ok(d) => d,
            Err(e) if e.is_transient() => {
                backoff
                    .ride_out(&format!("reward worker {}", cfg.id), &e, &mut shutdown)
                    .await;
                continue;
            }
            Err(e) => break Err(e.into()),
        };
        let mut failed = None;
        for d in deliveries {
            match handle(&cfg, bus.as_ref(), d, &mut stats).await {
                Ok(()) => backoff.reset(),
                // The rollout comes back after ack_wait; the learner drops a duplicate score.
                Err(WorkerError::Bus(e)) if e.is_transient() => {
                    backoff
                        .ride_out(&format!("reward worker {}", cfg.id), &e, &mut shutdown)
                        .await;
                    break;
                }
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        if let Some(e) = failed {
            break Err(e);
        }
    };
    let _ = heartbeat.await;
    result.map(|()| stats)
}

fn spawn_heartbeat(
    bus: Arc<dyn Bus>,
    id: String,
    mut shutdown: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let safe: String = id
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let key = format!("hb.reward-worker.{safe}");
        loop {
            let hb = Heartbeat {
                role: "reward-worker".into(),
                id: id.clone(),
                policy_version: PolicyVersion(0),
                unix_ms: telemetry::runlog::unix_ms_now(),
            };
            if let Ok(bytes) = wire::encode(&hb, wire::DEFAULT_MAX_MESSAGE_BYTES) {
                let _ = bus.kv_put(&key, Bytes::from(bytes)).await;
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(2)) => {}
                _ = shutdown.changed() => break,
            }
            if *shutdown.borrow() {
                break;
            }
        }
        let _ = bus.kv_delete(&key).await;
    })
}

async fn handle(
    cfg: &WorkerConfig,
    bus: &dyn Bus,
    delivery: Delivery,
    stats: &mut WorkerStats,
) -> Result<(), WorkerError> {
    let rollout: Rollout = match wire::decode(delivery.payload(), cfg.max_message_bytes) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!("reward worker {}: rejecting a rollout message: {e}", cfg.id);
            telemetry::metrics::count_rejected(reason(&e));
            stats.rejected += 1;
            delivery.term().await?;
            return Ok(());
        }
    };
    if delivery.is_redelivery() {
        telemetry::metrics::count_redelivery("rollouts");
        stats.redeliveries += 1;
    }
    let started = Instant::now();
    let task_id = rollout.task_id;
    if let Some(clip) = cfg.rewarder.clip() {
        let held = clip.disc_version();
        if cfg.rewarder.needs_discriminator() && held.is_none_or(|v| v < rollout.policy_version.0) {
            refresh_discriminator(cfg, bus, clip, held).await?;
            if clip.disc_version().is_none() {
                // The learner publishes it with its first snapshot: try again shortly.
                delivery.nak(Some(Duration::from_secs(1))).await?;
                return Ok(());
            }
        }
    }
    let rewarder = Arc::clone(&cfg.rewarder);
    let scored = tokio::task::spawn_blocking(move || rewarder.score(rollout))
        .await
        .map_err(|e| WorkerError::Join(e.to_string()))?;
    let scored = match scored {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("reward worker {}: rejecting {task_id}: {e}", cfg.id);
            telemetry::metrics::count_rejected("unscorable");
            stats.rejected += 1;
            delivery.term().await?;
            return Ok(());
        }
    };
    let bytes = match wire::encode(&scored, cfg.max_message_bytes) {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(
                "reward worker {}: scored {task_id} does not fit a message: {e}",
                cfg.id
            );
            telemetry::metrics::count_rejected("oversize");
            delivery.term().await?;
            return Ok(());
        }
    };
    bus.publish(Queue::Scored, Bytes::from(bytes)).await?;
    delivery.ack().await?;
    telemetry::metrics::observe_reward_latency(started.elapsed());
    stats.scored += 1;
    Ok(())
}

/// Loads the discriminator of the newest policy snapshot (seed 004: `D` is trained online by
/// the learner and rides in the snapshot) when it is newer than the one `held`.
async fn refresh_discriminator(
    cfg: &WorkerConfig,
    bus: &dyn Bus,
    clip: &crate::ClipReward,
    held: Option<u64>,
) -> Result<(), WorkerError> {
    let Some(meta) = bus.latest().await? else {
        return Ok(());
    };
    if held.is_some_and(|v| v >= meta.version) {
        return Ok(());
    }
    let bytes = bus.get_snapshot(&meta).await?;
    let name = format!("<policy snapshot v{}>", meta.version);
    let disc = tokio::task::spawn_blocking(move || {
        caprl_common::clip::Discriminator::from_safetensors(&bytes, std::path::Path::new(&name))?
            .map(|d| d.scorer())
            .transpose()
    })
    .await
    .map_err(|e| WorkerError::Join(e.to_string()))?;
    match disc {
        Ok(Some(d)) => clip.set_discriminator(meta.version, d),
        Ok(None) => tracing::warn!(
            "reward worker {}: snapshot v{} carries no discriminator; is the learner's reward spec the same (with disc)?",
            cfg.id,
            meta.version
        ),
        Err(e) => {
            telemetry::metrics::count_rejected("snapshot");
            tracing::warn!("reward worker {}: refusing the discriminator of snapshot v{}: {e}", cfg.id, meta.version);
        }
    }
    Ok(())
}

fn reason(e: &wire::WireError) -> &'static str {
    match e {
        wire::WireError::BadMagic => "bad_magic",
        wire::WireError::UnknownVersion { .. } => "unknown_version",
        wire::WireError::UnknownKind(_) | wire::WireError::WrongKind { .. } => "wrong_kind",
        wire::WireError::Truncated { .. } => "truncated",
        wire::WireError::Oversize { .. } => "oversize",
        wire::WireError::Payload(_) | wire::WireError::TrailingBytes => "bad_payload",
    }
}
