//! The policy snapshot an actor decodes with: following `latest`, fetching a new snapshot
//! (checked against its sha256 by the bus), and refusing one that fails while keeping the
//! previous one.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use caprl_common::bus::{Bus, BusError, SnapshotMeta};
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

/// The snapshot held and the ones refused.
pub(crate) struct SnapshotState {
    pub(crate) held: Option<Held>,
    /// sha256 of snapshots that failed verification or loading: never retried.
    refused: HashSet<String>,
    version_tx: watch::Sender<u64>,
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
    /// No snapshot yet; `version_tx` is told the version of each one taken.
    pub(crate) fn new(version_tx: watch::Sender<u64>) -> SnapshotState {
        SnapshotState {
            held: None,
            refused: HashSet::new(),
            version_tx,
        }
    }

    pub(crate) fn version(&self) -> Option<u64> {
        self.held.as_ref().map(|h| h.meta.version)
    }

    /// Loads `latest` if it differs from the held snapshot; a snapshot that
    /// fails is refused (logged, counted) and the held one kept.
    pub(crate) async fn refresh(
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
    pub(crate) async fn load(
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
    let fetch = stages::Timer::start(Stage::SnapshotFetch);
    let bytes = bus.get_snapshot(meta).await?;
    drop(fetch);
    let (model, device) = (cfg.model.clone(), cfg.device.clone());
    let vocab = cfg.data.vocab.hash().to_string();
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
