//! The actor role: watch `latest`, keep a verified policy snapshot, pull
//! rollout tasks, decode them off the async executor, publish rollouts.
//!
//! - Snapshots are fetched when `latest` changes and checked against its
//!   checksum by the bus; a snapshot that fails (checksum, bytes that are not
//!   this model's weights) is refused, counted, and the previous one is kept.
//! - `sync` mode: a task is decoded by exactly the policy version it names
//!   (the learner does not move on before every task of the step is scored);
//!   a task for a version older than `latest` is stale and acked without work.
//! - `async` mode: a task is decoded with the newest snapshot held, as long as it is at least
//!   `task.min_version`; a task that needs the learner's next snapshot (issued ahead under
//!   `runtime.snapshot_every > 1`) is held until that snapshot comes out, at most
//!   [`NEXT_POLICY_WAIT`].
//! - Undecodable tasks, and tasks the model says can never succeed (bad input),
//!   are rejected with `term` (never redelivered), logged and counted.
//! - A task of another data set (its fingerprint is not this actor's) is handed back for an
//!   actor on the right one, and the actor's heartbeat says why it takes no work, as it does
//!   when it refuses the learner's snapshot or its rollouts do not fit a message; the learner
//!   reports that and stops when no actor can take its tasks.
//! - A decode that fails inside the model (an internal fault) is logged as an
//!   error and the task handed back with a delay: a bug must not drop work.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use caprl_common::bus::{Bus, BusError, Delivery, Queue, SnapshotMeta};
use caprl_common::role::{self, Problem, Role, ServeSpec, Work};
use caprl_common::shutdown::Shutdown;
use caprl_common::telemetry;
use caprl_common::telemetry::stages::{self, Stage};
use caprl_data::Dataset;
use caprl_model::model::{CaptionerConfig, Decoder, Device, ModelError};
use caprl_wire::{DataFingerprint, PolicyVersion, Rollout, RolloutTask, TaskId};
use tokio::sync::watch;

use crate::snapshot::{self, SnapshotState};

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
    #[error("actor: {0}")]
    Snapshot(#[from] caprl_common::snapshot::SnapshotError),
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
    /// Tasks of another data set, handed back for an actor on the right one.
    pub other_data_tasks: u64,
    /// Decodes that failed inside the model; their tasks were handed back, not dropped.
    pub internal_faults: u64,
}

/// How one task becomes a rollout: [`crate::rollout`], or a stand-in for it (see
/// [`run_with_rollout`]).
pub trait RolloutFn:
    Fn(&Decoder, PolicyVersion, &Dataset, &RolloutTask, &str) -> Result<Rollout, ModelError>
    + Send
    + Sync
    + 'static
{
}

impl<F> RolloutFn for F where
    F: Fn(&Decoder, PolicyVersion, &Dataset, &RolloutTask, &str) -> Result<Rollout, ModelError>
        + Send
        + Sync
        + 'static
{
}

/// How long a task whose policy is not published waits before it is handed out again.
const NOT_PUBLISHED_RETRY: Duration = Duration::from_secs(1);

/// Async mode: how long an actor holds a task whose policy is the learner's next snapshot
/// (a task issued ahead under `runtime.snapshot_every > 1`) before handing it back. Handed
/// back at once, it would wait [`NOT_PUBLISHED_RETRY`] after the snapshot came out.
const NEXT_POLICY_WAIT: Duration = Duration::from_secs(5);

/// How long a task of another data set waits before it is handed out again (to an actor on
/// the right data set, or to this one, which refuses it again).
const OTHER_DATA_RETRY: Duration = Duration::from_secs(5);

/// How long a task whose decode hit an internal fault waits before it is handed out again.
pub const INTERNAL_FAULT_RETRY: Duration = Duration::from_secs(2);

/// Runs the actor until `shutdown`.
pub async fn run(
    cfg: ActorConfig,
    bus: Arc<dyn Bus>,
    shutdown: Shutdown,
) -> Result<ActorStats, ActorError> {
    run_with_rollout(cfg, bus, shutdown, crate::rollout).await
}

/// [`run`], turning each task into a rollout with `rollout` instead of [`crate::rollout`]:
/// the seam where a test puts a decode that fails the way a model bug would.
pub async fn run_with_rollout(
    cfg: ActorConfig,
    bus: Arc<dyn Bus>,
    shutdown: Shutdown,
    rollout: impl RolloutFn,
) -> Result<ActorStats, ActorError> {
    let (watcher, newest) = snapshot::watch_latest(Arc::clone(&bus), shutdown.clone());
    let (version_tx, version_rx) = watch::channel(0u64);
    let problem = Problem::default();
    let spec = ServeSpec {
        role: Role::Actor,
        id: cfg.id.clone(),
        queue: Queue::Tasks,
        batch: 1,
        max_message_bytes: cfg.max_message_bytes,
        data: DataFingerprint(cfg.data.fingerprint().to_string()),
        problem: problem.clone(),
    };
    let mut work = ActorWork {
        cfg,
        state: SnapshotState::new(Arc::clone(&bus), version_tx, problem.clone()),
        problem,
        newest,
        stats: ActorStats::default(),
        rollout: Arc::new(rollout),
    };
    let served = role::serve(&spec, &mut work, bus, version_rx, shutdown).await;
    watcher.abort();
    let served = served?;
    let mut stats = work.stats;
    stats.rejected += served.rejected;
    stats.redeliveries += served.redeliveries;
    Ok(stats)
}

/// The actor's part of the serve loop: the snapshot it holds and what it did.
struct ActorWork<R> {
    cfg: ActorConfig,
    state: SnapshotState,
    newest: watch::Receiver<Option<SnapshotMeta>>,
    stats: ActorStats,
    rollout: Arc<R>,
    /// What keeps this actor from working, for its heartbeat.
    problem: Problem,
}

impl<R: RolloutFn> Work for ActorWork<R> {
    type Message = RolloutTask;
    type Error = ActorError;

    /// Takes a new `latest`; without any snapshot yet, waits a little and skips the pull.
    async fn prepare(&mut self, _bus: &dyn Bus, shutdown: &mut Shutdown) -> bool {
        self.state
            .refresh(&self.cfg, &mut self.newest, &mut self.stats)
            .await;
        if self.state.held.is_some() {
            return true;
        }
        tokio::select! {
            _ = self.newest.changed() => {}
            _ = shutdown.recv() => {}
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
        false
    }

    async fn handle(
        &mut self,
        bus: &dyn Bus,
        delivery: Delivery,
        task: RolloutTask,
    ) -> Result<(), ActorError> {
        handle_task(self, bus, delivery, task).await
    }

    fn bus_error(e: &ActorError) -> Option<&BusError> {
        match e {
            ActorError::Bus(e) => Some(e),
            _ => None,
        }
    }

    fn task_id(task: &RolloutTask) -> TaskId {
        task.task_id
    }
}

/// Decodes one task with the policy it asks for (or acks it as stale, or hands it back until
/// that policy is published) and publishes the rollout.
async fn handle_task<R: RolloutFn>(
    work: &mut ActorWork<R>,
    bus: &dyn Bus,
    delivery: Delivery,
    task: RolloutTask,
) -> Result<(), ActorError> {
    let own = work.cfg.data.fingerprint();
    if task.data.0 != own {
        work.problem.set(
            &format!("actor {}", work.cfg.id),
            format!(
                "refusing the run's tasks: they are for data set {}, and this actor opened {} \
                 (fingerprint {own}); start it with the learner's data set",
                task.data,
                work.cfg.data.dir().display()
            ),
        );
        telemetry::metrics::count_rejected("other_data_set");
        work.stats.other_data_tasks += 1;
        delivery.nak(Some(OTHER_DATA_RETRY)).await?;
        return Ok(());
    }
    let Some((policy, version, delivery)) = policy_for(work, bus, delivery, &task).await? else {
        return Ok(());
    };
    let ActorWork {
        cfg,
        stats,
        rollout: rollout_fn,
        problem,
        ..
    } = work;
    let cfg = &*cfg;
    if !cfg.delay.is_zero() {
        tracing::info!(
            "actor {}: holding {} for {} ms before decoding (--delay-ms)",
            cfg.id,
            task.task_id,
            cfg.delay.as_millis()
        );
        tokio::time::sleep(cfg.delay).await;
    }
    let (data, id) = (Arc::clone(&cfg.data), cfg.id.clone());
    let task_for_decode = task.clone();
    let rollout_fn = Arc::clone(rollout_fn);
    let rollout = tokio::task::spawn_blocking(move || {
        stages::time(Stage::Decode, || {
            rollout_fn(&policy, version, &data, &task_for_decode, &id)
        })
    })
    .await
    .map_err(|e| ActorError::Join(e.to_string()))?;
    let rollout = match rollout {
        Ok(r) => r,
        Err(e) if e.is_bad_input() => {
            // A task naming rows this data set does not have: it can never succeed.
            tracing::warn!("actor {}: rejecting {}: {e}", cfg.id, task.task_id);
            telemetry::metrics::count_rejected("task_input");
            stats.rejected += 1;
            delivery.term().await?;
            return Ok(());
        }
        Err(e) => {
            // Not the task's fault: hand it back (to this or another actor) and say so loudly.
            tracing::error!(
                "actor {}: decoding {} failed inside the model ({e}); handing it back for a \
                 retry in {} s",
                cfg.id,
                task.task_id,
                INTERNAL_FAULT_RETRY.as_secs()
            );
            telemetry::metrics::count_internal_fault();
            stats.internal_faults += 1;
            delivery.nak(Some(INTERNAL_FAULT_RETRY)).await?;
            return Ok(());
        }
    };
    publish_rollout(cfg, stats, problem, bus, delivery, &task, rollout).await
}

/// The policy `task` is to be decoded with (fetching `latest` when the held one is too old),
/// with its version and the delivery; `None` when the task was settled instead: acked as
/// stale (the learner moved past its step), or handed back until its policy is published.
async fn policy_for<R: RolloutFn>(
    work: &mut ActorWork<R>,
    bus: &dyn Bus,
    delivery: Delivery,
    task: &RolloutTask,
) -> Result<Option<(Arc<Decoder>, PolicyVersion, Delivery)>, ActorError> {
    let ActorWork {
        cfg,
        state,
        stats,
        newest,
        ..
    } = work;
    let cfg = &*cfg;
    let want = task.policy_version.0;
    let need = if cfg.sync { want } else { task.min_version.0 };
    if !cfg.sync && state.version().is_some_and(|v| v < need) {
        // Issued ahead for a policy the learner publishes when it gets there: wait for it.
        let published = async {
            let meta = newest.wait_for(|m| m.as_ref().is_some_and(|m| m.version >= need));
            meta.await.ok().and_then(|m| m.clone())
        };
        if let Ok(Some(meta)) = tokio::time::timeout(NEXT_POLICY_WAIT, published).await {
            state.load(cfg, meta, stats).await;
        }
    }
    if cfg.sync && state.version().is_some_and(|v| v > want) {
        // Either the learner moved past this task's step, or it restarted from an
        // older checkpoint and `latest` went back: ask the store, not the watch.
        if let Some(meta) = bus.latest().await? {
            state.load(cfg, meta, stats).await;
        }
    }
    if state.version().is_none_or(|v| v < need) {
        // The task was issued right after a new snapshot. The learner sets `latest` before it
        // issues a task, so the store says whether that snapshot exists (the watch may lag,
        // and a broker restart ends it).
        if let Some(meta) = bus.latest().await? {
            if meta.version >= need {
                state.load(cfg, meta, stats).await;
            }
        }
    }
    let Some(held) = state.held.as_ref() else {
        delivery.nak(Some(Duration::from_millis(100))).await?;
        return Ok(None);
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
        return Ok(None);
    }
    Ok(Some((
        Arc::clone(&held.policy),
        PolicyVersion(have),
        delivery,
    )))
}

/// Publishes `rollout` and acks its task (or terms the task when the rollout cannot fit a
/// message, which becomes this actor's problem: the learner stops on it).
async fn publish_rollout(
    cfg: &ActorConfig,
    stats: &mut ActorStats,
    problem: &Problem,
    bus: &dyn Bus,
    delivery: Delivery,
    task: &RolloutTask,
    rollout: Rollout,
) -> Result<(), ActorError> {
    let tokens: usize = rollout.sequences.iter().map(|s| s.tokens.len()).sum();
    let _publish = stages::Timer::start(Stage::RolloutPublish);
    let bytes = match caprl_wire::encode(&rollout, cfg.max_message_bytes) {
        Ok(b) => b,
        Err(e) => {
            problem.set(
                &format!("actor {}", cfg.id),
                format!(
                    "the rollout of {} does not fit a message ({e}); raise \
                     nats.max_message_bytes, or lower runtime.images_per_task or data.max_len",
                    task.task_id
                ),
            );
            telemetry::metrics::count_rejected("oversize");
            delivery.term().await?;
            return Ok(());
        }
    };
    bus.publish(Queue::Rollouts, Bytes::from(bytes)).await?;
    delivery.ack().await?;
    problem.clear();
    telemetry::metrics::count_rollout(tokens as u64);
    stats.rollouts += 1;
    Ok(())
}
