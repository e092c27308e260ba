//! A decode that fails inside the model (a bug, not the task's fault) loses no task: the actor
//! logs it, hands the task back with a delay and decodes it on the retry; a task that can never
//! succeed (bad input) is termed instead. Real actor loop on the in-process bus.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use caprl_actor::{ActorConfig, ActorStats};
use caprl_common::bus::{Bus, BusOptions, InProcBus, Queue};
use caprl_common::model::{Captioner, Device, ModelError};
use caprl_common::shutdown::ShutdownTrigger;
use caprl_common::wire::{self, Rollout, RolloutTask, TaskId};

mod support;

const LIMIT: usize = 8 << 20;

struct Setup {
    _dir: tempfile::TempDir,
    rt: tokio::runtime::Runtime,
    bus: Arc<dyn Bus>,
    cfg: ActorConfig,
}

fn setup(run: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let (data, model) = support::tiny(dir.path());
    let data = Arc::new(data);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let bus: Arc<dyn Bus> = Arc::new(InProcBus::new(&BusOptions::for_run(run)).unwrap());
    let weights = Captioner::new(&model, &Device::Cpu, 1)
        .unwrap()
        .to_safetensors()
        .unwrap();
    rt.block_on(bus.put_snapshot(0, Bytes::from(weights)))
        .unwrap();
    let cfg = ActorConfig {
        id: "actor-test".into(),
        data,
        model,
        device: Device::Cpu,
        max_message_bytes: LIMIT,
        sync: true,
        delay: Duration::ZERO,
    };
    Setup {
        _dir: dir,
        rt,
        bus,
        cfg,
    }
}

fn publish(s: &Setup, t: &RolloutTask) {
    let bytes = wire::encode(t, LIMIT).unwrap();
    s.rt.block_on(s.bus.publish(Queue::Tasks, Bytes::from(bytes)))
        .unwrap();
}

/// Waits up to `within` for one rollout and acks it.
fn next_rollout(s: &Setup, within: Duration) -> Option<Rollout> {
    let until = Instant::now() + within;
    while Instant::now() < until {
        let got =
            s.rt.block_on(s.bus.pull(Queue::Rollouts, 1, Duration::from_millis(200)))
                .unwrap();
        if let Some(d) = got.into_iter().next() {
            let r: Rollout = wire::decode(d.payload(), LIMIT).unwrap();
            s.rt.block_on(d.ack()).unwrap();
            return Some(r);
        }
    }
    None
}

#[test]
fn internal_fault_during_a_rollout_loses_no_task() {
    let s = setup("internal-fault");
    let rows: Vec<u32> = s.cfg.data.train.items[..2]
        .iter()
        .map(|it| it.row as u32)
        .collect();
    let t = support::task(5, rows);
    publish(&s, &t);

    let calls = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&calls);
    let (stop, shutdown) = ShutdownTrigger::new();
    let actor = s.rt.spawn(caprl_actor::run_with_rollout(
        s.cfg.clone(),
        Arc::clone(&s.bus),
        shutdown,
        move |policy, version, data, task, id| {
            if counted.fetch_add(1, Ordering::SeqCst) == 0 {
                return Err(ModelError::Internal("a layer went missing".into()));
            }
            caprl_actor::rollout(policy, version, data, task, id)
        },
    ));

    let got = next_rollout(
        &s,
        caprl_actor::INTERNAL_FAULT_RETRY + Duration::from_secs(20),
    )
    .expect("the task is decoded on its retry");
    stop.trigger();
    let stats: ActorStats = s.rt.block_on(actor).unwrap().unwrap();
    assert_eq!(got.task_id, TaskId(5));
    assert_eq!(calls.load(Ordering::SeqCst), 2, "one fault, one retry");
    assert_eq!(stats.internal_faults, 1, "{stats:?}");
    assert_eq!(stats.rejected, 0, "{stats:?}");
    assert_eq!(stats.rollouts, 1, "{stats:?}");
    assert_eq!(stats.redeliveries, 1, "{stats:?}");
    let depth = s.rt.block_on(s.bus.depth(Queue::Tasks)).unwrap();
    assert_eq!(depth, 0, "the task was acked once decoded");
}

#[test]
fn task_the_model_cannot_decode_is_termed_not_retried() {
    let s = setup("bad-input");
    publish(&s, &support::task(9, vec![u32::MAX]));

    let (stop, shutdown) = ShutdownTrigger::new();
    let actor = s.rt.spawn(caprl_actor::run(
        s.cfg.clone(),
        Arc::clone(&s.bus),
        shutdown,
    ));
    let got = next_rollout(
        &s,
        caprl_actor::INTERNAL_FAULT_RETRY + Duration::from_secs(1),
    );
    stop.trigger();
    let stats: ActorStats = s.rt.block_on(actor).unwrap().unwrap();
    assert!(
        got.is_none(),
        "no rollout for a task naming a row that does not exist"
    );
    assert_eq!(stats.rejected, 1, "{stats:?}");
    assert_eq!(stats.internal_faults, 0, "{stats:?}");
    let depth = s.rt.block_on(s.bus.depth(Queue::Tasks)).unwrap();
    assert_eq!(depth, 0, "the bad task was termed");
}
