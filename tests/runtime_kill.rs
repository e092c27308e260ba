//! Nothing is lost: kill -9 one actor (while it holds a task) and one reward
//! worker in the middle of the RL phase; the run completes with exactly the
//! weights of an undisturbed run, and the task the dead actor held is the one
//! the surviving actor gets redelivered. `ack_wait` is far longer than any
//! live actor holds a task, so that redelivery can only come from the kill.

mod support;

use std::time::{Duration, Instant};

use caprl_common::bus::{LocalNatsServer, LocalNatsServerOptions};
use support::{final_weights, finish, reference_run, sets, spawn, steps, stop, synth, Reaper};

#[test]
fn killing_an_actor_and_a_reward_worker_loses_no_task() {
    let _reaper = Reaper;
    let dir = tempfile::tempdir().unwrap();
    let data = synth(dir.path());
    // The victim holds each task 1.5 s; nothing alive holds one anywhere near 10 s.
    let extra = ["runtime.ack_wait_secs=10"];
    let reference = reference_run(&data, dir.path(), 2, &extra);

    let run = dir.path().join("run");
    let server = LocalNatsServer::start(LocalNatsServerOptions::default()).expect("nats-server");
    let url = server.url();
    let args = sets(&data, &run, 2, &extra);
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
    let started = Instant::now();
    let (mut holds, mut last_hold) = (0, None::<Instant>);
    let held = loop {
        let victim_out = support::output_of(&victim_actor);
        let now_holds = support::task_ids(&victim_out, " for 1500 ms");
        if now_holds.len() > holds {
            (holds, last_hold) = (now_holds.len(), Some(Instant::now()));
        }
        let holding = last_hold.is_some_and(|at| at.elapsed() < Duration::from_millis(1000));
        if !steps(&run, "rl").is_empty() && holding {
            break now_holds.last().cloned().expect("a held task");
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "RL never started, or the victim actor never held a task during it:\n{victim_out}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    for victim in [victim_actor, victim_worker] {
        support::kill9(victim);
    }
    eprintln!("victims killed; the actor held {held}");

    let (ok, learner_out) = finish(learner);
    let (ok_a, actor_out) = stop(actor);
    let (ok_w, worker_out) = stop(worker);
    let all =
        format!("--- learner\n{learner_out}\n--- actor\n{actor_out}\n--- worker\n{worker_out}");
    assert!(ok && ok_a && ok_w, "a role failed:\n{all}");

    let redelivered = support::task_ids(&actor_out, " redelivered");
    assert!(
        redelivered.contains(&held),
        "the survivor was not redelivered {held}, the task the killed actor held \
         (redelivered: {redelivered:?}):\n{all}"
    );
    assert_eq!(steps(&run, "rl").len(), 8, "{all}");
    assert!(
        final_weights(&run) == final_weights(&reference),
        "the run with two kills differs from the undisturbed one:\n{all}"
    );
    drop(server);
}
