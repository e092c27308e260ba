//! Hostile traffic during a run: 10,000 bad messages (random bytes, the wrong
//! message kind for the subject, truncated envelopes, a future schema
//! version) are published on every work subject while the learner, an actor
//! and a reward worker train. No role panics or stops; every bad message is
//! rejected and counted by reason by the role that pulls it (the actor's and
//! the worker's `caprl_rejected_messages_total`, the learner's `rejected` in
//! `run.jsonl`), each count exactly what was sent to that role's subject, and
//! the run ends with exactly the weights of a quiet run.

mod support;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

use bytes::Bytes;
use caprl_common::bus::{Bus, Queue};
use caprl_wire::{Heartbeat, PolicyVersion, HEADER_LEN};
use support::{
    current_thread_runtime, data_and_reference, final_weights, finish, publisher, sets, spawn,
    start_broker, steps, stop, wait_for_rl, Reaper,
};

const BAD: usize = 10_000;
const LIMIT: usize = 8 << 20;

/// The rejection reason of bad message number `i` (see [`bad_message`]).
fn reason(i: usize) -> &'static str {
    ["bad_magic", "wrong_kind", "truncated", "unknown_version"][i % 4]
}

/// Bad message number `i`: one of four kinds of damage, all undecodable.
fn bad_message(i: usize) -> Bytes {
    let hb = caprl_wire::encode(
        &Heartbeat {
            role: "intruder".into(),
            id: format!("x{i}"),
            policy_version: PolicyVersion(i as u64),
            unix_ms: 0,
            data: Default::default(),
            problem: None,
        },
        LIMIT,
    )
    .unwrap();
    // A cheap deterministic byte stream (xorshift).
    let mut x = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x as u8
    };
    let bytes = match i % 4 {
        0 => {
            let n = 1 + next() as usize;
            let mut b: Vec<u8> = (0..n).map(|_| next()).collect();
            b[0] = b'X';
            b
        }
        // A heartbeat is a valid envelope, but not a task, rollout or score.
        1 => hb,
        // Cut inside the header (a cut in the payload would be read as the wrong kind first).
        2 => hb[..1 + next() as usize % (HEADER_LEN - 1)].to_vec(),
        _ => {
            let mut b = hb;
            b[4..6].copy_from_slice(&(caprl_wire::SCHEMA_VERSION + 1).to_be_bytes());
            b
        }
    };
    Bytes::from(bytes)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn scrape(port: u16) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("metrics endpoint");
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// `caprl_rejected_messages_total` by reason, from a Prometheus scrape.
fn rejected_by_reason(metrics: &str) -> BTreeMap<String, u64> {
    let mut by = BTreeMap::new();
    for line in metrics.lines() {
        let Some(labels) = line.strip_prefix("caprl_rejected_messages_total{") else {
            continue;
        };
        let reason = labels
            .split("reason=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or_else(|| panic!("a rejection count without a reason: {line}"));
        let n: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("a rejection count that is not a number: {line}"));
        *by.entry(reason.to_string()).or_default() += n as u64;
    }
    by
}

/// How many bad messages of each reason go to each queue (in [`Queue::ALL`]'s order).
fn sent_by_reason() -> [BTreeMap<String, u64>; 3] {
    let mut sent: [BTreeMap<String, u64>; 3] = Default::default();
    for i in 0..BAD {
        *sent[i % 3].entry(reason(i / 3).to_string()).or_default() += 1;
    }
    sent
}

#[test]
fn ten_thousand_bad_messages_on_every_subject_are_rejected_and_the_run_is_unharmed() {
    let _reaper = Reaper;
    let extra = ["runtime.ack_wait_secs=2"];
    let (dir, data, reference) = data_and_reference(2, &extra);

    let run = dir.path().join("run");
    let (_server, url) = start_broker();
    let args = sets(&data, &run, 2, &extra);
    // One warning per rejected message would fill the roles' output pipes:
    // keep the summaries (target `caprl`), drop the per-message warnings.
    std::env::set_var(
        "RUST_LOG",
        "warn,caprl=info,caprl_actor=error,caprl_reward_worker=error,caprl_learner=error",
    );
    let (actor_port, worker_port) = (free_port(), free_port());
    let (actor_addr, worker_addr) = (
        format!("127.0.0.1:{actor_port}"),
        format!("127.0.0.1:{worker_port}"),
    );
    let first_actor = spawn(&args, &["actor", "--id", "a"], &url);
    let worker = spawn(
        &args,
        &["reward-worker", "--id", "w", "--metrics-addr", &worker_addr],
        &url,
    );
    let learner = spawn(&args, &["learner"], &url);

    let rt = current_thread_runtime();
    // After the learner's start-of-RL purge of leftovers, so every bad message is seen.
    wait_for_rl(&run);
    // No actor while the flood goes out: every later step's results, above all the last
    // one's, reach `scored` behind all of it, so the learner has to pull every bad message.
    let (ok_first, first_out) = stop(first_actor);
    assert!(ok_first, "the first actor failed:\n{first_out}");
    // A publisher only, opened once the learner has created the run's queues (it opens no
    // consumer, so it cannot race the learner creating or changing them).
    let bus = publisher(&rt, &url, 2);
    rt.block_on(async {
        for i in 0..BAD {
            let q = Queue::ALL[i % 3];
            bus.publish(q, bad_message(i / 3)).await.unwrap();
        }
    });
    let actor = spawn(
        &args,
        &["actor", "--id", "b", "--metrics-addr", &actor_addr],
        &url,
    );

    let (ok, learner_out) = finish(learner);
    assert!(ok, "learner failed:\n{learner_out}");
    // Let the actor and the worker finish their queues, then count.
    let started = Instant::now();
    loop {
        let left = rt.block_on(async {
            bus.depth(Queue::Tasks).await.unwrap() + bus.depth(Queue::Rollouts).await.unwrap()
        });
        if left == 0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{left} messages never pulled"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let actor_metrics = scrape(actor_port);
    let worker_metrics = scrape(worker_port);
    let unread_scored = rt.block_on(bus.depth(Queue::Scored)).unwrap();
    let (ok_a, actor_out) = stop(actor);
    let (ok_w, worker_out) = stop(worker);
    let all = format!("{learner_out}\n--- actor\n{actor_out}\n--- worker\n{worker_out}");
    assert!(ok_a && ok_w, "a role failed:\n{all}");
    assert!(!all.contains("panicked"), "{all}");

    let rl = steps(&run, "rl");
    let mut learner_rejected: BTreeMap<String, u64> = BTreeMap::new();
    for step in &rl {
        for (reason, n) in step["rejected"].as_object().into_iter().flatten() {
            *learner_rejected.entry(reason.clone()).or_default() += n.as_u64().unwrap_or(0);
        }
    }
    let [to_actor, to_worker, to_learner] = sent_by_reason();
    assert_eq!(
        unread_scored, 0,
        "bad scored messages the learner never pulled:\n{all}"
    );
    assert_eq!(
        learner_rejected, to_learner,
        "the learner's rejections by reason (run.jsonl) differ from the bad messages sent on \
         `scored`:\n{all}"
    );
    assert_eq!(
        rejected_by_reason(&actor_metrics),
        to_actor,
        "the actor's rejections by reason differ from the bad messages sent on `tasks`:\n\
         {actor_metrics}"
    );
    assert_eq!(
        rejected_by_reason(&worker_metrics),
        to_worker,
        "the worker's rejections by reason differ from the bad messages sent on `rollouts`:\n\
         {worker_metrics}"
    );
    assert_eq!(rl.len(), 8, "{all}");
    assert!(
        final_weights(&run) == final_weights(&reference),
        "the flooded run differs from the quiet one:\n{all}"
    );
}
