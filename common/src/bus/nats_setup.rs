//! Opening a run's JetStream resources on NATS: the stream and durable consumer of each queue,
//! the control KV bucket (`latest`, heartbeats) and the snapshot object store. The learner
//! creates them; the other roles wait for the queues it creates.

use std::time::Duration;

use async_nats::jetstream::consumer::{pull, AckPolicy, DeliverPolicy, PullConsumer};
use async_nats::jetstream::kv;
use async_nats::jetstream::object_store::{self, ObjectStore};
use async_nats::jetstream::stream::{self, RetentionPolicy, StorageType};
use async_nats::jetstream::Context;

use super::{BusError, BusOptions, BusResult, Queue};

/// Name of the one durable consumer per queue, shared by every puller of the run.
const CONSUMER: &str = "workers";

/// Opens a queue's stream and consumer that another role (the learner) creates, waiting for
/// them while they are missing or still carry another `ack_wait`; says so after 3 s (roles
/// started together normally wait less) and every 30 s after that.
pub(super) async fn wait_for_queue(
    js: &Context,
    opts: &BusOptions,
    queue: Queue,
) -> BusResult<PullConsumer> {
    let started = tokio::time::Instant::now();
    let mut next_note = started + Duration::from_secs(3);
    loop {
        let why = match js.get_stream(opts.stream_name(queue)).await {
            Ok(stream) => match stream.get_consumer::<pull::Config>(CONSUMER).await {
                Ok(c) if c.cached_info().config.ack_wait == opts.ack_wait() => return Ok(c),
                Ok(_) => "its consumer has another ack_wait".to_string(),
                Err(e) => format!("no consumer yet: {e}"),
            },
            Err(e) => format!("no stream yet: {e}"),
        };
        if tokio::time::Instant::now() >= next_note {
            tracing::info!(
                "waiting for the learner to create the {queue} queue ({why}; {}s so far)",
                started.elapsed().as_secs()
            );
            next_note += Duration::from_secs(30);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Opens a queue's stream and shared consumer, creating or updating them only
/// when they are missing or differ: actors and reward workers may only read
/// stream and consumer info (per-role NATS permissions); the learner creates.
pub(super) async fn open_queue(
    js: &Context,
    opts: &BusOptions,
    queue: Queue,
) -> BusResult<PullConsumer> {
    if let Ok(stream) = js.get_stream(opts.stream_name(queue)).await {
        if let Ok(consumer) = stream.get_consumer::<pull::Config>(CONSUMER).await {
            if consumer.cached_info().config.ack_wait == opts.ack_wait() {
                return Ok(consumer);
            }
        }
    }
    let config = stream::Config {
        name: opts.stream_name(queue),
        subjects: vec![opts.subject(queue)],
        retention: RetentionPolicy::WorkQueue,
        storage: StorageType::File,
        max_message_size: opts.max_message_bytes as i32,
        num_replicas: opts.replicas,
        description: Some(format!("caprl {} queue of run {}", queue, opts.run_id)),
        ..Default::default()
    };
    let stream = ensure_stream(js, config, "create queue stream").await?;
    let wanted = pull::Config {
        durable_name: Some(CONSUMER.to_string()),
        deliver_policy: DeliverPolicy::All,
        ack_policy: AckPolicy::Explicit,
        ack_wait: opts.ack_wait(),
        filter_subject: opts.subject(queue),
        ..Default::default()
    };
    let consumer: PullConsumer = stream
        .get_or_create_consumer(CONSUMER, wanted.clone())
        .await
        .map_err(|e| BusError::js("create queue consumer", e))?;
    if consumer.cached_info().config.ack_wait != opts.ack_wait() {
        return stream
            .update_consumer(wanted)
            .await
            .map_err(|e| BusError::js("update queue consumer ack_wait", e));
    }
    Ok(consumer)
}

/// Opens stream `config.name`, creating it when it is missing and updating it only when a
/// setting we choose differs: a resumed learner opens the streams while actors pull from them,
/// and there is no need to touch a live stream then.
async fn ensure_stream(
    js: &Context,
    config: stream::Config,
    op: &'static str,
) -> BusResult<stream::Stream> {
    if let Ok(mut stream) = js.get_stream(&config.name).await {
        let have = &stream.cached_info().config;
        let same = have.subjects == config.subjects
            && have.max_message_size == config.max_message_size
            && have.num_replicas == config.num_replicas;
        if same {
            return Ok(stream);
        }
        js.update_stream(config.clone())
            .await
            .map_err(|e| BusError::js(op, e))?;
        stream.info().await.map_err(|e| BusError::js(op, e))?;
        return Ok(stream);
    }
    let name = config.name.clone();
    let replicas = config.num_replicas;
    match js.create_stream(config).await {
        Ok(stream) => Ok(stream),
        Err(e) if needs_a_cluster(&e) => Err(BusError::Config {
            key: "nats.replicas",
            problem: format!(
                "{replicas} replicas need a JetStream cluster, and the server is not one ({e}): \
                 set nats.replicas = 1 for a single server, or connect to a cluster"
            ),
        }),
        // Created by someone else between our get and create.
        Err(create_err) => js
            .get_stream(&name)
            .await
            .map_err(|_| BusError::js(op, create_err)),
    }
}

/// Whether the server refused a replicated stream because it runs without a cluster.
fn needs_a_cluster(err: &async_nats::jetstream::context::CreateStreamError) -> bool {
    use async_nats::jetstream::context::CreateStreamErrorKind;
    use async_nats::jetstream::ErrorCode;
    match err.kind() {
        CreateStreamErrorKind::JetStream(e) => {
            e.error_code() == ErrorCode::STREAM_REPLICAS_NOT_SUPPORTED
        }
        _ => false,
    }
}

/// Creates the control bucket's stream directly (the same stream async-nats's
/// `create_key_value` makes) and opens it as a KV store: the helper reads account info
/// fields that servers before 2.10 do not send.
pub(super) async fn open_kv(js: &Context, opts: &BusOptions) -> BusResult<kv::Store> {
    let bucket = opts.control_bucket();
    if let Ok(store) = js.get_key_value(&bucket).await {
        return Ok(store);
    }
    let config = stream::Config {
        name: format!("KV_{bucket}"),
        description: Some(format!("caprl control state of run {}", opts.run_id)),
        subjects: vec![format!("$KV.{bucket}.>")],
        max_messages_per_subject: 1,
        storage: StorageType::File,
        num_replicas: opts.replicas,
        allow_rollup: true,
        deny_delete: true,
        allow_direct: true,
        discard: stream::DiscardPolicy::New,
        ..Default::default()
    };
    ensure_stream(js, config, "create control KV bucket").await?;
    js.get_key_value(bucket)
        .await
        .map_err(|e| BusError::js("open control KV bucket", e))
}

pub(super) async fn open_objects(js: &Context, opts: &BusOptions) -> BusResult<ObjectStore> {
    let bucket = opts.snapshot_bucket();
    if let Ok(store) = js.get_object_store(&bucket).await {
        return Ok(store);
    }
    let created = js
        .create_object_store(object_store::Config {
            bucket: bucket.clone(),
            description: Some(format!("caprl policy snapshots of run {}", opts.run_id)),
            storage: StorageType::File,
            num_replicas: opts.replicas,
            ..Default::default()
        })
        .await;
    match created {
        Ok(store) => Ok(store),
        // Another process may have created it between our get and create.
        Err(create_err) => js
            .get_object_store(&bucket)
            .await
            .map_err(|_| BusError::js("create snapshot object store", create_err)),
    }
}
