//! Sync mode: an actor loads a published policy when a task names it, not whenever one comes
//! out, so an actor that gets no task of a version never pays for loading it. Real actor loop on
//! the in-process bus.

use std::time::{Duration, Instant};

use caprl_common::telemetry::stages::StageReport;
use caprl_wire::{PolicyVersion, TaskId};

mod support;

use support::{next_rollout, publish, publish_policy, setup};

/// Snapshots this process's actor has loaded so far.
fn loads() -> u64 {
    StageReport::now("actor-test", Instant::now())
        .get("actor", "snapshot_load")
        .1
}

#[test]
fn sync_actor_loads_a_new_policy_only_for_a_task_that_names_it() {
    let s = setup("sync-loads", true);
    let rows = s.first_rows();
    let actor = s.start_actor();
    publish(&s, &support::task_on(&s, 1, rows.clone()));
    let got = next_rollout(&s, Duration::from_secs(30)).expect("task 1 is decoded");
    assert_eq!(got.policy_version, PolicyVersion(0));
    assert_eq!(loads(), 1, "v0, the first policy, is loaded at once");

    // Two versions come out with no task of theirs: the actor keeps polling (every pull waits
    // 300 ms) and loads neither.
    publish_policy(&s, 1);
    publish_policy(&s, 2);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(loads(), 1, "a policy no task named was loaded");

    // A task of v2 loads v2 (not v1, which no task names) and is decoded with it.
    let mut t = support::task_on(&s, 2, rows);
    t.policy_version = PolicyVersion(2);
    t.min_version = PolicyVersion(2);
    publish(&s, &t);
    let got = next_rollout(&s, Duration::from_secs(30)).expect("task 2 is decoded");
    assert_eq!(
        (got.task_id, got.policy_version),
        (TaskId(2), PolicyVersion(2))
    );
    assert_eq!(loads(), 2, "v2 loaded once, for its task");

    let stats = actor.stop(&s);
    assert_eq!(stats.rollouts, 2, "{stats:?}");
    assert_eq!(stats.redeliveries, 0, "{stats:?}");
}
