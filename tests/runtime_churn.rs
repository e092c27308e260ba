//! Worker churn: while the RL phase runs, actors and reward workers are killed
//! with -9 one after another (six kills) and replaced by fresh processes.
//! The run completes with exactly the weights of an undisturbed run, every
//! task id is trained on exactly once, and the redeliveries of the dead
//! processes' work are counted.

mod support;

use std::time::{Duration, Instant};

use caprl_common::bus::{LocalNatsServer, LocalNatsServerOptions};
use support::{
    final_weights, finish, kill9, reference_run, sets, spawn, steps, stop, synth, Reaper,
};

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
        spawn(&args, &["actor", "--id", &id, "--delay-ms", "150"], &url)
    };
    let worker = |n: usize| {
        let id = format!("worker-{n}");
        spawn(&args, &["reward-worker", "--id", &id], &url)
    };
    let mut actors = vec![actor(0), actor(1)];
    let mut workers = vec![worker(0), worker(1)];
    let learner = spawn(&args, &["learner"], &url);

    let started = Instant::now();
    let mut kills = 0;
    let mut survivors_out = String::new();
    while kills < 6 {
        // One kill per RL step, starting with the first.
        if steps(&run, "rl").len() > kills {
            let fresh = 2 + kills;
            let slot = (kills / 2) % 2;
            if kills % 2 == 0 {
                kill9(std::mem::replace(&mut actors[slot], actor(fresh)));
            } else {
                kill9(std::mem::replace(&mut workers[slot], worker(fresh)));
            }
            kills += 1;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "only {kills} kills before the run stalled"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let done_at_last_kill = steps(&run, "rl").len();

    let (ok, learner_out) = finish(learner);
    for p in actors.into_iter().chain(workers) {
        let (ok, out) = stop(p);
        assert!(ok, "a replacement role failed:\n{out}");
        survivors_out.push_str(&out);
    }
    let all = format!("{learner_out}\n--- roles\n{survivors_out}");
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
    let redelivered = count(&all, " redeliveries");
    assert!(redelivered >= 1, "no redelivery counted:\n{all}");
    assert!(
        final_weights(&run) == final_weights(&reference),
        "the churned run differs from the undisturbed one:\n{all}"
    );
}
