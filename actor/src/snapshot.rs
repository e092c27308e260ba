//! The policy snapshot an actor decodes with: following `latest`, fetching a new snapshot
//! (checked against its checksum by the bus), and refusing one that fails while keeping the
//! previous one. In async mode an actor that holds a policy keeps decoding with it while the
//! newest one is fetched and prepared beside it, and swaps when that is ready; a task that needs
//! the newer one waits for it. In sync mode every task names its version, so the load is inline.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use caprl_common::bus::{Bus, BusError, Checksum, SnapshotMeta};
use caprl_common::role::Problem;
use caprl_common::shutdown::Shutdown;
use caprl_common::snapshot;
use caprl_common::telemetry;
use caprl_common::telemetry::stages::{self, Stage};
use caprl_model::model::Decoder;
use futures::StreamExt;
use tokio::sync::watch;

use crate::service::{ActorConfig, ActorError, ActorStats};

/// The snapshot an actor decodes with.
pub(crate) struct Held {
    pub(crate) meta: SnapshotMeta,
    /// The snapshot's weights, prepared for decoding once: every task of this version uses them.
    pub(crate) policy: Arc<Decoder>,
}

/// A snapshot being fetched and prepared off the serve loop.
struct Preparing {
    meta: SnapshotMeta,
    task: tokio::task::JoinHandle<Result<Arc<Decoder>, ActorError>>,
}

/// The snapshot held, the one being prepared and the ones refused.
pub(crate) struct SnapshotState {
    pub(crate) held: Option<Held>,
    preparing: Option<Preparing>,
    /// Checksums of snapshots that failed verification or loading: never retried.
    refused: HashSet<Checksum>,
    version_tx: watch::Sender<u64>,
    bus: Arc<dyn Bus>,
    /// Set when a snapshot is refused (cleared by the actor's next published rollout).
    problem: Problem,
}

/// Follows `latest` until `shutdown`: the receiver holds the newest snapshot announced.
pub(crate) fn watch_latest(
    bus: Arc<dyn Bus>,
    mut stop: Shutdown,
) -> (
    tokio::task::JoinHandle<()>,
    watch::Receiver<Option<SnapshotMeta>>,
) {
    let (newest_tx, newest) = watch::channel::<Option<SnapshotMeta>>(None);
    let watcher = tokio::spawn(async move {
        loop {
            match bus.watch_latest().await {
                Ok(mut stream) => loop {
                    tokio::select! {
                        item = stream.next() => match item {
                            Some(Ok(meta)) => { let _ = newest_tx.send(Some(meta)); }
                            Some(Err(e)) => { tracing::warn!("watching `latest`: {e}"); break; }
                            None => break,
                        },
                        _ = stop.recv() => return,
                    }
                },
                Err(e) => tracing::warn!("cannot watch `latest`: {e}"),
            }
            if stop.is_shutdown() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    (watcher, newest)
}

impl SnapshotState {
    /// No snapshot yet; snapshots come from `bus`, `version_tx` is told the version of each
    /// one taken, and `problem` why one was refused.
    pub(crate) fn new(
        bus: Arc<dyn Bus>,
        version_tx: watch::Sender<u64>,
        problem: Problem,
    ) -> SnapshotState {
        SnapshotState {
            held: None,
            preparing: None,
            refused: HashSet::new(),
            version_tx,
            bus,
            problem,
        }
    }

    pub(crate) fn version(&self) -> Option<u64> {
        self.held.as_ref().map(|h| h.meta.version)
    }

    /// Follows `latest`: with no policy yet, the newest is loaded now; in async mode a snapshot
    /// prepared beside the held one is taken once ready, and the newest is prepared next. In sync
    /// mode a policy in hand is replaced only by a task that names a newer one: an actor that
    /// gets no task of a version never loads it (the learner issues fewer tasks than there are
    /// actors when a step has few images, and every load costs the host's cores).
    pub(crate) async fn refresh(
        &mut self,
        cfg: &ActorConfig,
        newest: &mut watch::Receiver<Option<SnapshotMeta>>,
        stats: &mut ActorStats,
    ) {
        let Some(meta) = newest.borrow_and_update().clone() else {
            return;
        };
        if self.held.is_none() {
            self.load(cfg, meta, stats).await;
            return;
        }
        if cfg.sync {
            return;
        }
        if self
            .preparing
            .as_ref()
            .is_some_and(|p| p.task.is_finished())
        {
            self.take_prepared(cfg, stats).await;
        }
        if self.preparing.is_none() && self.wants(&meta) {
            let task = tokio::spawn(load_snapshot(cfg, Arc::clone(&self.bus), meta.clone()));
            self.preparing = Some(Preparing { meta, task });
        }
    }

    /// Loads snapshot `meta` now (after the one being prepared, which may be it) unless it is
    /// the one held or was refused before.
    pub(crate) async fn load(
        &mut self,
        cfg: &ActorConfig,
        meta: SnapshotMeta,
        stats: &mut ActorStats,
    ) {
        if self.preparing.is_some() {
            self.take_prepared(cfg, stats).await;
        }
        if self.wants(&meta) {
            let result = load_snapshot(cfg, Arc::clone(&self.bus), meta.clone()).await;
            self.settle(cfg, meta, result, stats);
        }
    }

    /// Whether `meta` is neither held nor refused.
    fn wants(&self, meta: &SnapshotMeta) -> bool {
        !(self.held.as_ref().is_some_and(|h| h.meta == *meta)
            || self.refused.contains(&meta.checksum))
    }

    /// Waits for the snapshot being prepared and takes it (or refuses it).
    async fn take_prepared(&mut self, cfg: &ActorConfig, stats: &mut ActorStats) {
        let Some(Preparing { meta, task }) = self.preparing.take() else {
            return;
        };
        let result = task
            .await
            .unwrap_or_else(|e| Err(ActorError::Join(e.to_string())));
        self.settle(cfg, meta, result, stats);
    }

    /// Holds the policy `result` loaded for `meta`; a failure keeps the held one, and refuses
    /// `meta` for good unless the broker or a deleted version was the cause.
    fn settle(
        &mut self,
        cfg: &ActorConfig,
        meta: SnapshotMeta,
        result: Result<Arc<Decoder>, ActorError>,
        stats: &mut ActorStats,
    ) {
        match result {
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
                self.problem.set(
                    &format!("actor {}", cfg.id),
                    format!(
                        "refusing the learner's policy snapshot v{} ({e}); keeping {}",
                        meta.version,
                        self.version()
                            .map_or("none".to_string(), |v| format!("v{v}"))
                    ),
                );
                telemetry::metrics::count_rejected("snapshot");
                stats.refused_snapshots += 1;
                self.refused.insert(meta.checksum.clone());
            }
        }
    }
}

/// Fetches snapshot `meta` (the bus checks its length and checksum) and prepares it for decoding
/// with `cfg`'s model, device and vocabulary.
fn load_snapshot(
    cfg: &ActorConfig,
    bus: Arc<dyn Bus>,
    meta: SnapshotMeta,
) -> impl std::future::Future<Output = Result<Arc<Decoder>, ActorError>> + Send + 'static {
    let (model, device) = (cfg.model.clone(), cfg.device.clone());
    let vocab = cfg.data.vocab.hash().to_string();
    async move {
        let started = Instant::now();
        let fetch = stages::Timer::start(Stage::SnapshotFetch);
        let bytes = bus.get_snapshot(&meta).await?;
        drop(fetch);
        let policy = tokio::task::spawn_blocking(move || {
            stages::time(Stage::SnapshotLoad, || {
                let policy = snapshot::load_policy(&bytes, &model, &device, &vocab)?;
                Ok::<_, ActorError>(policy.decoder()?)
            })
        })
        .await
        .map_err(|e| ActorError::Join(e.to_string()))??;
        telemetry::metrics::record_snapshot(meta.bytes, started.elapsed());
        Ok(Arc::new(policy))
    }
}
