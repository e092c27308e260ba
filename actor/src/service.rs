//! The actor role: watch `latest`, keep a verified policy snapshot, pull
//! rollout tasks, decode them off the async executor, publish rollouts.
//!
//! - Snapshots are fetched when `latest` changes and checked against its
//!   sha256 by the bus; a snapshot that fails (checksum, bytes that are not
//!   this model's weights) is refused, counted, and the previous one is kept.
//! - `sync` mode: a task is decoded by exactly the policy version it names
//!   (the learner does not move on before every task of the step is scored);
//!   a task for a version older than `latest` is stale and acked without work.
//! - `async` mode: actors never wait for the learner; a task is decoded with
//!   the newest snapshot held, as long as it is at least `task.min_version`.
//! - Undecodable tasks are rejected with `term` (never redelivered), logged
//!   and counted.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use caprl_common::bus::{Backoff, Bus, BusError, Delivery, Queue, SnapshotMeta};
use caprl_common::data::Dataset;
use caprl_common::model::{Captioner, CaptionerConfig, Decoder, Device, ModelError};
use caprl_common::telemetry;
use caprl_common::wire::{self, Heartbeat, PolicyVersion, RolloutTask};
use futures::StreamExt;
use tokio::sync::watch;

/// Everything an actor needs besides the bus.
#[derive(Clone)]
pub struct ActorConfig {
    /// This actor's name in heartbeats and rollouts.
    pub id: String,
    pub data: Arc<Dataset>,
    pub model: CaptionerConfig,
    pub device: Device,
    /// `nats.max_message_bytes`.
    pub max_message_bytes: usize,
    /// `runtime.mode = "sync"`.
    pub sync: bool,
    /// Extra wait before each decode (tests of slow actors; 0 normally).
    pub delay: Duration,
}

/// Why an actor stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ActorError {
    #[error("actor bus failure: {0}")]
    Bus(#[from] BusError),
    #[error("actor decode failed: {0}")]
    Model(#[from] ModelError),
    #[error("actor worker thread failed: {0}")]
    Join(String),
}

/// What an actor did, returned when it stops.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ActorStats {
    pub rollouts: u64,
    pub rejected: u64,
    pub redeliveries: u64,
    pub stale_tasks: u64,
    pub refused_snapshots: u64,
}

/// The snapshot an actor decodes with.
struct Held {
    meta: SnapshotMeta,
    /// The snapshot's weights, prepared for decoding once: every task of this version uses them.
    policy: Arc<Decoder>,
}

/// KV key of a heartbeat: `hb.<role>.<id>`.
pub fn heartbeat_key(role: &str, id: &str) -> String {
    let id: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("hb.{role}.{id}")
}

/// Writes a heartbeat for `role`/`id` every `every` until `shutdown`.
pub fn spawn_heartbeat(
    bus: Arc<dyn Bus>,
    role: &'static str,
    id: String,
    version: watch::Receiver<u64>,
    mut shutdown: watch::Receiver<bool>,
    every: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let key = heartbeat_key(role, &id);
        loop {
            let hb = Heartbeat {
                role: role.to_string(),
                id: id.clone(),
                policy_version: PolicyVersion(*version.borrow()),
                unix_ms: telemetry::runlog::unix_ms_now(),
            };
            if let Ok(bytes) = wire::encode(&hb, wire::DEFAULT_MAX_MESSAGE_BYTES) {
                if let Err(e) = bus.kv_put(&key, Bytes::from(bytes)).await {
                    tracing::debug!("heartbeat {key}: {e}");
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = shutdown.changed() => break,
            }
            if *shutdown.borrow() {
                break;
            }
        }
        let _ = bus.kv_delete(&key).await;
    })
}

/// How long a task whose policy is not published waits before it is handed out again.
const NOT_PUBLISHED_RETRY: Duration = Duration::from_secs(1);

/// Runs the actor until `shutdown` turns true.
pub async fn run(
    cfg: ActorConfig,
    bus: Arc<dyn Bus>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<ActorStats, ActorError> {
    let (newest_tx, mut newest) = watch::channel::<Option<SnapshotMeta>>(None);
    let watcher = {
        let bus = Arc::clone(&bus);
        let mut stop = shutdown.clone();
        tokio::spawn(async move {
            loop {
                match bus.watch_latest().await {
                    Ok(mut stream) => loop {
                        tokio::select! {
                            item = stream.next() => match item {
                                Some(Ok(meta)) => { let _ = newest_tx.send(Some(meta)); }
                                Some(Err(e)) => { tracing::warn!("watching `latest`: {e}"); break; }
                                None => break,
                            },
                            _ = stop.changed() => return,
                        }
                    },
                    Err(e) => tracing::warn!("cannot watch `latest`: {e}"),
                }
                if *stop.borrow() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let (version_tx, version_rx) = watch::channel(0u64);
    let heartbeat = spawn_heartbeat(
        Arc::clone(&bus),
        "actor",
        cfg.id.clone(),
        version_rx,
        shutdown.clone(),
        Duration::from_secs(2),
    );
    let mut state = SnapshotState {
        held: None,
        refused: HashSet::new(),
        version_tx,
    };
    let mut stats = ActorStats::default();
    let mut backoff = Backoff::default();
    let result = loop {
        if *shutdown.borrow() {
            break Ok(());
        }
        state
            .refresh(&cfg, bus.as_ref(), &mut newest, &mut stats)
            .await;
        if state.held.is_none() {
            tokio::select! {
                _ = newest.changed() => {}
                _ = shutdown.changed() => {}
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
            continue;
        }
        let deliveries = tokio::select! {
            d = bus.pull(Queue::Tasks, 1, Duration::from_millis(300)) => d,
            _ = shutdown.changed() => continue,
        };
        let deliveries = match deliveries {
            Ok(d) => d,
            Err(e) if e.is_transient() => {
                backoff
                    .ride_out(&format!("actor {}", cfg.id), &e, &mut shutdown)
                    .await;
                continue;
            }
            Err(e) => break Err(e.into()),
        };
        let mut failed = None;
        for delivery in deliveries {
            let r = handle_task(&cfg, bus.as_ref(), &mut state, delivery, &mut stats).await;
            match r {
                Ok(()) => backoff.reset(),
                // The task comes back after ack_wait; a duplicate rollout is de-duplicated.
                Err(ActorError::Bus(e)) if e.is_transient() => {
                    backoff
                        .ride_out(&format!("actor {}", cfg.id), &e, &mut shutdown)
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
    watcher.abort();
    let _ = heartbeat.await;
    result.map(|()| stats)
}

/// The snapshot held and the ones refused.
struct SnapshotState {
    held: Option<Held>,
    /// sha256 of snapshots that failed verification or loading: never retried.
    refused: HashSet<String>,
    version_tx: watch::Sender<u64>,
}

impl SnapshotState {
    fn version(&self) -> Option<u64> {
        self.held.as_ref().map(|h| h.meta.version)
    }

    /// Loads `latest` if it differs from the held snapshot; a snapshot that
    /// fails is refused (logged, counted) and the held one kept.
    async fn refresh(
        &mut self,
        cfg: &ActorConfig,
        bus: &dyn Bus,
        newest: &mut watch::Receiver<Option<SnapshotMeta>>,
        stats: &mut ActorStats,
    ) {
        let Some(meta) = newest.borrow_and_update().clone() else {
            return;
        };
        self.load(cfg, bus, meta, stats).await;
    }

    /// Loads snapshot `meta` unless it is the one held or was refused before.
    async fn load(
        &mut self,
        cfg: &ActorConfig,
        bus: &dyn Bus,
        meta: SnapshotMeta,
        stats: &mut ActorStats,
    ) {
        if self.held.as_ref().is_some_and(|h| h.meta == meta) || self.refused.contains(&meta.sha256)
        {
            return;
        }
        match load_snapshot(cfg, bus, &meta).await {
            Ok(policy) => {
                tracing::debug!("actor {} now holds policy v{}", cfg.id, meta.version);
                let _ = self.version_tx.send(meta.version);
                self.held = Some(Held { meta, policy });
            }
            Err(ActorError::Bus(e))
                if e.is_transient() || matches!(e, BusError::SnapshotMissing { .. }) =>
            {
                // The broker, or a snapshot deleted since `latest` named it (the learner moved
                // on, or restarted and publishes it again): not the snapshot's bytes, so not
                // refused; try again on the next refresh.
                tracing::warn!(
                    "actor {}: cannot fetch snapshot v{} yet ({e})",
                    cfg.id,
                    meta.version
                );
            }
            Err(e) => {
                tracing::warn!(
                    "actor {}: refusing snapshot v{} ({e}); keeping {}",
                    cfg.id,
                    meta.version,
                    self.version()
                        .map_or("none".to_string(), |v| format!("v{v}"))
                );
                telemetry::metrics::count_rejected("snapshot");
                stats.refused_snapshots += 1;
                self.refused.insert(meta.sha256.clone());
            }
        }
    }
}

async fn load_snapshot(
    cfg: &ActorConfig,
    bus: &dyn Bus,
    meta: &SnapshotMeta,
) -> Result<Arc<Decoder>, ActorError> {
    let started = Instant::now();
    // The bus checks length and sha256 against `meta` before returning the bytes.
    let bytes = bus.get_snapshot(meta).await?;
    let (model, device) = (cfg.model.clone(), cfg.device.clone());
    let policy = tokio::task::spawn_blocking(move || {
        Captioner::from_safetensors(&bytes, &model, &device)?.decoder()
    })
    .await
    .map_err(|e| ActorError::Join(e.to_string()))??;
    telemetry::metrics::record_snapshot(meta.bytes, started.elapsed());
    Ok(Arc::new(policy))
}

async fn handle_task(
    cfg: &ActorConfig,
    bus: &dyn Bus,
    state: &mut SnapshotState,
    delivery: Delivery,
    stats: &mut ActorStats,
) -> Result<(), ActorError> {
    let task: RolloutTask = match wire::decode(delivery.payload(), cfg.max_message_bytes) {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!("actor {}: rejecting a task message: {e}", cfg.id);
            telemetry::metrics::count_rejected(reject_reason(&e));
            stats.rejected += 1;
            delivery.term().await?;
            return Ok(());
        }
    };
    if delivery.is_redelivery() {
        // Named, so that a redelivery can be traced to the actor that died holding the task.
        tracing::info!(
            "actor {}: {} redelivered (delivery {})",
            cfg.id,
            task.task_id,
            delivery.delivery_count()
        );
        telemetry::metrics::count_redelivery("tasks");
        stats.redeliveries += 1;
    }
    let want = task.policy_version.0;
    let need = if cfg.sync { want } else { task.min_version.0 };
    if cfg.sync && state.version().is_some_and(|v| v > want) {
        // Either the learner moved past this task's step, or it restarted from an
        // older checkpoint and `latest` went back: ask the store, not the watch.
        if let Some(meta) = bus.latest().await? {
            state.load(cfg, bus, meta, stats).await;
        }
    }
    if state.version().is_none_or(|v| v < need) {
        // The task was issued right after a new snapshot. The learner sets `latest` before it
        // issues a task, so the store says whether that snapshot exists (the watch may lag,
        // and a broker restart ends it).
        if let Some(meta) = bus.latest().await? {
            if meta.version >= need {
                state.load(cfg, bus, meta, stats).await;
            }
        }
    }
    let Some(held) = state.held.as_ref() else {
        delivery.nak(Some(Duration::from_millis(100))).await?;
        return Ok(());
    };
    let have = held.meta.version;
    if cfg.sync && have != want || !cfg.sync && have < task.min_version.0 {
        if have > want {
            // The learner has moved past this task's step: nobody will use its result.
            stats.stale_tasks += 1;
            delivery.ack().await?;
        } else {
            // The policy this task needs is not published: the task of a learner that died
            // and was resumed from an earlier checkpoint, which reaches that step later (or a
            // snapshot we could not fetch yet). Retry it later, not at once: JetStream hands
            // out due redeliveries first, so tasks like this redelivered every few hundred ms
            // kept the current step's tasks from ever reaching an actor.
            tracing::debug!(
                "actor {}: {} needs policy v{need}, newest is v{have}; retrying it later",
                cfg.id,
                task.task_id
            );
            delivery.nak(Some(NOT_PUBLISHED_RETRY)).await?;
        }
        return Ok(());
    }
    if !cfg.delay.is_zero() {
        tracing::info!(
            "actor {}: holding {} for {} ms before decoding (--delay-ms)",
            cfg.id,
            task.task_id,
            cfg.delay.as_millis()
        );
        tokio::time::sleep(cfg.delay).await;
    }
    let (policy, data, id) = (
        Arc::clone(&held.policy),
        Arc::clone(&cfg.data),
        cfg.id.clone(),
    );
    let version = PolicyVersion(have);
    let task_for_decode = task.clone();
    let rollout = tokio::task::spawn_blocking(move || {
        crate::rollout(&policy, version, &data, &task_for_decode, &id)
    })
    .await
    .map_err(|e| ActorError::Join(e.to_string()))?;
    let rollout = match rollout {
        Ok(r) => r,
        Err(ModelError::Input(reason)) => {
            // A task naming rows this data set does not have: bad input, not a crash.
            tracing::warn!("actor {}: rejecting {}: {reason}", cfg.id, task.task_id);
            telemetry::metrics::count_rejected("task_input");
            stats.rejected += 1;
            delivery.term().await?;
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    let tokens: usize = rollout.sequences.iter().map(|s| s.tokens.len()).sum();
    let bytes = match wire::encode(&rollout, cfg.max_message_bytes) {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(
                "actor {}: {} does not fit a message: {e}",
                cfg.id,
                task.task_id
            );
            telemetry::metrics::count_rejected("oversize");
            delivery.term().await?;
            return Ok(());
        }
    };
    bus.publish(Queue::Rollouts, Bytes::from(bytes)).await?;
    delivery.ack().await?;
    telemetry::metrics::count_rollout(tokens as u64);
    stats.rollouts += 1;
    Ok(())
}

/// Counter label of a decoding failure.
pub fn reject_reason(e: &wire::WireError) -> &'static str {
    match e {
        wire::WireError::BadMagic => "bad_magic",
        wire::WireError::UnknownVersion { .. } => "unknown_version",
        wire::WireError::UnknownKind(_) | wire::WireError::WrongKind { .. } => "wrong_kind",
        wire::WireError::Truncated { .. } => "truncated",
        wire::WireError::Oversize { .. } => "oversize",
        wire::WireError::Payload(_) | wire::WireError::TrailingBytes => "bad_payload",
    }
}
