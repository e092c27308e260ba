//! Async mode over NATS: a deliberately slow actor's rollouts arrive several
//! policy versions late; those beyond `max_policy_lag` are dropped and
//! counted, the others are importance-weighted, and reward still improves.

mod support;

use caprl_common::bus::{LocalNatsServer, LocalNatsServerOptions};
use support::{finish, sets, spawn, steps, stop, synth};

#[test]
fn slow_actor_rollouts_are_dropped_or_corrected_and_reward_still_improves() {
    let _reaper = support::Reaper;
    let dir = tempfile::tempdir().unwrap();
    let data = synth(dir.path());
    let run = dir.path().join("run");
    let server = LocalNatsServer::start(LocalNatsServerOptions::default()).expect("nats-server");
    let url = server.url();
    let args = sets(
        &data,
        &run,
        10,
        &[
            "runtime.mode=\"async\"",
            "runtime.max_policy_lag=1",
            "runtime.tasks_in_flight=8",
            "optim.rl_lr=0.002",
        ],
    );
    let fast = spawn(&args, &["actor", "--id", "fast"], &url);
    let slow = spawn(&args, &["actor", "--id", "slow", "--delay-ms", "400"], &url);
    let worker = spawn(&args, &["reward-worker", "--id", "rw"], &url);
    let (ok, out) = finish(spawn(&args, &["learner"], &url));
    let (_, fast_out) = stop(fast);
    let (_, slow_out) = stop(slow);
    let (_, worker_out) = stop(worker);
    assert!(
        ok,
        "learner failed:\n{out}\n{fast_out}\n{slow_out}\n{worker_out}"
    );

    let rl = steps(&run, "rl");
    assert_eq!(rl.len(), 40, "{out}");
    let dropped: u64 = rl
        .iter()
        .map(|s| s["dropped_stale"].as_u64().unwrap_or(0))
        .sum();
    let lagged = rl
        .iter()
        .filter(|s| s["lag"].as_f64().unwrap_or(0.0) > 0.0)
        .count();
    assert!(
        dropped > 0 || lagged > 0,
        "the slow actor's rollouts were neither dropped nor corrected:\n{out}"
    );
    assert!(out.contains("dropped stale"), "{out}");
    let reward = |s: &[serde_json::Value]| {
        s.iter()
            .map(|v| v["rewards"]["total"].as_f64().unwrap())
            .sum::<f64>()
            / s.len() as f64
    };
    let (first, last) = (reward(&rl[..10]), reward(&rl[30..]));
    assert!(
        last > first,
        "reward did not improve: first 10 steps {first:.4}, last 10 {last:.4}"
    );
}
