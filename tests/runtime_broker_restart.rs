//! The broker goes away mid-run: nats-server (file store) is stopped in the
//! middle of the RL phase and started again on the same port and store 12 s
//! later. Every role rides out the outage instead of exiting, logs losing
//! and regaining the connection, and the run finishes with exactly the weights of an
//! uninterrupted run, every task of every step used exactly once.

mod support;

use std::time::{Duration, Instant};

use caprl_common::bus::{LocalNatsServer, LocalNatsServerOptions};
use support::{
    data_and_reference, final_weights, finish, kill_all_and_read, sets, spawn, steps, stop, Reaper,
};

#[test]
fn roles_ride_out_a_broker_restart_and_the_run_matches_an_uninterrupted_one() {
    let _reaper = Reaper;
    let extra = ["runtime.ack_wait_secs=2"];
    let (dir, data, reference) = data_and_reference(2, &extra);

    let run = dir.path().join("run");
    let store = dir.path().join("jetstream");
    let mut server = LocalNatsServer::start(LocalNatsServerOptions {
        store_dir: Some(store.clone()),
        ..LocalNatsServerOptions::default()
    })
    .expect("nats-server");
    let url = server.url();
    let args = sets(&data, &run, 2, &extra);
    let mut actor = spawn(&args, &["actor", "--id", "a"], &url);
    let mut worker = spawn(&args, &["reward-worker", "--id", "w"], &url);
    let mut learner = spawn(&args, &["learner"], &url);

    let started = Instant::now();
    while steps(&run, "rl").len() < 2 {
        let exited = [&mut actor, &mut worker, &mut learner]
            .into_iter()
            .any(|c| matches!(c.try_wait(), Ok(Some(_))));
        if exited || started.elapsed() > Duration::from_secs(60) {
            let outs =
                kill_all_and_read([("actor", actor), ("worker", worker), ("learner", learner)]);
            panic!(
                "RL never got going ({:?}, a role exited: {exited}; broker log:\n{}):\n{}",
                started.elapsed(),
                server.log_tail(),
                outs
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let port = server.port();
    server.stop();
    let during = steps(&run, "rl").len();
    // Longer than the bus's 10 s request timeout, so every role sees its
    // operations fail and has to retry rather than merely wait.
    std::thread::sleep(Duration::from_secs(12));
    server
        .restart()
        .expect("nats-server restarts on its port and store");
    assert_eq!(server.port(), port);

    let (ok, learner_out) = finish(learner);
    let (ok_a, actor_out) = stop(actor);
    let (ok_w, worker_out) = stop(worker);
    let all = format!("{learner_out}\n--- actor\n{actor_out}\n--- worker\n{worker_out}");
    assert!(ok && ok_a && ok_w, "a role failed:\n{all}");
    assert!(
        during < 8,
        "the broker went down only after the run ({during} RL steps):\n{all}"
    );
    // Every role sees its connection drop and come back. Whether an operation
    // also failed and went through the retry backoff depends on what each role
    // was waiting on when the broker went away, so that is not asserted.
    for (role, out) in [
        ("learner", &learner_out),
        ("actor", &actor_out),
        ("worker", &worker_out),
    ] {
        let lost = out.find("lost the broker connection");
        let back = lost.and_then(|at| out[at..].find("connected to the broker"));
        assert!(
            back.is_some(),
            "the {role} did not log losing and regaining the broker:\n{all}"
        );
    }
    assert!(
        learner_out.contains("task ids used 32 (32 distinct)"),
        "{all}"
    );
    assert!(
        final_weights(&run) == final_weights(&reference),
        "the run through a broker restart differs from the uninterrupted one:\n{all}"
    );
}
