//! Bad input on the bus: garbage bytes and messages with a future schema
//! version on every subject are rejected (termed, counted, logged) by the role
//! that pulls them, nothing crashes, and real work still flows; a snapshot
//! whose bytes do not match the advertised checksum is refused and the actor
//! keeps decoding with the previous one. Real nats-server, real roles.

mod support;

#[path = "support/driver_options.rs"]
mod driver_options;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use caprl_actor::{ActorConfig, ActorStats};
use caprl_common::bus::{
    sha256_hex, Bus, BusOptions, LocalNatsServer, LocalNatsServerOptions, NatsBus, NatsConfig,
    Queue,
};
use caprl_common::config::RewardSpec;
use caprl_common::role::{heartbeat_key, Role};
use caprl_common::shutdown::ShutdownTrigger;
use caprl_common::snapshot;
use caprl_data::Dataset;
use caprl_learner::driver::{Driver, DriverOptions};
use caprl_learner::objective::Decodes;
use caprl_model::model::{
    Captioner, CaptionerConfig, DType, Device, Dtype, ModelConfig, ModelKind,
};
use caprl_reward_worker::{Rewarder, WorkerConfig, WorkerStats};
use caprl_wire::{DataFingerprint, PolicyVersion, Rollout, RolloutTask, ScoredRollout, TaskId};
use driver_options::plain_driver_options;

const LIMIT: usize = 8 << 20;

struct Setup {
    _dir: tempfile::TempDir,
    _server: LocalNatsServer,
    url: String,
    opts: BusOptions,
    rt: tokio::runtime::Runtime,
    bus: Arc<dyn Bus>,
    data: Arc<Dataset>,
    model_cfg: CaptionerConfig,
}

fn setup(run: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let data_dir = support::synth(dir.path());
    let server = LocalNatsServer::start(LocalNatsServerOptions::default()).expect("nats-server");
    let url = server.url();
    let opts = BusOptions {
        ack_wait_secs: 2,
        ..BusOptions::for_run(run)
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let bus: Arc<dyn Bus> = Arc::new(
        rt.block_on(NatsBus::connect(&NatsConfig::to_url(&url), &opts))
            .unwrap(),
    );
    let data = Arc::new(Dataset::open(&data_dir).unwrap());
    let model = ModelConfig {
        kind: ModelKind::Fc,
        embed: 32,
        hidden: 32,
        att_hidden: 32,
        dropout: 0.0,
        ..ModelConfig::default()
    };
    let model_cfg = CaptionerConfig::for_dataset(&model, &data, 16, Dtype::F32).unwrap();
    Setup {
        _dir: dir,
        _server: server,
        url,
        opts,
        rt,
        bus,
        data,
        model_cfg,
    }
}

fn actor_cfg(s: &Setup) -> ActorConfig {
    ActorConfig {
        id: "actor-test".into(),
        data: Arc::clone(&s.data),
        model: s.model_cfg.clone(),
        device: Device::Cpu,
        max_message_bytes: LIMIT,
        sync: true,
        delay: Duration::ZERO,
    }
}

fn task(s: &Setup, id: u64, version: u64, rows: &[u32]) -> RolloutTask {
    RolloutTask {
        greedy: true,
        ..RolloutTask::samples(
            DataFingerprint(s.data.fingerprint().into()),
            TaskId(id),
            PolicyVersion(version),
            rows.to_vec(),
            2,
            7,
        )
    }
}

/// The first two training images' rows: what the test tasks decode.
fn two_rows(s: &Setup) -> Vec<u32> {
    s.data
        .train
        .items
        .iter()
        .take(2)
        .map(|it| it.row as u32)
        .collect()
}

/// Publishes `task` on the task queue.
fn publish_task(s: &Setup, task: &RolloutTask) {
    let bytes = caprl_wire::encode(task, LIMIT).unwrap();
    s.rt.block_on(s.bus.publish(Queue::Tasks, Bytes::from(bytes)))
        .unwrap();
}

/// Publishes `task` and returns the rollout an actor answers it with (within 20 s).
fn rollout_of(s: &Setup, task: &RolloutTask) -> Rollout {
    publish_task(s, task);
    s.rt.block_on(async {
        let got = s
            .bus
            .pull(Queue::Rollouts, 1, Duration::from_secs(20))
            .await
            .unwrap();
        assert_eq!(got.len(), 1, "no rollout for {}", task.task_id);
        let r: Rollout = caprl_wire::decode(got[0].payload(), LIMIT).unwrap();
        for d in got {
            d.ack().await.unwrap();
        }
        r
    })
}

/// The same envelope with the next schema version in its header.
fn future_version(mut bytes: Vec<u8>) -> Bytes {
    bytes[4..6].copy_from_slice(&(caprl_wire::SCHEMA_VERSION + 1).to_be_bytes());
    Bytes::from(bytes)
}

#[test]
fn garbage_and_future_schema_versions_are_termed_and_counted_on_every_subject() {
    let s = setup("rejects");
    let rows: Vec<u32> = s
        .data
        .train
        .items
        .iter()
        .take(8)
        .map(|it| it.row as u32)
        .collect();
    let rollout = Rollout {
        task_id: TaskId(999),
        data: Default::default(),
        policy_version: PolicyVersion(0),
        actor_id: "x".into(),
        sequences: Vec::new(),
        decode_seconds: 0.0,
    };
    let scored = ScoredRollout {
        rollout: rollout.clone(),
        rewards: Vec::new(),
    };
    let bad: [(Queue, Bytes); 3] = [
        (
            Queue::Tasks,
            future_version(caprl_wire::encode(&task(&s, 999, 0, &rows[..1]), LIMIT).unwrap()),
        ),
        (
            Queue::Rollouts,
            future_version(caprl_wire::encode(&rollout, LIMIT).unwrap()),
        ),
        (
            Queue::Scored,
            future_version(caprl_wire::encode(&scored, LIMIT).unwrap()),
        ),
    ];
    s.rt.block_on(async {
        for (q, future) in bad {
            s.bus
                .publish(q, Bytes::from_static(b"\x00\xffnot a caprl message"))
                .await
                .unwrap();
            s.bus.publish(q, future).await.unwrap();
        }
    });

    let (stop_tx, stop_rx) = ShutdownTrigger::new();
    let actor = s.rt.spawn(caprl_actor::run(
        actor_cfg(&s),
        Arc::clone(&s.bus),
        stop_rx.clone(),
    ));
    let rewarder = Rewarder::new(
        &s.data,
        &s.data.train.items,
        &RewardSpec::default(),
        Rewarder::training_df(&s.data, &s.data.train.items, true),
        None,
    )
    .unwrap();
    let worker_cfg = WorkerConfig {
        id: "worker-test".into(),
        rewarder: Arc::new(rewarder),
        max_message_bytes: LIMIT,
    };
    let worker = s.rt.spawn(caprl_reward_worker::run(
        worker_cfg,
        Arc::clone(&s.bus),
        stop_rx.clone(),
    ));

    let mut driver = Driver::new(
        Arc::clone(&s.bus),
        s.rt.handle().clone(),
        stop_rx,
        DriverOptions {
            sync: true,
            tasks_in_flight: 4,
            images_per_task: 4,
            batch_size: 8,
            decodes: Decodes {
                samples: 2,
                greedy: true,
                ..Decodes::default()
            },
            seed: 7,
            max_policy_lag: 2,
            max_message_bytes: LIMIT,
            ..plain_driver_options()
        },
    );
    driver.set_data(
        s.data.vocab.hash(),
        DataFingerprint(s.data.fingerprint().into()),
    );
    let model = Captioner::new(&s.model_cfg, &Device::Cpu, 1).unwrap();
    driver.publish(&model, 0).unwrap();
    let collected = driver
        .collect(0, 0, &rows, &[])
        .expect("real work flows past the bad messages");
    assert_eq!(collected.scored.len(), 2);
    assert_eq!(
        collected.rejected, 2,
        "garbage + future version on `scored`"
    );

    // Nothing is waiting to be redelivered after ack_wait: the bad messages were termed.
    std::thread::sleep(Duration::from_millis(2500));
    for q in Queue::ALL {
        let depth = s.rt.block_on(s.bus.depth(q)).unwrap();
        assert_eq!(depth, 0, "queue {q} still holds {depth} messages");
    }
    stop_tx.trigger();
    let a: ActorStats = s.rt.block_on(actor).unwrap().unwrap();
    let w: WorkerStats = s.rt.block_on(worker).unwrap().unwrap();
    assert_eq!(a.rejected, 2, "{a:?}");
    assert_eq!(w.rejected, 2, "{w:?}");
    assert_eq!(a.rollouts, 2);
    assert_eq!(w.scored, 2);
}

#[test]
fn snapshot_with_a_bad_checksum_is_refused_and_the_previous_one_kept() {
    let s = setup("badsnap");
    let model = Captioner::new(&s.model_cfg, &Device::Cpu, 1).unwrap();
    let good = model.to_safetensors().unwrap();
    s.rt.block_on(s.bus.put_snapshot(0, Bytes::from(good.clone())))
        .unwrap();

    let (stop_tx, stop_rx) = ShutdownTrigger::new();
    let actor =
        s.rt.spawn(caprl_actor::run(actor_cfg(&s), Arc::clone(&s.bus), stop_rx));
    let rows = two_rows(&s);
    let rollout_of = |id: u64, version: u64| rollout_of(&s, &task(&s, id, version, &rows));
    assert_eq!(rollout_of(1, 0).policy_version, PolicyVersion(0));

    // Version 1 in the store is corrupt: its bytes are not what `latest` advertises.
    let mut corrupt = good.clone();
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0xff;
    s.rt.block_on(async {
        let client = async_nats::connect(&s.url).await.unwrap();
        let js = async_nats::jetstream::new(client);
        let store = js.get_object_store(s.opts.snapshot_bucket()).await.unwrap();
        store
            .put("policy-v1", &mut corrupt.as_slice())
            .await
            .unwrap();
        let kv = js.get_key_value(s.opts.control_bucket()).await.unwrap();
        let meta =
            serde_json::json!({"version": 1, "checksum": {"sha256": sha256_hex(&good)}, "bytes": good.len()});
        kv.put("latest", serde_json::to_vec(&meta).unwrap().into())
            .await
            .unwrap();
    });
    // A task of the next step names v1 (a sync actor loads a policy for the task that needs it).
    publish_task(&s, &task(&s, 3, 1, &rows));
    std::thread::sleep(Duration::from_millis(500));
    // The actor still decodes with v0.
    assert_eq!(rollout_of(2, 0).policy_version, PolicyVersion(0));
    stop_tx.trigger();
    let stats = s.rt.block_on(actor).unwrap().unwrap();
    assert_eq!(stats.refused_snapshots, 1, "{stats:?}");
    assert_eq!(stats.rollouts, 2);
}

#[test]
fn a_snapshot_of_another_vocabulary_is_refused_and_the_previous_one_kept() {
    // A learner started on another data set (same shapes, other words) publishes: its ids would
    // mean other words here, so the actor refuses the snapshot and decodes with the one it has.
    let s = setup("othervocab");
    let model = Captioner::new(&s.model_cfg, &Device::Cpu, 1).unwrap();
    let stamped = |vocab: &str| {
        Bytes::from(snapshot::encode(&model, Vec::new(), DType::F32, Some(vocab)).unwrap())
    };
    s.rt.block_on(s.bus.put_snapshot(0, stamped(s.data.vocab.hash())))
        .unwrap();
    let (stop_tx, stop_rx) = ShutdownTrigger::new();
    let actor =
        s.rt.spawn(caprl_actor::run(actor_cfg(&s), Arc::clone(&s.bus), stop_rx));
    let rows = two_rows(&s);
    let decode = |id: u64| rollout_of(&s, &task(&s, id, 0, &rows));
    assert_eq!(decode(1).policy_version, PolicyVersion(0));
    s.rt.block_on(s.bus.put_snapshot(1, stamped("another-vocabulary")))
        .unwrap();
    publish_task(&s, &task(&s, 3, 1, &rows));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(decode(2).policy_version, PolicyVersion(0));
    stop_tx.trigger();
    let stats = s.rt.block_on(actor).unwrap().unwrap();
    assert_eq!(stats.refused_snapshots, 1, "{stats:?}");
    assert_eq!(stats.rollouts, 2);
}

#[test]
fn tasks_for_a_policy_not_published_do_not_hold_up_the_current_ones() {
    // A learner resumed from an earlier checkpoint leaves its predecessor's tasks for later
    // steps in the queue; the actor must keep taking the current step's tasks meanwhile.
    let s = setup("unpublished");
    let model = Captioner::new(&s.model_cfg, &Device::Cpu, 1).unwrap();
    let snapshot = Bytes::from(model.to_safetensors().unwrap());
    s.rt.block_on(s.bus.put_snapshot(0, snapshot)).unwrap();
    let rows = two_rows(&s);
    s.rt.block_on(async {
        for id in 100..104 {
            let later = caprl_wire::encode(&task(&s, id, 5, &rows), LIMIT).unwrap();
            s.bus
                .publish(Queue::Tasks, Bytes::from(later))
                .await
                .unwrap();
        }
        let now = caprl_wire::encode(&task(&s, 1, 0, &rows), LIMIT).unwrap();
        s.bus.publish(Queue::Tasks, Bytes::from(now)).await.unwrap();
    });

    let (stop_tx, stop_rx) = ShutdownTrigger::new();
    let actor =
        s.rt.spawn(caprl_actor::run(actor_cfg(&s), Arc::clone(&s.bus), stop_rx));
    let got = s.rt.block_on(async {
        let got = s
            .bus
            .pull(Queue::Rollouts, 1, Duration::from_secs(15))
            .await
            .unwrap();
        let rollouts: Vec<Rollout> = got
            .iter()
            .map(|d| caprl_wire::decode(d.payload(), LIMIT).unwrap())
            .collect();
        for d in got {
            d.ack().await.unwrap();
        }
        rollouts
    });
    stop_tx.trigger();
    let stats = s.rt.block_on(actor).unwrap().unwrap();
    assert_eq!(got.len(), 1, "the current task was not decoded: {stats:?}");
    assert_eq!(got[0].task_id, TaskId(1));
    assert_eq!(got[0].policy_version, PolicyVersion(0));
    // The later tasks are kept for when their policy comes, not dropped.
    let waiting = s.rt.block_on(s.bus.depth(Queue::Tasks)).unwrap();
    assert_eq!(waiting, 4, "{stats:?}");
    assert_eq!(stats.stale_tasks, 0, "{stats:?}");
}

#[test]
fn a_publish_the_server_refuses_stops_the_actor_with_a_clear_error_and_keeps_the_task() {
    // An operator sealed the rollouts stream: every publish to it is refused on its merits, so
    // the actor says so and stops instead of retrying for ever as it does through an outage.
    let s = setup("sealed");
    let model = Captioner::new(&s.model_cfg, &Device::Cpu, 1).unwrap();
    let snapshot = Bytes::from(model.to_safetensors().unwrap());
    s.rt.block_on(s.bus.put_snapshot(0, snapshot)).unwrap();
    let bytes = caprl_wire::encode(&task(&s, 1, 0, &two_rows(&s)), LIMIT).unwrap();
    s.rt.block_on(async {
        s.bus
            .publish(Queue::Tasks, Bytes::from(bytes))
            .await
            .unwrap();
        let client = async_nats::connect(&s.url).await.unwrap();
        let js = async_nats::jetstream::new(client);
        let mut stream = js
            .get_stream(s.opts.stream_name(Queue::Rollouts))
            .await
            .unwrap();
        let mut config = stream.info().await.unwrap().config.clone();
        config.sealed = true;
        js.update_stream(config).await.unwrap();
    });

    let (_stop_tx, stop_rx) = ShutdownTrigger::new();
    let actor = caprl_actor::run(actor_cfg(&s), Arc::clone(&s.bus), stop_rx);
    let ended =
        s.rt.block_on(async { tokio::time::timeout(Duration::from_secs(60), actor).await });
    let err = ended
        .expect("the actor kept retrying a publish the server refuses")
        .expect_err("the actor cannot publish its rollout");
    let message = format!("{err:#}");
    assert!(
        message.contains("sealed") && message.contains("for good"),
        "{message}"
    );
    // The task was not settled: it is still in the queue for an actor that can publish.
    let waiting = s.rt.block_on(s.bus.depth(Queue::Tasks)).unwrap();
    assert_eq!(waiting, 1);
    // Nor is the stopped actor counted as alive.
    let key = heartbeat_key(Role::Actor, "actor-test");
    assert_eq!(s.rt.block_on(s.bus.kv_get(&key)).unwrap(), None);
}
