//! Nothing is lost: kill -9 one actor (while it holds a task) and one reward
//! worker in the middle of the RL phase; the run completes, every task of
//! every step is used exactly once, and the redeliveries of the dead
//! processes' work are counted.

mod support;

use std::time::{Duration, Instant};

use caprl_common::bus::{LocalNatsServer, LocalNatsServerOptions};
use support::{finish, sets, spawn, stop, synth};

/// The number after `label` in `text`, summed over every occurrence.
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
fn killing_an_actor_and_a_reward_worker_loses_no_task() {
    let _reaper = support::Reaper;
    let dir = tempfile::tempdir().unwrap();
    let data = synth(dir.path());
    let run = dir.path().join("run");
    let server = LocalNatsServer::start(LocalNatsServerOptions::default()).expect("nats-server");
    let url = server.url();
    let args = sets(&data, &run, 2, &["runtime.ack_wait_secs=2"]);
    let victim_actor = spawn(
        &args,
        &["actor", "--id", "victim", "--delay-ms", "1500"],
        &url,
    );
    let actor = spawn(&args, &["actor", "--id", "survivor"], &url);
    let victim_worker = spawn(&args, &["reward-worker", "--id", "victim-rw"], &url);
    let worker = spawn(&args, &["reward-worker", "--id", "survivor-rw"], &url);
    let learner = spawn(&args, &["learner"], &url);

    // Wait for the RL phase to be under way and for the victim actor to be holding a task it
    // took less than a second ago (so it dies with the task unacknowledged), then kill -9
    // both victims. (The victim logs each hold, then waits 1.5 s.)
    let log = run.join("run.jsonl");
    let started = Instant::now();
    let (mut holds, mut last_hold) = (0, None::<Instant>);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let rl_steps = text.matches("\"phase\":\"rl\"").count();
        let now_holds = support::output_of(&victim_actor).matches("holding").count();
        if now_holds > holds {
            (holds, last_hold) = (now_holds, Some(Instant::now()));
        }
        let holding = last_hold.is_some_and(|at| at.elapsed() < Duration::from_millis(1000));
        if rl_steps >= 1 && holding {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(40),
            "RL never started, or the victim actor never held a task during it"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    for victim in [victim_actor, victim_worker] {
        support::kill9(victim);
    }

    let (ok, learner_out) = finish(learner);
    let (ok_a, actor_out) = stop(actor);
    let (ok_w, worker_out) = stop(worker);
    assert!(
        ok && ok_a && ok_w,
        "a role failed:\n--- learner\n{learner_out}\n--- actor\n{actor_out}\n--- worker\n{worker_out}"
    );

    // 8 RL steps of 4 tasks, each task used exactly once.
    assert!(
        learner_out.contains("task ids used 32 (32 distinct)"),
        "{learner_out}"
    );
    let redelivered = count(&actor_out, " redeliveries")
        + count(&worker_out, " redeliveries")
        + count(&learner_out, " redeliveries");
    assert!(
        redelivered >= 1,
        "no redelivery counted:\n{actor_out}\n{worker_out}\n{learner_out}"
    );
    drop(server);
}
