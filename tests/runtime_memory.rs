//! Bounded memory: while a sync run trains, 4,000 well-formed scored
//! rollouts (about 16 KB each) for far-off task ids are published on the
//! scored subject — producers outpacing the learner by far. The learner pulls
//! them all, keeps only a bounded few, and its resident memory stays flat
//! (grows by less than half the flood); the run is unharmed. And `caprl local`, which checks
//! the data set before it starts the roles, does so in a child and never holds that check's
//! memory.

mod support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use caprl_common::bus::{Bus, Queue};
use caprl_wire::{
    DataFingerprint, DecodeKind, PolicyVersion, RewardVector, Rollout, ScoredRollout, Sequence,
    TaskId,
};
use support::{
    current_thread_runtime, finish, publisher, sets, spawn, start_broker, steps, stop, synth,
    wait_for_rl, Reaper,
};

const FLOOD: u64 = 4_000;

/// Resident set size of process `pid`, in bytes.
fn rss(pid: u32) -> u64 {
    status_bytes(pid, "VmRSS:")
}

/// A size `field` of `/proc/PID/status` (`VmRSS:`, `VmHWM:`), in bytes.
fn status_bytes(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("process alive");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/PID/status"));
    kb * 1024
}

/// A scored rollout on data set `data` for task `id` (far beyond the run) of about 16 KB.
fn far_off(data: &DataFingerprint, id: u64) -> Bytes {
    let s = ScoredRollout {
        rollout: Rollout {
            task_id: TaskId(id),
            data: data.clone(),
            policy_version: PolicyVersion(1),
            actor_id: "flood".into(),
            sequences: vec![Sequence {
                image_row: 0,
                kind: DecodeKind::Sample,
                tokens: (0..2048).map(|t| 100_000 + t).collect(),
                logprobs: vec![-0.5; 2048],
            }],
            decode_seconds: 0.0,
        },
        rewards: vec![RewardVector {
            total: 0.0,
            components: Vec::new(),
        }],
    };
    Bytes::from(caprl_wire::encode(&s, 8 << 20).unwrap())
}

#[test]
fn learner_memory_stays_flat_under_a_flood_of_scored_rollouts() {
    let _reaper = Reaper;
    let dir = tempfile::tempdir().unwrap();
    let data = synth(dir.path());
    let run = dir.path().join("run");
    let (_server, url) = start_broker();
    let args = sets(&data, &run, 2, &["runtime.ack_wait_secs=5"]);
    // A slow actor keeps the learner busy while the flood is pulled.
    let actor = spawn(&args, &["actor", "--id", "a", "--delay-ms", "400"], &url);
    let worker = spawn(&args, &["reward-worker", "--id", "w"], &url);
    let learner = spawn(&args, &["learner"], &url);

    let rt = current_thread_runtime();
    // After the learner's start-of-RL purge, so the whole flood reaches it.
    wait_for_rl(&run);
    // A publisher only, opened once the learner has created the run's queues (it opens no
    // consumer, so it cannot race the learner creating or changing them).
    let bus = publisher(&rt, &url, 5);
    // Of the run's data set: the learner keeps them for their rounds (up to its bound).
    let fingerprint = caprl_data::Dataset::open(&data)
        .unwrap()
        .fingerprint()
        .to_string();
    let fingerprint = DataFingerprint(fingerprint);
    let before = rss(learner.id());
    rt.block_on(async {
        for i in 0..FLOOD {
            bus.publish(Queue::Scored, far_off(&fingerprint, 1_000_000 + i))
                .await
                .unwrap();
        }
    });
    let mut peak = before;
    loop {
        peak = peak.max(rss(learner.id()));
        if rt.block_on(bus.depth(Queue::Scored)).unwrap() == 0 {
            break;
        }
        assert!(
            steps(&run, "rl").len() < 8,
            "the run ended before the learner pulled the flood; slow the actor down"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    peak = peak.max(rss(learner.id()));

    let (ok, learner_out) = finish(learner);
    let (_, actor_out) = stop(actor);
    let (_, worker_out) = stop(worker);
    assert!(
        ok,
        "learner failed:\n{learner_out}\n{actor_out}\n{worker_out}"
    );
    assert!(
        learner_out.contains("task ids used 32 (32 distinct)"),
        "{learner_out}"
    );
    let flood_bytes = FLOOD * far_off(&fingerprint, 0).len() as u64;
    let grew = peak.saturating_sub(before);
    eprintln!(
        "learner RSS {} -> {} MB (peak) under a {} MB flood",
        before >> 20,
        peak >> 20,
        flood_bytes >> 20
    );
    assert!(
        grew < flood_bytes / 2,
        "learner RSS grew by {} MB under a {} MB flood",
        grew >> 20,
        flood_bytes >> 20
    );
}

/// `caprl local` checks the data set (here 30,000 images' captions: well over 100 MB while it
/// is open) in a child `caprl data check`, then only supervises: its own memory never reaches
/// 100 MB, at its peak as while the roles train.
#[test]
fn local_never_holds_the_memory_of_its_data_set_check() {
    const BOUND: u64 = 100 << 20;
    let _reaper = Reaper;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let out = support::caprl()
        .args([
            "data", "synth", "--train", "30000", "--val", "16", "--test", "16", "-q",
        ])
        .arg("--out")
        .arg(&data)
        .output()
        .expect("caprl runs");
    assert!(out.status.success(), "{}", support::text(&out));
    let run = dir.path().join("run");
    let child = support::caprl()
        .args(["local", "--actors", "1", "--reward-workers", "1"])
        .args(sets(&data, &run, 0, &[]))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let started = Instant::now();
    while steps(&run, "xe").is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "training never started"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (resident, peak) = (rss(pid), status_bytes(pid, "VmHWM:"));
    // SAFETY: kill(2) on our own child, not yet reaped.
    unsafe {
        libc::kill(pid as i32, libc::SIGINT);
    }
    let _ = child.wait_with_output();
    let mib = |b: u64| b >> 20;
    assert!(
        peak < BOUND && resident <= peak,
        "caprl local holds {} MiB while it supervises (peak {} MiB)",
        mib(resident),
        mib(peak)
    );
}
