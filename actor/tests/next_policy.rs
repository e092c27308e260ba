//! Async mode with `runtime.snapshot_every > 1`: a task issued ahead can name a policy the
//! learner has not published yet. The actor holds it until that snapshot comes out and decodes
//! it then, instead of handing it back to wait a retry delay. Real actor loop on the
//! in-process bus.

use std::time::Duration;

use caprl_wire::{PolicyVersion, TaskId};

mod support;

use support::{next_rollout, publish, publish_policy, setup};

#[test]
fn async_task_for_the_next_snapshot_is_held_until_it_is_published() {
    let s = setup("next-policy", false);
    let rows = s.first_rows();
    let mut t = support::task_on(&s, 3, rows);
    t.policy_version = PolicyVersion(1);
    t.min_version = PolicyVersion(1);
    publish(&s, &t);
    let actor = s.start_actor();
    // The actor takes the task with v0 in hand; v1 comes out while it holds it.
    std::thread::sleep(Duration::from_secs(1));
    publish_policy(&s, 1);

    let got = next_rollout(&s, Duration::from_secs(30)).expect("the task is decoded");
    let stats = actor.stop(&s);
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

/// A new snapshot is prepared beside the one held: tasks the held policy may serve go on with
/// it or the new one (never older than their `min_version`), a task that needs the new one is
/// decoded with it, and the actor ends holding the newest.
#[test]
fn async_actor_prepares_the_next_snapshot_beside_the_held_one_and_takes_it() {
    let s = setup("prepare-beside", false);
    let rows = s.first_rows();
    let actor = s.start_actor();
    let mut first = support::task_on(&s, 1, rows.clone());
    first.min_version = PolicyVersion(0);
    publish(&s, &first);
    let got = next_rollout(&s, Duration::from_secs(30)).expect("task 1 is decoded");
    assert_eq!(got.policy_version, PolicyVersion(0));

    // v1 comes out while tasks that v0 may serve keep coming, then one that needs v1.
    publish_policy(&s, 1);
    for id in 2..6 {
        let mut t = support::task_on(&s, id, rows.clone());
        t.policy_version = PolicyVersion(1);
        t.min_version = PolicyVersion(if id == 5 { 1 } else { 0 });
        publish(&s, &t);
    }
    let mut versions = std::collections::BTreeMap::new();
    for _ in 2..6 {
        let r = next_rollout(&s, Duration::from_secs(30)).expect("every task is decoded");
        versions.insert(r.task_id.0, r.policy_version.0);
    }
    assert_eq!(versions.len(), 4, "{versions:?}");
    assert_eq!(versions[&5], 1, "the task that needs v1 got {versions:?}");
    // Once a task has used v1, no later one goes back to v0.
    let order: Vec<u64> = (2..6).map(|id| versions[&id]).collect();
    assert!(order.windows(2).all(|w| w[0] <= w[1]), "{order:?}");

    let stats = actor.stop(&s);
    assert_eq!(stats.rollouts, 5, "{stats:?}");
    assert_eq!(stats.refused_snapshots, 0, "{stats:?}");
}
