//! A decode that fails inside the model (a bug, not the task's fault) loses no task: the actor
//! logs it, hands the task back with a delay and decodes it on the retry; a task that can never
//! succeed (bad input) is termed instead. Real actor loop on the in-process bus.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use caprl_common::bus::Queue;
use caprl_model::model::ModelError;
use caprl_wire::TaskId;

mod support;

use support::{next_rollout, publish, setup};

#[test]
fn internal_fault_during_a_rollout_loses_no_task() {
    let s = setup("internal-fault", true);
    let rows = s.first_rows();
    let t = support::task_on(&s, 5, rows);
    publish(&s, &t);

    let calls = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&calls);
    let actor = s.start_actor_with(move |policy, version, data, task, id| {
        if counted.fetch_add(1, Ordering::SeqCst) == 0 {
            return Err(ModelError::Internal("a layer went missing".into()));
        }
        caprl_actor::rollout(policy, version, data, task, id)
    });

    let got = next_rollout(
        &s,
        caprl_actor::INTERNAL_FAULT_RETRY + Duration::from_secs(20),
    )
    .expect("the task is decoded on its retry");
    let stats = actor.stop(&s);
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
    let s = setup("bad-input", true);
    publish(&s, &support::task_on(&s, 9, vec![u32::MAX]));

    let actor = s.start_actor();
    let got = next_rollout(
        &s,
        caprl_actor::INTERNAL_FAULT_RETRY + Duration::from_secs(1),
    );
    let stats = actor.stop(&s);
    assert!(
        got.is_none(),
        "no rollout for a task naming a row that does not exist"
    );
    assert_eq!(stats.rejected, 1, "{stats:?}");
    assert_eq!(stats.internal_faults, 0, "{stats:?}");
    let depth = s.rt.block_on(s.bus.depth(Queue::Tasks)).unwrap();
    assert_eq!(depth, 0, "the bad task was termed");
}
