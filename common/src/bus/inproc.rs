//! The bus inside one process, with the same semantics as the JetStream one: each
//! message goes to one puller, un-acked deliveries come back after `ack_wait` with a
//! higher delivery count, `term` drops a message for good, and snapshots are checked
//! by their checksum. Clones share one bus.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::StreamExt;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use super::{
    validate_key, Bus, BusError, BusOptions, BusResult, Checksum, Delivery, KvEntry, Queue, Settle,
    SnapshotMeta, SnapshotWatch, MAX_WAIT,
};

/// [`Bus`] for a single process (tests, `caprl train` on one machine).
#[derive(Clone)]
pub struct InProcBus {
    inner: Arc<Inner>,
}

struct Inner {
    opts: BusOptions,
    queues: [QueueCell; 3],
    /// Each snapshot with the meta its bytes were hashed into when put.
    snapshots: Mutex<HashMap<u64, (SnapshotMeta, Bytes)>>,
    latest: watch::Sender<Option<SnapshotMeta>>,
    kv: Mutex<BTreeMap<String, (Bytes, SystemTime)>>,
}

#[derive(Default)]
struct QueueCell {
    state: Mutex<QueueState>,
    /// Woken on publish and on nak-without-delay.
    ready: Notify,
}

#[derive(Default)]
struct QueueState {
    next_seq: u64,
    /// Sequence numbers ready for delivery, oldest first (redeliveries come first).
    waiting: BTreeSet<u64>,
    messages: HashMap<u64, Stored>,
}

struct Stored {
    payload: Bytes,
    delivered: u64,
    /// Set while in flight: when the lease ends, the message is delivered again.
    lease_until: Option<Instant>,
}

impl QueueState {
    /// Returns expired leases to the waiting set; gives the earliest remaining lease end.
    fn expire(&mut self, now: Instant) -> Option<Instant> {
        let mut earliest: Option<Instant> = None;
        for (seq, msg) in self.messages.iter_mut() {
            if let Some(until) = msg.lease_until {
                if until <= now {
                    msg.lease_until = None;
                    self.waiting.insert(*seq);
                } else {
                    earliest = Some(earliest.map_or(until, |e| e.min(until)));
                }
            }
        }
        earliest
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding a bus lock leaves consistent data (every update is one
    // step), so a poisoned lock is still usable.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl InProcBus {
    /// A new, empty bus.
    pub fn new(opts: &BusOptions) -> BusResult<InProcBus> {
        opts.validate()?;
        let (latest, _) = watch::channel(None);
        Ok(InProcBus {
            inner: Arc::new(Inner {
                opts: opts.clone(),
                queues: Default::default(),
                snapshots: Mutex::new(HashMap::new()),
                latest,
                kv: Mutex::new(BTreeMap::new()),
            }),
        })
    }

    /// The options this bus runs with.
    pub fn options(&self) -> &BusOptions {
        &self.inner.opts
    }

    fn take(&self, queue: Queue, max: usize) -> (Vec<Delivery>, Option<Instant>) {
        let cell = &self.inner.queues[queue.index()];
        let mut state = lock(&cell.state);
        let now = Instant::now();
        let mut earliest = state.expire(now);
        let lease_until = now + self.inner.opts.ack_wait();
        let mut out = Vec::new();
        while out.len() < max {
            let Some(seq) = state.waiting.pop_first() else {
                break;
            };
            let Some(msg) = state.messages.get_mut(&seq) else {
                continue;
            };
            msg.delivered += 1;
            msg.lease_until = Some(lease_until);
            earliest = Some(earliest.map_or(lease_until, |e| e.min(lease_until)));
            let settle = InProcSettle {
                inner: self.inner.clone(),
                queue,
                seq,
                delivery: msg.delivered,
            };
            out.push(Delivery::new(
                msg.payload.clone(),
                msg.delivered,
                Arc::new(settle),
                self.inner.opts.ack_wait(),
            ));
        }
        (out, earliest)
    }
}

struct InProcSettle {
    inner: Arc<Inner>,
    queue: Queue,
    seq: u64,
    /// Which delivery of the message this is; settling a stale one does nothing
    /// except ack/term, which remove the message whatever happened since.
    delivery: u64,
}

impl InProcSettle {
    fn with_current<F: FnOnce(&mut Stored, &mut BTreeSet<u64>)>(&self, f: F) {
        let cell = &self.inner.queues[self.queue.index()];
        let mut guard = lock(&cell.state);
        let state = &mut *guard;
        if let Some(msg) = state.messages.get_mut(&self.seq) {
            if msg.delivered == self.delivery && msg.lease_until.is_some() {
                f(msg, &mut state.waiting);
            }
        }
    }

    fn remove(&self) {
        let cell = &self.inner.queues[self.queue.index()];
        let mut state = lock(&cell.state);
        state.messages.remove(&self.seq);
        state.waiting.remove(&self.seq);
    }
}

impl Settle for InProcSettle {
    fn ack(&self) -> BoxFuture<'_, BusResult<()>> {
        self.remove();
        Box::pin(async { Ok(()) })
    }

    fn nak(&self, delay: Option<Duration>) -> BoxFuture<'_, BusResult<()>> {
        let seq = self.seq;
        let mut wake = false;
        self.with_current(|msg, waiting| match delay {
            Some(delay) => msg.lease_until = Some(Instant::now() + delay.min(MAX_WAIT)),
            None => {
                msg.lease_until = None;
                waiting.insert(seq);
                wake = true;
            }
        });
        if wake {
            self.inner.queues[self.queue.index()].ready.notify_waiters();
        }
        Box::pin(async { Ok(()) })
    }

    fn term(&self) -> BoxFuture<'_, BusResult<()>> {
        self.remove();
        Box::pin(async { Ok(()) })
    }

    fn progress(&self) -> BoxFuture<'_, BusResult<()>> {
        let ack_wait = self.inner.opts.ack_wait();
        self.with_current(|msg, _| msg.lease_until = Some(Instant::now() + ack_wait));
        Box::pin(async { Ok(()) })
    }
}

impl Bus for InProcBus {
    fn publish(&self, queue: Queue, payload: Bytes) -> BoxFuture<'_, BusResult<()>> {
        Box::pin(async move {
            let max = self.inner.opts.max_message_bytes;
            if payload.len() > max {
                return Err(BusError::TooLarge {
                    bytes: payload.len(),
                    max,
                });
            }
            let cell = &self.inner.queues[queue.index()];
            {
                let mut state = lock(&cell.state);
                state.next_seq += 1;
                let seq = state.next_seq;
                state.messages.insert(
                    seq,
                    Stored {
                        payload,
                        delivered: 0,
                        lease_until: None,
                    },
                );
                state.waiting.insert(seq);
            }
            cell.ready.notify_waiters();
            Ok(())
        })
    }

    fn pull(
        &self,
        queue: Queue,
        max: usize,
        wait: Duration,
    ) -> BoxFuture<'_, BusResult<Vec<Delivery>>> {
        Box::pin(async move {
            if max == 0 {
                return Ok(Vec::new());
            }
            let give_up = Instant::now() + wait.min(MAX_WAIT);
            let cell = &self.inner.queues[queue.index()];
            loop {
                // Register for wake-ups before looking, so a publish in between is not missed.
                let notified = cell.ready.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                let (out, next_expiry) = self.take(queue, max);
                if !out.is_empty() || Instant::now() >= give_up {
                    return Ok(out);
                }
                let until = next_expiry.map_or(give_up, |e| e.min(give_up));
                tokio::select! {
                    _ = notified => {}
                    _ = tokio::time::sleep_until(until) => {}
                }
            }
        })
    }

    fn depth(&self, queue: Queue) -> BoxFuture<'_, BusResult<u64>> {
        let n = lock(&self.inner.queues[queue.index()].state).messages.len();
        Box::pin(async move { Ok(n as u64) })
    }

    fn purge(&self, queue: Queue) -> BoxFuture<'_, BusResult<()>> {
        {
            let mut state = lock(&self.inner.queues[queue.index()].state);
            state.messages.clear();
            state.waiting.clear();
        }
        Box::pin(async { Ok(()) })
    }

    fn put_snapshot(&self, version: u64, data: Bytes) -> BoxFuture<'_, BusResult<SnapshotMeta>> {
        Box::pin(async move {
            let meta = SnapshotMeta {
                version,
                checksum: Checksum::xxh3(&data),
                bytes: data.len() as u64,
                file: None,
                chain: Vec::new(),
            };
            lock(&self.inner.snapshots).insert(version, (meta.clone(), data));
            self.inner.latest.send_replace(Some(meta.clone()));
            Ok(meta)
        })
    }

    fn get_snapshot<'a>(&'a self, meta: &'a SnapshotMeta) -> BoxFuture<'a, BusResult<Bytes>> {
        Box::pin(async move {
            let (stored, data) = lock(&self.inner.snapshots)
                .get(&meta.version)
                .cloned()
                .ok_or(BusError::SnapshotMissing {
                    version: meta.version,
                })?;
            // The bytes handed out are the very bytes hashed at put (shared, never copied):
            // comparing the metas checks them without hashing every snapshot twice.
            if stored.checksum != meta.checksum || stored.bytes != meta.bytes {
                return Err(BusError::ChecksumMismatch {
                    version: meta.version,
                    expected: meta.checksum.clone(),
                    actual: stored.checksum,
                    bytes: data.len(),
                });
            }
            Ok(data)
        })
    }

    fn delete_snapshot(&self, version: u64) -> BoxFuture<'_, BusResult<()>> {
        lock(&self.inner.snapshots).remove(&version);
        Box::pin(async { Ok(()) })
    }

    fn latest(&self) -> BoxFuture<'_, BusResult<Option<SnapshotMeta>>> {
        let latest = self.inner.latest.borrow().clone();
        Box::pin(async move { Ok(latest) })
    }

    fn watch_latest(&self) -> BoxFuture<'_, BusResult<SnapshotWatch>> {
        let mut rx = self.inner.latest.subscribe();
        let first = rx.borrow_and_update().clone();
        let metas = futures::stream::unfold((rx, first), |(mut rx, pending)| async move {
            if let Some(meta) = pending {
                return Some((Ok(meta), (rx, None)));
            }
            loop {
                rx.changed().await.ok()?;
                let current = rx.borrow_and_update().clone();
                if let Some(meta) = current {
                    return Some((Ok(meta), (rx, None)));
                }
            }
        });
        Box::pin(async move { Ok(metas.boxed()) })
    }

    fn kv_put<'a>(&'a self, key: &'a str, value: Bytes) -> BoxFuture<'a, BusResult<()>> {
        Box::pin(async move {
            validate_key(key)?;
            lock(&self.inner.kv).insert(key.to_string(), (value, SystemTime::now()));
            Ok(())
        })
    }

    fn kv_get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, BusResult<Option<Bytes>>> {
        Box::pin(async move {
            validate_key(key)?;
            Ok(lock(&self.inner.kv).get(key).map(|(v, _)| v.clone()))
        })
    }

    fn kv_delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, BusResult<()>> {
        Box::pin(async move {
            validate_key(key)?;
            lock(&self.inner.kv).remove(key);
            Ok(())
        })
    }

    fn kv_entries<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, BusResult<Vec<KvEntry>>> {
        Box::pin(async move {
            let kv = lock(&self.inner.kv);
            Ok(kv
                .range(prefix.to_string()..)
                .take_while(|(k, _)| k.starts_with(prefix))
                .map(|(k, (v, t))| KvEntry {
                    key: k.clone(),
                    value: v.clone(),
                    updated: *t,
                })
                .collect())
        })
    }

    fn delete_run(&self) -> BoxFuture<'_, BusResult<()>> {
        for cell in &self.inner.queues {
            let mut state = lock(&cell.state);
            state.messages.clear();
            state.waiting.clear();
        }
        lock(&self.inner.snapshots).clear();
        lock(&self.inner.kv).clear();
        self.inner.latest.send_replace(None);
        Box::pin(async { Ok(()) })
    }
}
