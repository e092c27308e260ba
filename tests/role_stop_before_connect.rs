//! A role started before the learner waits for the queues the learner creates; a SIGTERM then
//! (Kubernetes deleting the pod, `caprl local` stopping) ends it cleanly instead of leaving it
//! waiting for ever. Real nats-server, real processes.

mod support;

use std::time::{Duration, Instant};

use caprl_common::bus::{LocalNatsServer, LocalNatsServerOptions};
use support::{finish_within, output_of, sets, spawn, synth, Reaper};

#[test]
fn actor_and_reward_worker_waiting_for_the_learner_stop_on_sigterm() {
    let _reaper = Reaper;
    let tmp = tempfile::tempdir().unwrap();
    let data = synth(tmp.path());
    let server = LocalNatsServer::start(LocalNatsServerOptions::default()).expect("nats-server");
    let args = sets(&data, &tmp.path().join("run"), 1, &[]);
    for role in [
        &["actor", "--id", "a"][..],
        &["reward-worker", "--id", "w"][..],
    ] {
        let child = spawn(&args, role, &server.url());
        let started = Instant::now();
        while !output_of(&child).contains("waiting for the learner") {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "{role:?} never said it waits for the learner:\n{}",
                output_of(&child)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        // SAFETY: kill(2) on a child we spawned and have not reaped.
        unsafe {
            libc::kill(child.id() as i32, libc::SIGTERM);
        }
        let (ok, out) = finish_within(child, Duration::from_secs(30));
        assert!(ok, "{role:?} did not stop cleanly on SIGTERM:\n{out}");
        assert!(
            out.contains("stopped before it was connected"),
            "{role:?}:\n{out}"
        );
    }
}
