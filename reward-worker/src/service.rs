//! The reward-worker role: pull rollouts, score them with the reward spec off
//! the async executor, publish the scored rollout, and only then ack the
//! rollout (at-least-once; the learner de-duplicates by task id).
//!
//! Undecodable messages, future schema versions and rollouts naming images
//! the data set does not have are rejected with `term`, logged and counted. A rollout of another
//! data set (its fingerprint is not this worker's) is handed back for a worker on the right one,
//! and the worker's heartbeat says why it scores nothing; the learner reports that and stops
//! when no worker can score its rollouts. A scoring failure
//! that is not the rollout's fault (a missing discriminator or encoder, an error inside the
//! encoder) is logged as an error and the rollout handed back with a delay, as the actor does
//! with a decode that fails inside the model: a bug or a misconfigured worker must not drop
//! work. A reward that is wrong for every rollout alike (a Python reward that raises, see
//! [`crate::rewards::python`]) stops the worker with its message, the rollout handed back
//! unscored.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use caprl_clip::Discriminator;
use caprl_common::bus::{Bus, BusError, Delivery, Queue};
use caprl_common::role::{self, Problem, Role, ServeSpec, Work};
use caprl_common::shutdown::Shutdown;
use caprl_common::telemetry;
use caprl_common::telemetry::stages::{self, Stage};
use caprl_wire::{Rollout, ScoredRollout, TaskId};
use tokio::sync::watch;

use crate::{RewardError, Rewarder};

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
    /// A reward that is broken for every rollout ([`RewardError::is_fatal`]).
    #[error(transparent)]
    Reward(RewardError),
}

impl WorkerError {
    /// Whether no restart of the worker can help (the run cannot go on).
    pub fn is_fatal(&self) -> bool {
        matches!(self, WorkerError::Reward(e) if e.is_fatal())
    }
}

/// What a reward worker did, returned when it stops.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerStats {
    pub scored: u64,
    pub rejected: u64,
    pub redeliveries: u64,
    /// Scorings that failed for a reason not the rollout's; their rollouts were handed back.
    pub internal_faults: u64,
    /// Rollouts of another data set, handed back for a worker on the right one.
    pub other_data_rollouts: u64,
}

/// How one rollout is scored: [`Rewarder::score`], or a stand-in for it (see
/// [`run_with_scorer`]).
pub trait ScoreFn:
    Fn(&Rewarder, Rollout) -> Result<ScoredRollout, RewardError> + Send + Sync + 'static
{
}

impl<F> ScoreFn for F where
    F: Fn(&Rewarder, Rollout) -> Result<ScoredRollout, RewardError> + Send + Sync + 'static
{
}

/// How long a rollout of another data set waits before it is handed out again.
const OTHER_DATA_RETRY: Duration = Duration::from_secs(5);

/// How long a rollout whose scoring hit an internal fault waits before it is handed out again.
pub const INTERNAL_FAULT_RETRY: Duration = Duration::from_secs(2);

/// Runs the reward worker until `shutdown`.
pub async fn run(
    cfg: WorkerConfig,
    bus: Arc<dyn Bus>,
    shutdown: Shutdown,
) -> Result<WorkerStats, WorkerError> {
    run_with_scorer(cfg, bus, shutdown, |r: &Rewarder, x: Rollout| r.score(x)).await
}

/// [`run`], scoring each rollout with `score` instead of [`Rewarder::score`]: the seam where a
/// test puts a scoring that fails the way a bug would.
pub async fn run_with_scorer(
    cfg: WorkerConfig,
    bus: Arc<dyn Bus>,
    shutdown: Shutdown,
    score: impl ScoreFn,
) -> Result<WorkerStats, WorkerError> {
    let spec = ServeSpec {
        role: Role::RewardWorker,
        id: cfg.id.clone(),
        queue: Queue::Rollouts,
        batch: 4,
        max_message_bytes: cfg.max_message_bytes,
        data: cfg.rewarder.data().clone(),
        problem: Problem::default(),
    };
    // A reward worker holds no policy: its heartbeat says v0.
    let (_version_tx, version_rx) = watch::channel(0u64);
    let mut work = WorkerWork {
        cfg,
        stats: WorkerStats::default(),
        score: Arc::new(score),
        problem: spec.problem.clone(),
    };
    let served = role::serve(&spec, &mut work, bus, version_rx, shutdown).await?;
    let mut stats = work.stats;
    stats.rejected += served.rejected;
    stats.redeliveries += served.redeliveries;
    Ok(stats)
}

/// The reward worker's part of the serve loop.
struct WorkerWork<S> {
    cfg: WorkerConfig,
    stats: WorkerStats,
    score: Arc<S>,
    /// What keeps this worker from working, for its heartbeat.
    problem: Problem,
}

impl<S: ScoreFn> Work for WorkerWork<S> {
    type Message = Rollout;
    type Error = WorkerError;

    async fn handle(
        &mut self,
        bus: &dyn Bus,
        delivery: Delivery,
        rollout: Rollout,
    ) -> Result<(), WorkerError> {
        let score = Arc::clone(&self.score);
        let own = self.cfg.rewarder.data();
        if rollout.data != *own {
            self.problem.set(
                &format!("reward worker {}", self.cfg.id),
                format!(
                    "refusing the run's rollouts: they are for data set {}, and this worker \
                     opened another (fingerprint {own}); start it with the learner's data set",
                    rollout.data
                ),
            );
            telemetry::metrics::count_rejected("other_data_set");
            self.stats.other_data_rollouts += 1;
            delivery.nak(Some(OTHER_DATA_RETRY)).await?;
            return Ok(());
        }
        let problem = self.problem.clone();
        handle(
            &self.cfg,
            score,
            bus,
            delivery,
            rollout,
            &mut self.stats,
            &problem,
        )
        .await
    }

    fn bus_error(e: &WorkerError) -> Option<&BusError> {
        match e {
            WorkerError::Bus(e) => Some(e),
            WorkerError::Join(_) | WorkerError::Reward(_) => None,
        }
    }

    fn task_id(rollout: &Rollout) -> TaskId {
        rollout.task_id
    }
}

/// Scores one rollout (with the newest discriminator when the spec needs one) and publishes it.
async fn handle<S: ScoreFn>(
    cfg: &WorkerConfig,
    score: Arc<S>,
    bus: &dyn Bus,
    delivery: Delivery,
    rollout: Rollout,
    stats: &mut WorkerStats,
    problem: &Problem,
) -> Result<(), WorkerError> {
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
    let scored = tokio::task::spawn_blocking(move || {
        stages::time(Stage::Score, || score(&rewarder, rollout))
    })
    .await
    .map_err(|e| WorkerError::Join(e.to_string()))?;
    let scored = match scored {
        Ok(s) => s,
        Err(e) if e.is_bad_input() => {
            tracing::warn!("reward worker {}: rejecting {task_id}: {e}", cfg.id);
            telemetry::metrics::count_rejected("unscorable");
            stats.rejected += 1;
            delivery.term().await?;
            return Ok(());
        }
        Err(e) if e.is_fatal() => {
            // Handed back at once: the rollout stays queued for the run started again.
            delivery.nak(None).await?;
            return Err(WorkerError::Reward(e));
        }
        Err(e) => {
            tracing::error!(
                "reward worker {}: scoring {task_id} failed ({e}); handing it back to be \
                 scored again in {INTERNAL_FAULT_RETRY:?}",
                cfg.id
            );
            telemetry::metrics::count_internal_fault();
            stats.internal_faults += 1;
            delivery.nak(Some(INTERNAL_FAULT_RETRY)).await?;
            return Ok(());
        }
    };
    let publish = stages::Timer::start(Stage::ScoredPublish);
    let bytes = match caprl_wire::encode(&scored, cfg.max_message_bytes) {
        Ok(b) => b,
        Err(e) => {
            problem.set(
                &format!("reward worker {}", cfg.id),
                format!(
                    "the scored rollout of {task_id} does not fit a message ({e}); raise \
                     nats.max_message_bytes, or lower runtime.images_per_task"
                ),
            );
            telemetry::metrics::count_rejected("oversize");
            delivery.term().await?;
            return Ok(());
        }
    };
    bus.publish(Queue::Scored, Bytes::from(bytes)).await?;
    delivery.ack().await?;
    problem.clear();
    drop(publish);
    telemetry::metrics::observe_reward_latency(started.elapsed());
    for reward in &scored.rewards {
        telemetry::metrics::observe_reward("total", f64::from(reward.total));
        for (component, value) in &reward.components {
            telemetry::metrics::observe_reward(component, f64::from(*value));
        }
    }
    stats.scored += 1;
    Ok(())
}

/// Loads the discriminator of the newest policy snapshot (paper 004: `D` is trained online by
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
    let vocab = cfg.rewarder.vocab_hash().to_string();
    let disc = tokio::task::spawn_blocking(move || {
        let disc = Discriminator::from_snapshot(&bytes, &name, &vocab)?;
        disc.map(|d| d.scorer()).transpose()
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
