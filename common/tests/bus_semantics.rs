//! The bus contract, written once and run against both implementations:
//! the in-process bus and NATS JetStream on a private nats-server.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use caprl_common::bus::{
    Bus, BusError, BusOptions, Checksum, InProcBus, LocalNatsServer, NatsBus, NatsConfig, Queue,
    SnapshotMeta,
};
use futures::StreamExt;

#[derive(Clone, Copy)]
enum Kind {
    InProc,
    Nats,
}

/// One backend: the in-process bus, or a nats-server that buses connect to.
struct Harness {
    opts: BusOptions,
    inproc: Option<InProcBus>,
    server: Option<LocalNatsServer>,
}

impl Harness {
    fn new(kind: Kind, opts: BusOptions) -> Harness {
        match kind {
            Kind::InProc => Harness {
                inproc: Some(InProcBus::new(&opts).expect("valid options")),
                server: None,
                opts,
            },
            Kind::Nats => Harness {
                server: Some(LocalNatsServer::start_default().expect("nats-server starts")),
                inproc: None,
                opts,
            },
        }
    }

    fn with_ack_wait(kind: Kind, secs: u64) -> Harness {
        let opts = BusOptions {
            ack_wait_secs: secs,
            request_timeout_secs: 5,
            ..BusOptions::for_run("test")
        };
        Harness::new(kind, opts)
    }

    /// A bus on this backend: for NATS a new connection (another process, in effect).
    async fn bus(&self) -> Arc<dyn Bus> {
        if let Some(bus) = &self.inproc {
            return Arc::new(bus.clone());
        }
        let server = self.server.as_ref().expect("nats harness has a server");
        let bus = NatsBus::connect(&NatsConfig::to_url(&server.url()), &self.opts)
            .await
            .expect("connects to the local nats-server");
        Arc::new(bus)
    }
}

fn payloads(deliveries: &[caprl_common::bus::Delivery]) -> Vec<Bytes> {
    deliveries.iter().map(|d| d.payload().clone()).collect()
}

macro_rules! on_both {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn inproc() {
                super::$name(super::Kind::InProc).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn nats() {
                super::$name(super::Kind::Nats).await
            }
        }
    )*};
}

on_both!(
    publish_pull_ack_round_trip,
    pull_waits_for_a_later_publish,
    unacked_delivery_is_redelivered_with_count_two,
    nak_redelivers_without_waiting_for_ack_wait,
    progress_keeps_a_long_task_from_redelivery,
    termed_message_is_never_redelivered,
    two_consumers_never_get_the_same_message,
    depth_counts_waiting_and_in_flight,
    oversize_message_is_rejected,
    snapshot_round_trip_checksum_and_watch,
    kv_heartbeats_are_listed_by_prefix,
    delete_run_removes_queues_kv_and_snapshots,
);

async fn publish_pull_ack_round_trip(kind: Kind) {
    let h = Harness::with_ack_wait(kind, 30);
    let bus = h.bus().await;
    for body in ["a", "b", "c"] {
        bus.publish(Queue::Rollouts, Bytes::from(body))
            .await
            .unwrap();
    }
    let got = bus
        .pull(Queue::Rollouts, 10, Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(payloads(&got), vec!["a", "b", "c"]);
    assert!(got
        .iter()
        .all(|d| d.delivery_count() == 1 && !d.is_redelivery()));
    for d in got {
        d.ack().await.unwrap();
    }
    let again = bus
        .pull(Queue::Rollouts, 10, Duration::from_millis(300))
        .await
        .unwrap();
    assert!(again.is_empty(), "acked messages came back: {again:?}");
    // Other queues are separate.
    assert!(bus
        .pull(Queue::Tasks, 10, Duration::ZERO)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(bus.depth(Queue::Rollouts).await.unwrap(), 0);
}

async fn pull_waits_for_a_later_publish(kind: Kind) {
    let h = Harness::with_ack_wait(kind, 30);
    let bus = h.bus().await;
    let publisher = bus.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        publisher
            .publish(Queue::Tasks, Bytes::from("late"))
            .await
            .unwrap();
    });
    let started = Instant::now();
    let got = bus
        .pull(Queue::Tasks, 4, Duration::from_secs(8))
        .await
        .unwrap();
    assert_eq!(payloads(&got), vec!["late"]);
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "pull returned only after {:?}",
        started.elapsed()
    );
    // An empty queue gives up after the wait.
    let started = Instant::now();
    let none = bus
        .pull(Queue::Scored, 4, Duration::from_millis(400))
        .await
        .unwrap();
    assert!(none.is_empty());
    assert!(started.elapsed() >= Duration::from_millis(350));
}

async fn unacked_delivery_is_redelivered_with_count_two(kind: Kind) {
    let h = Harness::with_ack_wait(kind, 1);
    let bus = h.bus().await;
    bus.publish(Queue::Tasks, Bytes::from("work"))
        .await
        .unwrap();
    let first = bus
        .pull(Queue::Tasks, 1, Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].delivery_count(), 1);
    let taken = Instant::now();
    drop(first); // a worker that died without acking

    let second = bus
        .pull(Queue::Tasks, 1, Duration::from_secs(4))
        .await
        .unwrap();
    assert_eq!(payloads(&second), vec!["work"]);
    assert_eq!(second[0].delivery_count(), 2);
    assert!(second[0].is_redelivery());
    assert!(
        taken.elapsed() >= Duration::from_millis(900),
        "redelivered after {:?}, before ack_wait",
        taken.elapsed()
    );
    for d in second {
        d.ack().await.unwrap();
    }
    assert!(bus
        .pull(Queue::Tasks, 1, Duration::from_millis(1500))
        .await
        .unwrap()
        .is_empty());
}

async fn nak_redelivers_without_waiting_for_ack_wait(kind: Kind) {
    let h = Harness::with_ack_wait(kind, 30);
    let bus = h.bus().await;
    bus.publish(Queue::Scored, Bytes::from("retry me"))
        .await
        .unwrap();
    let mut first = bus
        .pull(Queue::Scored, 1, Duration::from_secs(2))
        .await
        .unwrap();
    first.pop().unwrap().nak(None).await.unwrap();
    let again = bus
        .pull(Queue::Scored, 1, Duration::from_secs(3))
        .await
        .unwrap();
    assert_eq!(payloads(&again), vec!["retry me"]);
    assert_eq!(again[0].delivery_count(), 2);
}

async fn progress_keeps_a_long_task_from_redelivery(kind: Kind) {
    let h = Harness::with_ack_wait(kind, 1);
    let bus = h.bus().await;
    let other = h.bus().await;
    bus.publish(Queue::Tasks, Bytes::from("long"))
        .await
        .unwrap();
    let mut got = bus
        .pull(Queue::Tasks, 1, Duration::from_secs(2))
        .await
        .unwrap();
    let task = got.pop().unwrap();
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(600)).await;
        task.progress().await.unwrap();
    }
    // 1.8 s after delivery, past ack_wait, nobody else got it.
    assert!(other
        .pull(Queue::Tasks, 1, Duration::from_millis(300))
        .await
        .unwrap()
        .is_empty());
    task.ack().await.unwrap();
}

async fn termed_message_is_never_redelivered(kind: Kind) {
    let h = Harness::with_ack_wait(kind, 1);
    let bus = h.bus().await;
    bus.publish(Queue::Rollouts, Bytes::from_static(b"\xff garbage"))
        .await
        .unwrap();
    bus.publish(Queue::Rollouts, Bytes::from("good"))
        .await
        .unwrap();
    let mut bad = bus
        .pull(Queue::Rollouts, 1, Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(payloads(&bad), vec![Bytes::from_static(b"\xff garbage")]);
    bad.pop().unwrap().term().await.unwrap();

    // Wait past ack_wait: only the good message is ever handed out.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let rest = bus
        .pull(Queue::Rollouts, 10, Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(payloads(&rest), vec!["good"]);
    assert_eq!(rest[0].delivery_count(), 1);
    for d in rest {
        d.ack().await.unwrap();
    }
    assert!(bus
        .pull(Queue::Rollouts, 10, Duration::from_millis(1500))
        .await
        .unwrap()
        .is_empty());
    assert_eq!(bus.depth(Queue::Rollouts).await.unwrap(), 0);
}

async fn two_consumers_never_get_the_same_message(kind: Kind) {
    let h = Harness::with_ack_wait(kind, 30);
    let producer = h.bus().await;
    let n = 60;
    for i in 0..n {
        producer
            .publish(Queue::Tasks, Bytes::from(format!("task-{i}")))
            .await
            .unwrap();
    }
    let mut workers = Vec::new();
    for _ in 0..2 {
        let bus = h.bus().await;
        workers.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            let mut idle = 0;
            while idle < 2 {
                let got = bus
                    .pull(Queue::Tasks, 3, Duration::from_millis(300))
                    .await
                    .unwrap();
                if got.is_empty() {
                    idle += 1;
                }
                for d in got {
                    seen.push(d.payload().clone());
                    tokio::task::yield_now().await;
                    d.ack().await.unwrap();
                }
            }
            seen
        }));
    }
    let mut all = Vec::new();
    let mut per_worker = Vec::new();
    for w in workers {
        let seen = w.await.unwrap();
        per_worker.push(seen.len());
        all.extend(seen);
    }
    let unique: HashSet<Bytes> = all.iter().cloned().collect();
    assert_eq!(
        all.len(),
        n,
        "messages handed out twice or lost: per worker {per_worker:?}"
    );
    assert_eq!(unique.len(), n);
}

async fn depth_counts_waiting_and_in_flight(kind: Kind) {
    let h = Harness::with_ack_wait(kind, 30);
    let bus = h.bus().await;
    assert_eq!(bus.depth(Queue::Scored).await.unwrap(), 0);
    for i in 0..3 {
        bus.publish(Queue::Scored, Bytes::from(format!("s{i}")))
            .await
            .unwrap();
    }
    assert_eq!(bus.depth(Queue::Scored).await.unwrap(), 3);
    let mut one = bus
        .pull(Queue::Scored, 1, Duration::from_secs(2))
        .await
        .unwrap();
    one.pop().unwrap().ack().await.unwrap();
    assert_eq!(bus.depth(Queue::Scored).await.unwrap(), 2);
    let in_flight = bus
        .pull(Queue::Scored, 1, Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(in_flight.len(), 1);
    assert_eq!(
        bus.depth(Queue::Scored).await.unwrap(),
        2,
        "in-flight work still counts"
    );
    bus.purge(Queue::Scored).await.unwrap();
    assert_eq!(bus.depth(Queue::Scored).await.unwrap(), 0);
}

async fn oversize_message_is_rejected(kind: Kind) {
    let opts = BusOptions {
        max_message_bytes: 1024,
        ..BusOptions::for_run("small")
    };
    let h = Harness::new(kind, opts);
    let bus = h.bus().await;
    let err = bus
        .publish(Queue::Tasks, Bytes::from(vec![7u8; 2000]))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            BusError::TooLarge {
                bytes: 2000,
                max: 1024
            }
        ),
        "{err}"
    );
    bus.publish(Queue::Tasks, Bytes::from(vec![7u8; 1000]))
        .await
        .unwrap();
}

async fn snapshot_round_trip_checksum_and_watch(kind: Kind) {
    let h = Harness::with_ack_wait(kind, 30);
    let bus = h.bus().await;
    assert_eq!(bus.latest().await.unwrap(), None);
    let mut watch = bus.watch_latest().await.unwrap();

    // Bigger than one object-store chunk (128 KiB), so chunking is exercised.
    let v1: Bytes = (0..300_000u32)
        .map(|i| (i % 251) as u8)
        .collect::<Vec<_>>()
        .into();
    let meta1 = bus.put_snapshot(1, v1.clone()).await.unwrap();
    assert_eq!(
        meta1,
        SnapshotMeta {
            version: 1,
            // The object store's own digest; XXH3 where nothing else hashes the bytes.
            checksum: match kind {
                Kind::Nats => Checksum::sha256(&v1),
                Kind::InProc => Checksum::xxh3(&v1),
            },
            bytes: v1.len() as u64,
            file: None,
            chain: Vec::new(),
        }
    );
    assert_eq!(bus.get_snapshot(&meta1).await.unwrap(), v1);
    assert_eq!(bus.latest().await.unwrap(), Some(meta1.clone()));
    let seen = tokio::time::timeout(Duration::from_secs(5), watch.next()).await;
    assert_eq!(seen.expect("watch sees v1").unwrap().unwrap(), meta1);

    let v2 = Bytes::from("policy v2");
    let meta2 = bus.put_snapshot(2, v2.clone()).await.unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(5), watch.next()).await;
    assert_eq!(seen.expect("watch sees v2").unwrap().unwrap(), meta2);

    // A late watcher starts from the current latest.
    let mut late = h.bus().await.watch_latest().await.unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(5), late.next()).await;
    assert_eq!(seen.expect("late watch sees v2").unwrap().unwrap(), meta2);

    let forged = SnapshotMeta {
        checksum: meta2.checksum.recompute(b"something else"),
        ..meta2.clone()
    };
    let err = bus.get_snapshot(&forged).await.unwrap_err();
    assert!(
        matches!(err, BusError::ChecksumMismatch { version: 2, .. }),
        "{err}"
    );

    bus.delete_snapshot(1).await.unwrap();
    bus.delete_snapshot(1).await.unwrap();
    let err = bus.get_snapshot(&meta1).await.unwrap_err();
    assert!(
        matches!(err, BusError::SnapshotMissing { version: 1 }),
        "{err}"
    );
    assert_eq!(bus.get_snapshot(&meta2).await.unwrap(), v2);
}

async fn kv_heartbeats_are_listed_by_prefix(kind: Kind) {
    let h = Harness::with_ack_wait(kind, 30);
    let bus = h.bus().await;
    let before = SystemTime::now() - Duration::from_secs(60);
    assert!(bus.kv_entries("heartbeat.").await.unwrap().is_empty());
    bus.kv_put("heartbeat.actor-2", Bytes::from("t2"))
        .await
        .unwrap();
    bus.kv_put("heartbeat.actor-1", Bytes::from("t1"))
        .await
        .unwrap();
    bus.kv_put("config.hash", Bytes::from("abc")).await.unwrap();
    bus.kv_put("heartbeat.actor-1", Bytes::from("t1b"))
        .await
        .unwrap();

    let beats = bus.kv_entries("heartbeat.").await.unwrap();
    let keys: Vec<&str> = beats.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(keys, vec!["heartbeat.actor-1", "heartbeat.actor-2"]);
    assert_eq!(beats[0].value, "t1b");
    assert!(beats.iter().all(|e| e.updated > before));

    assert_eq!(
        bus.kv_get("config.hash").await.unwrap(),
        Some(Bytes::from("abc"))
    );
    assert_eq!(bus.kv_get("heartbeat.nobody").await.unwrap(), None);
    bus.kv_delete("heartbeat.actor-2").await.unwrap();
    assert_eq!(bus.kv_entries("heartbeat.").await.unwrap().len(), 1);
    assert_eq!(bus.kv_get("heartbeat.actor-2").await.unwrap(), None);

    let err = bus.kv_put("latest", Bytes::new()).await.unwrap_err();
    assert!(matches!(err, BusError::ReservedKey { .. }), "{err}");
    let err = bus.kv_put("bad key*", Bytes::new()).await.unwrap_err();
    assert!(matches!(err, BusError::InvalidKey { .. }), "{err}");
}

async fn delete_run_removes_queues_kv_and_snapshots(kind: Kind) {
    let h = Harness::with_ack_wait(kind, 30);
    let bus = h.bus().await;
    bus.publish(Queue::Tasks, Bytes::from("t")).await.unwrap();
    bus.kv_put("heartbeat.learner", Bytes::from("x"))
        .await
        .unwrap();
    bus.put_snapshot(5, Bytes::from("weights")).await.unwrap();
    bus.delete_run().await.unwrap();

    let fresh = h.bus().await;
    assert_eq!(fresh.depth(Queue::Tasks).await.unwrap(), 0);
    assert_eq!(fresh.latest().await.unwrap(), None);
    assert!(fresh.kv_entries("").await.unwrap().is_empty());
    fresh.delete_run().await.unwrap();
}
