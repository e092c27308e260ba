//! A learner killed with -9 in the middle of the RL phase and restarted with
//! `--resume` continues from its newest checkpoint with the same actors and
//! reward workers, uses the scored results already in JetStream, and ends
//! with exactly the weights of an uninterrupted run (sync mode is exact).

mod support;

use std::time::{Duration, Instant};

use caprl_common::bus::{LocalNatsServer, LocalNatsServerOptions};
use support::{
    final_weights, finish, kill9, kill_and_read, reference_run, sets, spawn, steps, stop, synth,
    Reaper,
};

#[test]
fn learner_killed_mid_run_resumes_and_matches_an_uninterrupted_run() {
    let _reaper = Reaper;
    let dir = tempfile::tempdir().unwrap();
    let data = synth(dir.path());
    let extra = ["checkpoint.every_steps=2", "runtime.ack_wait_secs=2"];

    let t0 = Instant::now();
    let reference = reference_run(&data, dir.path(), 3, &extra);
    // Progress lines: the test runner shows them if the test fails or runs out of time.
    eprintln!("reference run done after {:?}", t0.elapsed());

    let run = dir.path().join("run");
    let server = LocalNatsServer::start(LocalNatsServerOptions::default()).expect("nats-server");
    let url = server.url();
    let args = sets(&data, &run, 3, &extra);
    let actor = spawn(&args, &["actor", "--id", "a"], &url);
    let worker = spawn(&args, &["reward-worker", "--id", "w"], &url);
    let learner = spawn(&args, &["learner"], &url);
    let started = Instant::now();
    while steps(&run, "rl").len() < 5 {
        if started.elapsed() > Duration::from_secs(60) {
            let outs = [("actor", actor), ("worker", worker), ("learner", learner)]
                .map(|(name, c)| format!("--- {name} {}", kill_and_read(c)));
            panic!(
                "RL never got going:\n{}\n--- broker log\n{}",
                outs.join("\n"),
                server.log_tail()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    kill9(learner);
    eprintln!(
        "learner killed after {:?}, at RL step {}",
        t0.elapsed(),
        steps(&run, "rl").len()
    );

    let mut resumed_args = args.clone();
    resumed_args.push("--resume".into());
    let (ok, out) = finish(spawn(&resumed_args, &["learner"], &url));
    eprintln!("resumed learner ended after {:?}", t0.elapsed());
    let (_, actor_out) = stop(actor);
    let (_, worker_out) = stop(worker);
    assert!(
        ok,
        "resumed learner failed:\n{out}\n--- actor\n{actor_out}\n--- worker\n{worker_out}\n\
         --- broker log\n{}",
        server.log_tail()
    );
    // The resumed learner trains each remaining task once: `used` == `distinct`.
    let used = out
        .split("task ids used ")
        .nth(1)
        .and_then(|rest| rest.lines().next())
        .unwrap_or_else(|| panic!("no task summary:\n{out}"));
    let (n, distinct) = used.split_once(" (").unwrap();
    assert_eq!(format!("{n} distinct)"), distinct, "{out}");
    assert!(
        final_weights(&run) == final_weights(&reference),
        "resumed run differs from the uninterrupted one:\n{out}"
    );
}
