//! Async mode with `runtime.snapshot_every > 1`: a task issued ahead can name a policy the
//! learner has not published yet. The actor holds it until that snapshot comes out and decodes
//! it then, instead of handing it back to wait a retry delay. Real actor loop on the
//! in-process bus.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use caprl_actor::ActorStats;
use caprl_common::shutdown::ShutdownTrigger;
use caprl_model::model::{Captioner, Device};
use caprl_wire::{PolicyVersion, TaskId};

mod support;

use support::{next_rollout, publish, setup};

#[test]
fn async_task_for_the_next_snapshot_is_held_until_it_is_published() {
    let s = setup("next-policy", false);
    let rows: Vec<u32> = s.cfg.data.train.items[..2]
        .iter()
        .map(|it| it.row as u32)
        .collect();
    let mut t = support::task(3, rows);
    t.policy_version = PolicyVersion(1);
    t.min_version = PolicyVersion(1);
    publish(&s, &t);
    let (stop, shutdown) = ShutdownTrigger::new();
    let actor = s.rt.spawn(caprl_actor::run(
        s.cfg.clone(),
        Arc::clone(&s.bus),
        shutdown,
    ));
    // The actor takes the task with v0 in hand; v1 comes out while it holds it.
    std::thread::sleep(Duration::from_secs(1));
    let v1 = Captioner::new(&s.cfg.model, &Device::Cpu, 2)
        .unwrap()
        .to_safetensors()
        .unwrap();
    s.rt.block_on(s.bus.put_snapshot(1, Bytes::from(v1)))
        .unwrap();

    let got = next_rollout(&s, Duration::from_secs(30)).expect("the task is decoded");
    stop.trigger();
    let stats: ActorStats = s.rt.block_on(actor).unwrap().unwrap();
    assert_eq!(got.task_id, TaskId(3));
    assert_eq!(
        got.policy_version,
        PolicyVersion(1),
        "decoded with the policy it waited for"
    );
    assert_eq!(stats.rollouts, 1, "{stats:?}");
    assert_eq!(
        stats.redeliveries, 0,
        "the task went back to the queue instead of waiting for v1: {stats:?}"
    );
}
