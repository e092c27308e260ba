//! Async mode over NATS, with a deliberately slow actor and a rogue one whose
//! rollouts come from a policy older than their task allows. No step trains on
//! a rollout more than `max_policy_lag` versions old: those are dropped and
//! counted; the lagging ones it keeps are importance-weighted (`ρ ≠ 1`); and
//! reward still improves. With `runtime.stale_rollouts = "reweight"` the old
//! ones are trained on, importance-weighted, instead.

mod support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use caprl_common::bus::{
    Bus, BusOptions, LocalNatsServer, LocalNatsServerOptions, NatsBus, NatsConfig, Queue,
};
use caprl_wire::{DecodeKind, PolicyVersion, Rollout, RolloutTask, Sequence};
use support::{finish, kill_all_and_read, sets, spawn, steps, stop, synth};

/// Rollouts the rogue actor sends two policy versions too old.
const STALE: u64 = 3;
const LIMIT: usize = 8 << 20;

/// Plays an actor that pulls `n` tasks (of policy 2 or later) and answers each with a
/// rollout of a policy two versions older than the task's; returns how many it answered.
fn rogue_actor(url: &str, n: u64) -> u64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // The run's ack_wait: another one would make this connection change the queues.
        let opts = BusOptions {
            ack_wait_secs: 30,
            ..BusOptions::for_run("default")
        };
        let bus = NatsBus::connect_pulling(&NatsConfig::to_url(url), &opts, &[Queue::Tasks])
            .await
            .expect("the rogue actor connects");
        let mut answered = 0;
        let started = Instant::now();
        while answered < n && started.elapsed() < Duration::from_secs(120) {
            for d in bus
                .pull(Queue::Tasks, 1, Duration::from_millis(300))
                .await
                .unwrap()
            {
                let task: RolloutTask = caprl_wire::decode(d.payload(), LIMIT).expect("a task");
                if task.policy_version.0 < 2 {
                    d.nak(None).await.unwrap();
                    continue;
                }
                let rollout = Rollout {
                    task_id: task.task_id,
                    data: task.data.clone(),
                    policy_version: PolicyVersion(task.policy_version.0 - 2),
                    actor_id: "rogue".into(),
                    sequences: task
                        .image_rows
                        .iter()
                        .map(|&row| Sequence {
                            image_row: row,
                            kind: DecodeKind::Sample,
                            tokens: vec![4, 5],
                            logprobs: vec![-1.0, -1.0],
                        })
                        .collect(),
                    decode_seconds: 0.0,
                };
                let bytes = caprl_wire::encode(&rollout, LIMIT).unwrap();
                bus.publish(Queue::Rollouts, Bytes::from(bytes))
                    .await
                    .unwrap();
                d.ack().await.unwrap();
                answered += 1;
            }
        }
        answered
    })
}

/// An async run over NATS with a fast actor, a slow one, a reward worker and the rogue actor
/// (which answers `STALE` tasks); returns the RL step records, every role's output and how
/// many tasks the rogue actor answered.
fn run_with_rogue(rl_epochs: u32, extra: &[&str]) -> (Vec<serde_json::Value>, String, u64) {
    let _reaper = support::Reaper;
    let dir = tempfile::tempdir().unwrap();
    let data = synth(dir.path());
    let run = dir.path().join("run");
    let server = LocalNatsServer::start(LocalNatsServerOptions::default()).expect("nats-server");
    let url = server.url();
    let mut keys = vec![
        "runtime.mode=\"async\"",
        "runtime.max_policy_lag=1",
        "runtime.tasks_in_flight=8",
        // Far above any ratio a small step makes: no ρ is clipped to a constant.
        "runtime.is_clip=10.0",
        "runtime.ack_wait_secs=30",
        "optim.rl_lr=0.002",
    ];
    keys.extend_from_slice(extra);
    let args = sets(&data, &run, rl_epochs, &keys);
    let fast = spawn(&args, &["actor", "--id", "fast"], &url);
    let slow = spawn(&args, &["actor", "--id", "slow", "--delay-ms", "400"], &url);
    let worker = spawn(&args, &["reward-worker", "--id", "rw"], &url);
    let learner = spawn(&args, &["learner"], &url);
    let started = Instant::now();
    while steps(&run, "rl").is_empty() {
        if started.elapsed() > Duration::from_secs(90) {
            let outs = kill_all_and_read([
                ("fast", fast),
                ("slow", slow),
                ("worker", worker),
                ("learner", learner),
            ]);
            panic!("RL never started:\n{}", outs);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Built to produce stale rollouts: real actors refuse a task older than its
    // `min_version`, so they never get more than `max_policy_lag` behind. A rogue actor
    // answers three tasks with a policy two versions older than the task's own.
    let rogue = rogue_actor(&url, STALE);
    let (ok, out) = finish(learner);
    let (_, fast_out) = stop(fast);
    let (_, slow_out) = stop(slow);
    let (_, worker_out) = stop(worker);
    let all = format!(
        "--- learner\n{out}\n--- fast\n{fast_out}\n--- slow\n{slow_out}\n--- worker\n{worker_out}"
    );
    assert!(ok, "learner failed:\n{all}");
    (steps(&run, "rl"), all, rogue)
}

fn total(rl: &[serde_json::Value], key: &str) -> u64 {
    rl.iter().map(|s| s[key].as_u64().unwrap_or(0)).sum()
}

#[test]
fn slow_actor_rollouts_are_dropped_or_corrected_and_reward_still_improves() {
    let (rl, all, rogue) = run_with_rogue(10, &[]);
    assert_eq!(rl.len(), 40, "{all}");
    for s in &rl {
        let max_lag = s["max_lag"].as_u64().expect("max_lag in every step record");
        assert!(
            max_lag <= 1,
            "step {} trained on a rollout {max_lag} versions old (max_policy_lag = 1):\n{all}",
            s["step"]
        );
        let rho = s["importance_weight"].as_f64();
        if max_lag == 0 {
            assert!(rho.is_none(), "ρ without a lagging rollout: {s}");
            continue;
        }
        let rho = rho.unwrap_or_else(|| panic!("a lagging batch without ρ: {s}"));
        assert!(
            rho.is_finite() && rho > 0.0 && rho <= 10.0 && rho != 1.0,
            "step {}: lagging rollouts weighted by ρ = {rho}, not corrected:\n{all}",
            s["step"]
        );
    }
    let lagging = rl
        .iter()
        .filter(|s| s["max_lag"].as_u64() == Some(1))
        .count();
    assert!(lagging > 0, "no step trained on a lagging rollout:\n{all}");
    let dropped = total(&rl, "dropped_stale");
    assert_eq!(rogue, STALE, "the rogue actor got too few tasks:\n{all}");
    assert!(
        dropped >= STALE,
        "{dropped} rollouts dropped as stale; the rogue actor sent {STALE} two versions old:\n{all}"
    );
    assert_eq!(total(&rl, "stale_reweighted"), 0, "{all}");
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

/// `runtime.stale_rollouts = "reweight"`: the rogue actor's rollouts, two versions old, are
/// trained on with a truncated importance weight instead of being dropped.
#[test]
fn stale_rollouts_can_be_reweighted_instead_of_dropped() {
    let (rl, all, rogue) = run_with_rogue(3, &["runtime.stale_rollouts=\"reweight\""]);
    assert_eq!(rogue, STALE, "the rogue actor got too few tasks:\n{all}");
    assert_eq!(total(&rl, "dropped_stale"), 0, "{all}");
    let kept = total(&rl, "stale_reweighted");
    assert!(
        kept >= STALE,
        "{kept} stale rollouts reweighted, {STALE} sent:\n{all}"
    );
    for s in rl
        .iter()
        .filter(|s| s["stale_reweighted"].as_u64() > Some(0))
    {
        // Older than max_policy_lag = 1: two versions behind its task, more when the task
        // was issued steps ahead or waited for a credit.
        let lag = s["max_lag"].as_u64().unwrap_or(0);
        assert!(lag >= 2, "{s}");
        let rho = s["importance_weight"]
            .as_f64()
            .expect("ρ of the stale rollouts");
        assert!(rho.is_finite() && rho > 0.0 && rho <= 10.0, "{s}");
    }
}
