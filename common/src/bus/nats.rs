//! The bus on NATS JetStream.
//!
//! Per queue: a file-stored stream with work-queue retention on `caprl.<run>.<queue>`
//! and one durable pull consumer (`workers`) that every puller of the run shares, with
//! explicit acks and the run's `ack_wait`; so each message reaches one puller and an
//! un-acked one comes back. Snapshots live in the object store `caprl-<run>-snapshots`
//! (`snapshot_object`, whole or in version chains of deltas: `snapshot_chain`) or, with
//! `runtime.snapshot_dir`, in files (`snapshot_file`);
//! `latest` and heartbeats in the KV bucket `caprl-<run>-control`. Every broker call runs
//! under a deadline, so a dead broker surfaces as [`BusError::Timeout`] instead of a hang;
//! reconnecting (with backoff) is left to async-nats.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream::consumer::{pull, PullConsumer};
use async_nats::jetstream::kv::{self, Operation};
use async_nats::jetstream::message::{AckKind, Acker};
use async_nats::jetstream::object_store::ObjectStore;
use async_nats::jetstream::{self, Context};
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::{StreamExt, TryStreamExt};

use super::blocking::blocking;
use super::connect::connect;
use super::error::deadline;
use super::nats_setup::{open_kv, open_objects, open_queue, wait_for_queue};
use super::snapshot_cache::HostCache;
use super::snapshot_chain::{self, Chain, Held};
use super::snapshot_file::{self, Files};
use super::snapshot_object::{self, Store};
use super::{
    validate_key, Bus, BusError, BusOptions, BusResult, Delivery, KvEntry, NatsConfig, Queue,
    Settle, SnapshotMeta, SnapshotWatch, LATEST_KEY, MAX_WAIT,
};

/// Below this a pull does not wait at all (a pull request needs a positive expiry).
const MIN_WAIT: Duration = Duration::from_millis(10);

/// [`Bus`] on a NATS JetStream server or cluster.
pub struct NatsBus {
    client: async_nats::Client,
    js: Context,
    opts: BusOptions,
    max_payload: usize,
    /// One shared durable consumer per queue, opened at connect for the queues
    /// this process pulls from and on first use for the others.
    consumers: [tokio::sync::OnceCell<PullConsumer>; 3],
    kv: kv::Store,
    objects: ObjectStore,
    /// The learner's side of the object store's version chains.
    chain: tokio::sync::Mutex<Chain>,
    /// A reader's newest fetched version, to apply the next deltas to.
    held: tokio::sync::Mutex<Option<Held>>,
    /// The host's shared copy of fetched versions (`runtime.snapshot_cache_dir`), if any.
    host_cache: Option<HostCache>,
}

impl NatsBus {
    /// Connects with `[nats]` settings, then creates (or opens) the run's streams,
    /// consumers and buckets.
    pub async fn connect(nats: &NatsConfig, opts: &BusOptions) -> BusResult<NatsBus> {
        NatsBus::connect_pulling(nats, opts, &Queue::ALL).await
    }

    /// Like [`NatsBus::connect`], opening (or creating) only the consumers of
    /// `pulls` at once. A worker names the one queue it pulls from, so it needs
    /// no rights on the others (per-role NATS permissions); the learner opens all,
    /// which also creates every stream before anyone publishes.
    pub async fn connect_pulling(
        nats: &NatsConfig,
        opts: &BusOptions,
        pulls: &[Queue],
    ) -> BusResult<NatsBus> {
        opts.validate()?;
        let client = connect(nats).await?;
        NatsBus::with_client_pulling(client, opts, pulls).await
    }

    /// Opens the run `opts.run_id` for a read-only query (`caprl status`): creates nothing, and
    /// answers [`BusError::NoSuchRun`] when no learner has created the run's control bucket.
    pub async fn open_existing(nats: &NatsConfig, opts: &BusOptions) -> BusResult<NatsBus> {
        use async_nats::jetstream::context::GetStreamErrorKind;
        use async_nats::jetstream::ErrorCode;
        opts.validate()?;
        let client = connect(nats).await?;
        let js = jetstream::ContextBuilder::new()
            .timeout(opts.request_timeout())
            .build(client.clone());
        let control = format!("KV_{}", opts.control_bucket());
        let found = deadline(
            "look up the run",
            opts.request_timeout(),
            js.get_stream(control),
        );
        match found.await? {
            Ok(_) => NatsBus::with_client_pulling(client, opts, &[]).await,
            Err(e) => match e.kind() {
                GetStreamErrorKind::JetStream(j)
                    if j.error_code() == ErrorCode::STREAM_NOT_FOUND =>
                {
                    Err(BusError::NoSuchRun {
                        run_id: opts.run_id.clone(),
                        url: nats.url.clone(),
                    })
                }
                _ => Err(BusError::js("look up the run", e)),
            },
        }
    }

    async fn with_client_pulling(
        client: async_nats::Client,
        opts: &BusOptions,
        pulls: &[Queue],
    ) -> BusResult<NatsBus> {
        opts.validate()?;
        let js = jetstream::ContextBuilder::new()
            .timeout(opts.request_timeout())
            .build(client.clone());
        let limit = opts.request_timeout() * 4;
        let consumers: [tokio::sync::OnceCell<PullConsumer>; 3] = Default::default();
        // The learner (which pulls from every queue) creates the queues; a role that pulls from
        // some waits for them. Two processes creating the same consumer at once left nats-server
        // 2.9 with a consumer whose deliveries never reached anyone, which stalled the run.
        let creates = pulls.len() == Queue::ALL.len();
        for &queue in pulls {
            let consumer = if creates {
                deadline("open queue", limit, open_queue(&js, opts, queue)).await??
            } else {
                wait_for_queue(&js, opts, queue).await?
            };
            let _ = consumers[queue.index()].set(consumer);
        }
        let kv = deadline("open control bucket", limit, open_kv(&js, opts)).await??;
        let objects = deadline("open snapshot store", limit, open_objects(&js, opts)).await??;
        let max_payload = opts.max_message_bytes.min(client.server_info().max_payload);
        Ok(NatsBus {
            client,
            js,
            opts: opts.clone(),
            max_payload,
            consumers,
            kv,
            objects,
            chain: tokio::sync::Mutex::new(Chain::default()),
            held: tokio::sync::Mutex::new(None),
            host_cache: opts
                .snapshot_cache_dir
                .as_deref()
                .map(|root| HostCache::new(root, &opts.run_id)),
        })
    }

    /// The object store with this bus's chunk size and deadline for whole snapshots.
    fn store(&self) -> Store<'_> {
        Store {
            objects: &self.objects,
            max_payload: self.max_payload,
            timeout: self.opts.snapshot_timeout(),
        }
    }

    /// The options this bus runs with.
    pub fn options(&self) -> &BusOptions {
        &self.opts
    }

    /// The queue's consumer, opened on first use when connect did not open it.
    async fn consumer(&self, queue: Queue) -> BusResult<&PullConsumer> {
        let limit = self.opts.request_timeout() * 4;
        self.consumers[queue.index()]
            .get_or_try_init(|| async {
                deadline("open queue", limit, open_queue(&self.js, &self.opts, queue)).await?
            })
            .await
    }

    async fn fetch_now(&self, queue: Queue, max: usize) -> BusResult<Vec<Delivery>> {
        let consumer = self.consumer(queue).await?;
        let work = async {
            let batch = consumer
                .fetch()
                .max_messages(max)
                .messages()
                .await
                .map_err(|e| BusError::js("pull", e))?;
            self.collect(batch).await
        };
        deadline("pull", self.opts.request_timeout(), work).await?
    }

    async fn wait_for_one(&self, queue: Queue, wait: Duration) -> BusResult<Vec<Delivery>> {
        let consumer = self.consumer(queue).await?;
        let work = async {
            let batch = consumer
                .batch()
                .max_messages(1)
                .expires(wait)
                .messages()
                .await
                .map_err(|e| BusError::js("pull", e))?;
            self.collect(batch).await
        };
        deadline("pull", wait + self.opts.request_timeout(), work).await?
    }

    async fn collect(&self, mut batch: pull::Batch) -> BusResult<Vec<Delivery>> {
        let mut out = Vec::new();
        while let Some(message) = batch.next().await {
            let message = message.map_err(|e| BusError::js("pull", e))?;
            let count = message
                .info()
                .map(|info| info.delivered.max(1) as u64)
                .map_err(|e| BusError::js("pull (reading delivery info)", e))?;
            let (message, acker) = message.split();
            let settle = NatsSettle {
                acker,
                client: self.client.clone(),
                timeout: self.opts.request_timeout(),
            };
            out.push(Delivery::new(
                message.payload,
                count,
                Arc::new(settle),
                self.opts.ack_wait(),
            ));
        }
        Ok(out)
    }

    /// The directory this run's snapshot files go to, when the learner writes files.
    fn snapshot_files(&self) -> Option<PathBuf> {
        let root = self.opts.snapshot_dir.as_deref()?;
        Some(snapshot_file::run_dir(root, &self.opts.run_id))
    }
}

fn parse_meta(value: &[u8]) -> BusResult<SnapshotMeta> {
    serde_json::from_slice(value).map_err(|e| BusError::BadLatest {
        detail: e.to_string(),
    })
}

fn system_time(created: async_nats::jetstream::kv::Entry) -> SystemTime {
    let nanos = created.created.unix_timestamp_nanos();
    u64::try_from(nanos)
        .map(|n| UNIX_EPOCH + Duration::from_nanos(n))
        .unwrap_or(UNIX_EPOCH)
}

struct NatsSettle {
    acker: Acker,
    client: async_nats::Client,
    timeout: Duration,
}

impl NatsSettle {
    async fn send(&self, op: &'static str, kind: AckKind) -> BusResult<()> {
        let work = async {
            self.acker
                .ack_with(kind)
                .await
                .map_err(|e| BusError::js(op, e))?;
            self.client.flush().await.map_err(|e| BusError::js(op, e))
        };
        deadline(op, self.timeout, work).await?
    }
}

impl Settle for NatsSettle {
    fn ack(&self) -> BoxFuture<'_, BusResult<()>> {
        Box::pin(async move {
            // Wait for the server's confirmation: an ack lost on the way would mean a
            // redelivery of work already done.
            deadline("ack", self.timeout, self.acker.double_ack())
                .await?
                .map_err(|e| BusError::js("ack", e))
        })
    }

    fn nak(&self, delay: Option<Duration>) -> BoxFuture<'_, BusResult<()>> {
        Box::pin(self.send("nak", AckKind::Nak(delay.map(|d| d.min(MAX_WAIT)))))
    }

    fn term(&self) -> BoxFuture<'_, BusResult<()>> {
        Box::pin(self.send("term", AckKind::Term))
    }

    fn progress(&self) -> BoxFuture<'_, BusResult<()>> {
        Box::pin(self.send("progress", AckKind::Progress))
    }
}

impl Bus for NatsBus {
    fn publish(&self, queue: Queue, payload: Bytes) -> BoxFuture<'_, BusResult<()>> {
        Box::pin(async move {
            if payload.len() > self.max_payload {
                return Err(BusError::TooLarge {
                    bytes: payload.len(),
                    max: self.max_payload,
                });
            }
            let work = async {
                let ack = self
                    .js
                    .publish(self.opts.subject(queue), payload)
                    .await
                    .map_err(|e| BusError::js("publish", e))?;
                ack.await.map_err(|e| BusError::js("publish", e))?;
                Ok(())
            };
            deadline("publish", self.opts.request_timeout(), work).await?
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
            let wait = wait.min(MAX_WAIT);
            // Take what is there; only if nothing is, park one single-message pull request
            // for `wait`, then top up without waiting. A pending multi-message request
            // would hold on to messages we no longer listen for.
            let mut out = self.fetch_now(queue, max).await?;
            if !out.is_empty() || wait < MIN_WAIT {
                return Ok(out);
            }
            out = self.wait_for_one(queue, wait).await?;
            if !out.is_empty() && max > 1 {
                out.extend(self.fetch_now(queue, max - 1).await?);
            }
            Ok(out)
        })
    }

    fn depth(&self, queue: Queue) -> BoxFuture<'_, BusResult<u64>> {
        Box::pin(async move {
            let consumer = self.consumer(queue).await?;
            let info = deadline("depth", self.opts.request_timeout(), consumer.get_info())
                .await?
                .map_err(|e| BusError::js("depth", e))?;
            Ok(info.num_pending + info.num_ack_pending as u64)
        })
    }

    fn purge(&self, queue: Queue) -> BoxFuture<'_, BusResult<()>> {
        Box::pin(async move {
            let work = async {
                let stream = self
                    .js
                    .get_stream_no_info(self.opts.stream_name(queue))
                    .await
                    .map_err(|e| BusError::js("purge", e))?;
                stream.purge().await.map_err(|e| BusError::js("purge", e))?;
                Ok(())
            };
            deadline("purge", self.opts.request_timeout(), work).await?
        })
    }

    fn put_snapshot(&self, version: u64, data: Bytes) -> BoxFuture<'_, BusResult<SnapshotMeta>> {
        Box::pin(async move {
            let deltas = self.opts.snapshot_deltas;
            let meta = match self.snapshot_files() {
                Some(dir) if !self.opts.snapshot_file_deltas => {
                    blocking(move || snapshot_file::write(&dir, version, &data)).await?
                }
                Some(dir) => {
                    let mut chain = self.chain.lock().await;
                    chain
                        .put(&Files::writing(dir), deltas, version, data)
                        .await?
                }
                None => {
                    let mut chain = self.chain.lock().await;
                    chain.put(&self.store(), deltas, version, data).await?
                }
            };
            let record = serde_json::to_vec(&meta)
                .map_err(|source| BusError::EncodeMeta { version, source })?;
            deadline(
                "set latest snapshot",
                self.opts.request_timeout(),
                self.kv.put(LATEST_KEY, record.into()),
            )
            .await?
            .map_err(|e| BusError::js("set latest snapshot", e))?;
            Ok(meta)
        })
    }

    fn get_snapshot<'a>(&'a self, meta: &'a SnapshotMeta) -> BoxFuture<'a, BusResult<Bytes>> {
        Box::pin(async move {
            match &meta.file {
                Some(path) if meta.chain.is_empty() => {
                    let (path, read_meta) = (path.clone(), meta.clone());
                    let bytes = blocking(move || snapshot_file::read(&path, &read_meta)).await?;
                    // Mapped, so holding it costs no copy: a delta file may come next.
                    *self.held.lock().await = Some(Held::checked(meta, bytes.clone()));
                    Ok(bytes)
                }
                Some(_) => {
                    let mut held = self.held.lock().await;
                    snapshot_chain::get(&Files::reading(meta), &mut held, meta).await
                }
                None => {
                    let mut held = self.held.lock().await;
                    let Some(cache) = &self.host_cache else {
                        return snapshot_chain::get(&self.store(), &mut held, meta).await;
                    };
                    let store = self.store();
                    let cached = cache
                        .get(meta, || async {
                            let bytes = snapshot_chain::get(&store, &mut held, meta).await?;
                            Ok((bytes, held.as_ref().and_then(Held::xxh3)))
                        })
                        .await?;
                    if !cached.fetched {
                        // The next delta applies to what another reader of this host fetched.
                        *held = Some(Held::new(meta.version, cached.bytes.clone(), cached.xxh3));
                    }
                    Ok(cached.bytes)
                }
            }
        })
    }

    fn delete_snapshot(&self, version: u64) -> BoxFuture<'_, BusResult<()>> {
        Box::pin(async move {
            if self.chain.lock().await.defers(version) {
                return Ok(());
            }
            if let Some(dir) = self.snapshot_files() {
                return blocking(move || snapshot_file::delete(&dir, version)).await;
            }
            snapshot_object::delete(&self.objects, self.opts.request_timeout(), version).await
        })
    }

    fn latest(&self) -> BoxFuture<'_, BusResult<Option<SnapshotMeta>>> {
        Box::pin(async move {
            let value = deadline(
                "read latest snapshot",
                self.opts.request_timeout(),
                self.kv.get(LATEST_KEY),
            )
            .await?
            .map_err(|e| BusError::js("read latest snapshot", e))?;
            value.map(|v| parse_meta(&v)).transpose()
        })
    }

    fn watch_latest(&self) -> BoxFuture<'_, BusResult<SnapshotWatch>> {
        Box::pin(async move {
            let watch = deadline(
                "watch latest snapshot",
                self.opts.request_timeout(),
                self.kv.watch_with_history(LATEST_KEY),
            )
            .await?
            .map_err(|e| BusError::js("watch latest snapshot", e))?;
            let metas = watch.filter_map(|entry| async move {
                match entry {
                    Ok(entry) if entry.operation == Operation::Put => {
                        Some(parse_meta(&entry.value))
                    }
                    Ok(_) => None,
                    Err(e) => Some(Err(BusError::js("watch latest snapshot", e))),
                }
            });
            Ok(metas.boxed())
        })
    }

    fn kv_put<'a>(&'a self, key: &'a str, value: Bytes) -> BoxFuture<'a, BusResult<()>> {
        Box::pin(async move {
            validate_key(key)?;
            deadline(
                "kv put",
                self.opts.request_timeout(),
                self.kv.put(key, value),
            )
            .await?
            .map_err(|e| BusError::js("kv put", e))?;
            Ok(())
        })
    }

    fn kv_get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, BusResult<Option<Bytes>>> {
        Box::pin(async move {
            validate_key(key)?;
            deadline("kv get", self.opts.request_timeout(), self.kv.get(key))
                .await?
                .map_err(|e| BusError::js("kv get", e))
        })
    }

    fn kv_delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, BusResult<()>> {
        Box::pin(async move {
            validate_key(key)?;
            deadline(
                "kv delete",
                self.opts.request_timeout(),
                self.kv.delete(key),
            )
            .await?
            .map_err(|e| BusError::js("kv delete", e))
        })
    }

    fn kv_entries<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, BusResult<Vec<KvEntry>>> {
        Box::pin(async move {
            let work = async {
                let keys: Vec<String> = self
                    .kv
                    .keys()
                    .await
                    .map_err(|e| BusError::js("kv list", e))?
                    .try_collect()
                    .await
                    .map_err(|e| BusError::js("kv list", e))?;
                let mut out = Vec::new();
                for key in keys
                    .into_iter()
                    .filter(|k| k.starts_with(prefix) && k != LATEST_KEY)
                {
                    let entry = self
                        .kv
                        .entry(key.as_str())
                        .await
                        .map_err(|e| BusError::js("kv list", e))?;
                    if let Some(entry) = entry.filter(|e| e.operation == Operation::Put) {
                        out.push(KvEntry {
                            key,
                            value: entry.value.clone(),
                            updated: system_time(entry),
                        });
                    }
                }
                out.sort_by(|a, b| a.key.cmp(&b.key));
                Ok(out)
            };
            deadline("kv list", self.opts.request_timeout() * 2, work).await?
        })
    }

    fn delete_run(&self) -> BoxFuture<'_, BusResult<()>> {
        Box::pin(async move {
            let mut streams: Vec<String> = Queue::ALL
                .iter()
                .map(|q| self.opts.stream_name(*q))
                .collect();
            streams.push(format!("KV_{}", self.opts.control_bucket()));
            streams.push(format!("OBJ_{}", self.opts.snapshot_bucket()));
            for name in streams {
                let result = deadline(
                    "delete run",
                    self.opts.request_timeout(),
                    self.js.delete_stream(&name),
                )
                .await?;
                if let Err(e) = result {
                    let not_found = matches!(
                        e.kind(),
                        jetstream::context::DeleteStreamErrorKind::JetStream(ref js) if js.code() == 404
                    );
                    if !not_found {
                        return Err(BusError::js("delete run", e));
                    }
                }
            }
            match self.snapshot_files() {
                Some(dir) => blocking(move || snapshot_file::delete_all(&dir)).await,
                None => Ok(()),
            }
        })
    }
}
