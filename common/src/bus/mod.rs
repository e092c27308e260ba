//! The message bus between learner, actors and reward workers.
//!
//! One trait, [`Bus`], two implementations with the same semantics:
//! [`NatsBus`] (JetStream, for a cluster) and [`InProcBus`] (tokio, for one process).
//!
//! - Three work queues ([`Queue`]): each message goes to exactly one puller; a
//!   [`Delivery`] that is not acked within `ack_wait` is delivered again with a higher
//!   [`Delivery::delivery_count`] (at-least-once). [`Delivery::term`] rejects a message
//!   for good (undecodable bytes): never redelivered, never counted as processed.
//! - Policy snapshots: bytes in an object store, or files in `runtime.snapshot_dir` when every
//!   role can read it (`snapshot_file`), described by a [`SnapshotMeta`] (`version`,
//!   `checksum`, `bytes`, `file`) under the KV key `latest`.
//! - A small KV map for heartbeats and other control state.
//!
//! Names, for run id `<run>`: subjects `caprl.<run>.tasks|rollouts|scored`,
//! KV bucket `caprl-<run>-control`, object store `caprl-<run>-snapshots`.
//! [`LocalNatsServer`] starts a private `nats-server` for tests and single-machine runs.

mod backoff;
mod blocking;
mod connect;
mod error;
mod inproc;
mod nats;
mod nats_retry;
mod nats_setup;
mod server;
mod settings;
mod snapshot_cache;
mod snapshot_chain;
mod snapshot_file;
mod snapshot_object;

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use backoff::Backoff;
pub use connect::connect_options;
pub use error::BusError;
pub use inproc::InProcBus;
pub use nats::NatsBus;
pub use nats_retry::Retry;
pub use server::{LocalNatsServer, LocalNatsServerOptions};
pub use settings::{BusOptions, NatsConfig, SnapshotDeltas, MAX_SECS, MAX_SECS_ALLOWED};

/// Result of every bus operation.
pub type BusResult<T> = Result<T, BusError>;

/// KV key that holds the JSON [`SnapshotMeta`] of the newest policy snapshot.
pub const LATEST_KEY: &str = "latest";

/// Longest pull wait or nak delay honoured; longer ones are cut to this.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(24 * 3600);
/// The three work queues of a run, in data-flow order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Queue {
    /// Learner → actors: `RolloutTask`s.
    Tasks,
    /// Actors → reward workers: `Rollout`s.
    Rollouts,
    /// Reward workers → learner: `ScoredRollout`s.
    Scored,
}

impl Queue {
    /// All queues, in data-flow order.
    pub const ALL: [Queue; 3] = [Queue::Tasks, Queue::Rollouts, Queue::Scored];

    /// Lowercase name used in subjects and stream names.
    pub fn name(self) -> &'static str {
        match self {
            Queue::Tasks => "tasks",
            Queue::Rollouts => "rollouts",
            Queue::Scored => "scored",
        }
    }

    pub(crate) fn index(self) -> usize {
        match self {
            Queue::Tasks => 0,
            Queue::Rollouts => 1,
            Queue::Scored => 2,
        }
    }
}

impl fmt::Display for Queue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a policy snapshot is and how to check it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotMeta {
    /// Policy version the snapshot holds.
    pub version: u64,
    /// The checksum of the snapshot bytes.
    pub checksum: Checksum,
    /// Length of the snapshot in bytes.
    pub bytes: u64,
    /// Where the bytes are when the learner writes snapshots as files (`runtime.snapshot_dir`);
    /// absent: in the run's object store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<PathBuf>,
    /// Empty when the object store holds this version whole. Else the version is stored as a
    /// delta against the version before it in this list ([`crate::snapshot_delta`]): the list
    /// starts with the newest version stored whole and ends with this one, so a reader holding
    /// any version of it fetches only the deltas after that, and any other reader the whole
    /// first version and every delta.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chain: Vec<u64>,
}

impl SnapshotMeta {
    /// Checks that `data` is the snapshot this meta describes.
    pub fn verify(&self, data: &[u8]) -> BusResult<()> {
        let actual = self.checksum.recompute(data);
        if actual != self.checksum || data.len() as u64 != self.bytes {
            return Err(BusError::ChecksumMismatch {
                version: self.version,
                expected: self.checksum.clone(),
                actual,
                bytes: data.len(),
            });
        }
        Ok(())
    }
}

/// A snapshot's checksum, lowercase hex. The object store's is SHA-256, the digest JetStream
/// computes anyway as it stores the bytes; where nothing else reads them (files, the in-process
/// store) it is XXH3-128, which a reader checks at memory speed (a 226 MB policy: about 15 ms,
/// against 160 ms for SHA-256).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Checksum {
    Sha256(String),
    Xxh3(String),
}

impl Checksum {
    /// The SHA-256 of `data`.
    pub fn sha256(data: &[u8]) -> Checksum {
        Checksum::Sha256(sha256_hex(data))
    }

    /// The XXH3-128 of `data`.
    pub fn xxh3(data: &[u8]) -> Checksum {
        Checksum::of_xxh3(xxhash_rust::xxh3::xxh3_128(data))
    }

    /// The checksum whose XXH3-128 is `sum` (computed elsewhere, e.g. by a snapshot delta).
    pub fn of_xxh3(sum: u128) -> Checksum {
        Checksum::Xxh3(format!("{sum:032x}"))
    }

    /// The checksum of `data` by the same algorithm as this one.
    pub fn recompute(&self, data: &[u8]) -> Checksum {
        match self {
            Checksum::Sha256(_) => Checksum::sha256(data),
            Checksum::Xxh3(_) => Checksum::xxh3(data),
        }
    }

    /// The XXH3-128 this checksum is, when it is one.
    pub fn as_xxh3(&self) -> Option<u128> {
        match self {
            Checksum::Xxh3(hex) => u128::from_str_radix(hex, 16).ok(),
            Checksum::Sha256(_) => None,
        }
    }

    /// The hex digits.
    pub fn hex(&self) -> &str {
        match self {
            Checksum::Sha256(hex) | Checksum::Xxh3(hex) => hex,
        }
    }
}

impl fmt::Display for Checksum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Checksum::Sha256(hex) => write!(f, "sha256 {hex}"),
            Checksum::Xxh3(hex) => write!(f, "xxh3-128 {hex}"),
        }
    }
}

/// Lowercase hex SHA-256 of `data`.
pub fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// One KV entry, as listed by [`Bus::kv_entries`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvEntry {
    pub key: String,
    pub value: Bytes,
    /// When the value was written (the broker's clock for NATS). Heartbeat readers
    /// judge liveness by it: entries do not expire by themselves.
    pub updated: SystemTime,
}

/// Checks a KV key against what NATS accepts (the in-process bus applies the same rule).
pub(crate) fn validate_key(key: &str) -> BusResult<()> {
    let ok = !key.is_empty()
        && key.len() <= 256
        && !key.starts_with('.')
        && !key.ends_with('.')
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'=' | b'.' | b'/' | b'-'));
    if key == LATEST_KEY {
        Err(BusError::ReservedKey {
            key: key.to_string(),
        })
    } else if ok {
        Ok(())
    } else {
        Err(BusError::InvalidKey {
            key: key.to_string(),
        })
    }
}

/// Settles one delivery with the broker; implemented per bus.
pub(crate) trait Settle: Send + Sync {
    fn ack(&self) -> BoxFuture<'_, BusResult<()>>;
    fn nak(&self, delay: Option<Duration>) -> BoxFuture<'_, BusResult<()>>;
    fn term(&self) -> BoxFuture<'_, BusResult<()>>;
    fn progress(&self) -> BoxFuture<'_, BusResult<()>>;
}

/// One message handed to one puller. Settle it with exactly one of
/// [`ack`](Delivery::ack), [`nak`](Delivery::nak) or [`term`](Delivery::term);
/// dropping it unsettled means "redeliver after `ack_wait`".
pub struct Delivery {
    payload: Bytes,
    delivery_count: u64,
    settle: Arc<dyn Settle>,
    /// How long the broker waits for a settlement before it hands the message out again.
    ack_wait: Duration,
}

impl Delivery {
    pub(crate) fn new(
        payload: Bytes,
        delivery_count: u64,
        settle: Arc<dyn Settle>,
        ack_wait: Duration,
    ) -> Delivery {
        Delivery {
            payload,
            delivery_count,
            settle,
            ack_wait,
        }
    }

    /// Keeps this delivery from being handed to a second worker while its work runs longer
    /// than `ack_wait` (a COCO-sized decode can): until the guard is dropped, a task restarts
    /// the broker's `ack_wait` clock every third of it (JetStream's in-progress ack). A worker
    /// that dies or is paused stops restarting it, so its message still comes back after one
    /// `ack_wait`. Needs a tokio runtime.
    pub fn keep_alive(&self) -> KeepAlive {
        let settle = Arc::clone(&self.settle);
        let every = (self.ack_wait / 3).max(Duration::from_millis(50));
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                if let Err(e) = settle.progress().await {
                    tracing::debug!(
                        "extending a delivery's ack wait failed ({e}); it may be handed out again"
                    );
                }
            }
        });
        KeepAlive(task.abort_handle())
    }

    /// The message bytes.
    pub fn payload(&self) -> &Bytes {
        &self.payload
    }

    /// 1 on the first delivery, n on the n-th (redelivered after ack_wait or nak).
    pub fn delivery_count(&self) -> u64 {
        self.delivery_count
    }

    /// Whether this message was delivered before.
    pub fn is_redelivery(&self) -> bool {
        self.delivery_count > 1
    }

    /// Done: the message leaves the queue.
    pub async fn ack(self) -> BusResult<()> {
        self.settle.ack().await
    }

    /// Not done: deliver again, after `delay` if given, else as soon as possible.
    pub async fn nak(self, delay: Option<Duration>) -> BusResult<()> {
        self.settle.nak(delay).await
    }

    /// Rejected for good (e.g. undecodable): never redelivered, not processed.
    pub async fn term(self) -> BusResult<()> {
        self.settle.term().await
    }

    /// Still working: restart the `ack_wait` clock for this delivery.
    pub async fn progress(&self) -> BusResult<()> {
        self.settle.progress().await
    }
}

/// Stops extending a delivery's ack wait when dropped ([`Delivery::keep_alive`]).
pub struct KeepAlive(tokio::task::AbortHandle);

impl Drop for KeepAlive {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl fmt::Debug for Delivery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Delivery")
            .field("bytes", &self.payload.len())
            .field("delivery_count", &self.delivery_count)
            .finish()
    }
}

/// Stream of snapshot descriptions from [`Bus::watch_latest`].
pub type SnapshotWatch = BoxStream<'static, BusResult<SnapshotMeta>>;

/// The bus every role talks to (`Arc<dyn Bus>`). All methods are cancel-safe to drop
/// except that a dropped `pull` may leave messages in flight until `ack_wait`.
pub trait Bus: Send + Sync {
    /// Appends `payload` to `queue`; returns once the broker has stored it.
    fn publish(&self, queue: Queue, payload: Bytes) -> BoxFuture<'_, BusResult<()>>;

    /// Takes up to `max` messages from `queue`, waiting up to `wait` for the first one;
    /// returns what is there as soon as there is something (empty after `wait`,
    /// which is capped at one day).
    fn pull(
        &self,
        queue: Queue,
        max: usize,
        wait: Duration,
    ) -> BoxFuture<'_, BusResult<Vec<Delivery>>>;

    /// Messages in `queue` not yet acked or termed (waiting plus in flight).
    fn depth(&self, queue: Queue) -> BoxFuture<'_, BusResult<u64>>;

    /// Drops every message of `queue`.
    fn purge(&self, queue: Queue) -> BoxFuture<'_, BusResult<()>>;

    /// Stores snapshot `version`, then points `latest` at it.
    fn put_snapshot(&self, version: u64, data: Bytes) -> BoxFuture<'_, BusResult<SnapshotMeta>>;

    /// Fetches the snapshot `meta` describes and checks its length and checksum.
    fn get_snapshot<'a>(&'a self, meta: &'a SnapshotMeta) -> BoxFuture<'a, BusResult<Bytes>>;

    /// Removes the stored bytes of snapshot `version` (no error if absent).
    fn delete_snapshot(&self, version: u64) -> BoxFuture<'_, BusResult<()>>;

    /// The newest published snapshot, if any.
    fn latest(&self) -> BoxFuture<'_, BusResult<Option<SnapshotMeta>>>;

    /// Yields the current `latest` (if any) and then each newer one. A slow reader may
    /// miss intermediate versions on the in-process bus, never the newest.
    fn watch_latest(&self) -> BoxFuture<'_, BusResult<SnapshotWatch>>;

    /// Sets KV `key` (see [`KvEntry`]; keys: `[A-Za-z0-9_=./-]`, not `latest`).
    fn kv_put<'a>(&'a self, key: &'a str, value: Bytes) -> BoxFuture<'a, BusResult<()>>;

    /// Reads KV `key`.
    fn kv_get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, BusResult<Option<Bytes>>>;

    /// Removes KV `key` (no error if absent).
    fn kv_delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, BusResult<()>>;

    /// All KV entries whose key starts with `prefix`, sorted by key (never `latest`).
    fn kv_entries<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, BusResult<Vec<KvEntry>>>;

    /// Deletes everything of this run: queues, KV, snapshots.
    fn delete_run(&self) -> BoxFuture<'_, BusResult<()>>;
}
