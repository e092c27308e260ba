//! Worker churn: while the RL phase runs, actors and reward workers are killed
//! with -9 one after another (six kills) and replaced by fresh processes.
//! The run completes with exactly the weights of an undisturbed run, every
//! task id is trained on exactly once, every task a killed actor held is
//! redelivered, and the survivors count their redeliveries.

mod support;

use std::time::{Duration, Instant};

use caprl_common::bus::{LocalNatsServer, LocalNatsServerOptions};
use support::{
    final_weights, finish, kill_and_read, output_of, reference_run, sets, spawn, steps, stop,
    synth, task_ids, Reaper,
};

/// What an actor logs (after the task id) when it takes a task; `--delay-ms` below.
const HOLD_MARKER: &str = " for 400 ms";
/// How recent a victim's last hold must be for the kill to find it still held (of 400 ms).
const FRESH: Duration = Duration::from_millis(150);

/// The number before `label` in `text`, summed over every occurrence.
fn count(text: &str, label: &str) -> u64 {
    text.match_indices(label)
        .filter_map(|(i, _)| {
            text[..i]
                .rsplit(|c: char| !c.is_ascii_digit())
                .next()
                .and_then(|n| n.parse::<u64>().ok())
        })
        .sum()
}

#[test]
fn six_kills_of_actors_and_reward_workers_lose_and_repeat_no_task() {
    let _reaper = Reaper;
    let dir = tempfile::tempdir().unwrap();
    let data = synth(dir.path());
    let extra = ["runtime.ack_wait_secs=1"];

    let reference = reference_run(&data, dir.path(), 3, &extra);

    let run = dir.path().join("run");
    let server = LocalNatsServer::start(LocalNatsServerOptions::default()).expect("nats-server");
    let url = server.url();
    let args = sets(&data, &run, 3, &extra);
    // Slow actors hold their task while they are killed, so kills cost redeliveries.
    let actor = |n: usize| {
        let id = format!("actor-{n}");
        spawn(&args, &["actor", "--id", &id, "--delay-ms", "400"], &url)
    };
    let worker = |n: usize| {
        let id = format!("worker-{n}");
        spawn(&args, &["reward-worker", "--id", &id], &url)
    };
    let mut actors = [actor(0), actor(1)];
    let mut workers = [worker(0), worker(1)];
    let learner = spawn(&args, &["learner"], &url);

    let started = Instant::now();
    let mut kills = 0;
    // Actor kills wait for the victim to be holding a task it took moments ago, so each one
    // dies with a task unacknowledged that another actor must be redelivered.
    let mut held_at_kill = Vec::new();
    let mut killed_out = String::new();
    let mut holds_seen = [0; 2];
    let mut fresh_hold = [None::<Instant>; 2];
    while kills < 6 {
        let holds = actors
            .each_ref()
            .map(|a| task_ids(&output_of(a), HOLD_MARKER));
        for (slot, held) in holds.iter().enumerate() {
            if held.len() > holds_seen[slot] {
                (holds_seen[slot], fresh_hold[slot]) = (held.len(), Some(Instant::now()));
            }
        }
        let slot = (kills / 2) % 2;
        // One kill per RL step, starting with the first.
        if steps(&run, "rl").len() > kills {
            let fresh = 2 + kills;
            if kills % 2 == 1 {
                killed_out.push_str(&kill_and_read(std::mem::replace(
                    &mut workers[slot],
                    worker(fresh),
                )));
                kills += 1;
            } else if fresh_hold[slot].is_some_and(|at| at.elapsed() < FRESH) {
                killed_out.push_str(&kill_and_read(std::mem::replace(
                    &mut actors[slot],
                    actor(fresh),
                )));
                held_at_kill.push(holds[slot].last().cloned().expect("a held task"));
                (holds_seen[slot], fresh_hold[slot]) = (0, None);
                kills += 1;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "only {kills} kills before the run stalled"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let done_at_last_kill = steps(&run, "rl").len();
    let mut survivors_out = String::new();

    let (ok, learner_out) = finish(learner);
    for p in actors.into_iter().chain(workers) {
        let (ok, out) = stop(p);
        assert!(ok, "a replacement role failed:\n{out}");
        survivors_out.push_str(&out);
    }
    let all = format!("{learner_out}\n--- roles\n{survivors_out}\n--- killed\n{killed_out}");
    assert!(ok, "learner failed:\n{all}");
    assert!(
        done_at_last_kill < 12,
        "the kills came after the run:\n{all}"
    );
    // 12 RL steps of 4 tasks, each task used exactly once.
    assert!(
        learner_out.contains("task ids used 48 (48 distinct)"),
        "{all}"
    );
    let taken_again = task_ids(&format!("{survivors_out}{killed_out}"), " redelivered");
    for held in &held_at_kill {
        assert!(
            taken_again.contains(held),
            "{held}, held by a killed actor when it died, was never redelivered \
             (redelivered: {taken_again:?}):\n{all}"
        );
    }
    // The survivors' closing counts add up their redeliveries.
    assert_eq!(
        count(&survivors_out, " redeliveries"),
        task_ids(&survivors_out, " redelivered").len() as u64,
        "{all}"
    );
    assert!(
        final_weights(&run) == final_weights(&reference),
        "the churned run differs from the undisturbed one:\n{all}"
    );
}
