//! A learner killed with -9 in the middle of the RL phase and restarted with
//! `--resume` continues from the checkpoint of its last logged step (not from
//! scratch), takes the scored results its predecessor's last tasks left in
//! JetStream instead of issuing those tasks again, and ends with exactly the
//! weights of an uninterrupted run (sync mode is exact). A `--resume` that
//! finds no checkpoint says so, in the process log and in `run.jsonl`.

mod support;

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use caprl_common::bus::{Bus, LocalNatsServer, Queue};
use serde_json::Value;
use support::{
    caprl, current_thread_runtime, final_weights, finish, kill9, kill_all_and_read, output_of,
    publisher, reference_run, sets, spawn, start_broker, steps, stop, synth, text, Reaper,
};

/// Every line of `run_dir/run.jsonl`, parsed.
fn run_log(run_dir: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(run_dir.join("run.jsonl")).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// `key` summed over step records.
fn sum<'a>(steps: impl IntoIterator<Item = &'a Value>, key: &str) -> u64 {
    steps
        .into_iter()
        .map(|s| s[key].as_u64().unwrap_or(0))
        .sum()
}

/// A fast actor, a slow one (it logs each task it holds, then waits `slow_ms` before decoding
/// it), a reward worker and the learner, named for [`wait_for_a_fresh_hold`].
fn start_roles(
    args: &[String],
    url: &str,
    slow_ms: u32,
) -> [(&'static str, std::process::Child); 4] {
    let slow_ms = slow_ms.to_string();
    [
        ("actor", spawn(args, &["actor", "--id", "a"], url)),
        (
            "slow",
            spawn(
                args,
                &["actor", "--id", "slow", "--delay-ms", &slow_ms],
                url,
            ),
        ),
        ("worker", spawn(args, &["reward-worker", "--id", "w"], url)),
        ("learner", spawn(args, &["learner"], url)),
    ]
}

/// Waits until the run has logged 3 RL steps and the role named `slow` (second of `roles`) has
/// just taken a task, and hands the roles back; after 90 s kills them all and fails with their
/// output and the broker's.
fn wait_for_a_fresh_hold(
    run: &Path,
    roles: [(&str, std::process::Child); 4],
    server: &LocalNatsServer,
) -> [std::process::Child; 4] {
    let started = Instant::now();
    let holds = |roles: &[(&str, std::process::Child); 4]| {
        output_of(&roles[1].1).matches("holding").count()
    };
    let mut seen = holds(&roles);
    loop {
        let now = holds(&roles);
        let took_one = now > seen;
        seen = now;
        if took_one && steps(run, "rl").len() >= 3 {
            return roles.map(|(_, child)| child);
        }
        if started.elapsed() > Duration::from_secs(90) {
            let outs = kill_all_and_read(roles);
            panic!(
                "RL never got going, or the slow actor never held a task during it:\n{outs}\n\
                 --- broker log\n{}",
                server.log_tail()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Starts a broker of its own and [`start_roles`] on `run` (3 RL epochs with `extra`), waits
/// for [`wait_for_a_fresh_hold`] and kills the learner with -9; returns the broker, the run's
/// arguments and the roles still running (actor, slow actor, reward worker).
fn kill_the_learner_during_a_fresh_hold(
    data: &Path,
    run: &Path,
    extra: &[&str],
    slow_ms: u32,
) -> (LocalNatsServer, Vec<String>, [Child; 3]) {
    let (server, url) = start_broker();
    let args = sets(data, run, 3, extra);
    let roles = start_roles(&args, &url, slow_ms);
    let [actor, slow, worker, learner] = wait_for_a_fresh_hold(run, roles, &server);
    kill9(learner);
    (server, args, [actor, slow, worker])
}

/// Runs a learner with `args` and `--resume` to its end, then stops the roles still running
/// (actor, slow actor, reward worker); returns whether the resumed learner succeeded, and what
/// each role wrote.
fn resume_the_learner_then_stop(
    args: &[String],
    url: &str,
    [actor, slow, worker]: [Child; 3],
) -> (bool, String) {
    let mut resumed_args = args.to_vec();
    resumed_args.push("--resume".into());
    let (ok, out) = finish(spawn(&resumed_args, &["learner"], url));
    let (_, actor_out) = stop(actor);
    let (_, slow_out) = stop(slow);
    let (_, worker_out) = stop(worker);
    let all = format!(
        "--- resumed learner\n{out}\n--- actor\n{actor_out}\n--- slow actor\n{slow_out}\n\
         --- worker\n{worker_out}"
    );
    (ok, all)
}

/// The position of the resume record in `log`; fails with `all` (the roles' output) if none.
fn resume_record(log: &[Value], all: &str) -> usize {
    log.iter()
        .position(|l| l["type"] == "resume")
        .unwrap_or_else(|| panic!("run.jsonl has no resume record:\n{all}"))
}

/// The RL step records among `log`'s records.
fn rl_steps(log: &[Value]) -> Vec<&Value> {
    log.iter()
        .filter(|l| l["type"] == "step" && l["phase"] == "rl")
        .collect()
}

#[test]
fn learner_killed_mid_run_resumes_from_its_checkpoint_and_uses_the_results_left_in_jetstream() {
    let _reaper = Reaper;
    let dir = tempfile::tempdir().unwrap();
    let data = synth(dir.path());
    // A checkpoint after every step: the learner issues step s+1's tasks only once step s's
    // checkpoint is written, so a learner killed while a task is held resumes from its last
    // logged step exactly.
    let extra = ["checkpoint.every_steps=1", "runtime.ack_wait_secs=10"];

    let t0 = Instant::now();
    let reference = reference_run(&data, dir.path(), 3, &extra);
    // Progress lines: the test runner shows them if the test fails or runs out of time.
    eprintln!("reference run done after {:?}", t0.elapsed());
    let fresh_issued = sum(&steps(&reference, "rl"), "tasks_issued");
    assert_eq!(fresh_issued, 48, "12 RL steps of 4 tasks in a fresh run");

    let run = dir.path().join("run");
    // Kill the learner once RL is under way and right after the slow actor took a task: that
    // task's result reaches JetStream only after the learner is dead.
    let (server, args, survivors) = kill_the_learner_during_a_fresh_hold(&data, &run, &extra, 1000);
    let url = server.url();
    let last_logged = steps(&run, "rl")
        .last()
        .and_then(|s| s["step"].as_u64())
        .expect("a logged RL step");
    eprintln!(
        "learner killed after {:?}, after step {last_logged}",
        t0.elapsed()
    );

    // Let the actors and the worker finish the dead learner's last tasks: their results wait
    // in JetStream for whoever pulls `scored` next.
    let rt = current_thread_runtime();
    let bus = publisher(&rt, &url, 10);
    let depth = |q| rt.block_on(bus.depth(q)).expect("queue depth");
    let started = Instant::now();
    let waiting = loop {
        let (tasks, rollouts, scored) = (
            depth(Queue::Tasks),
            depth(Queue::Rollouts),
            depth(Queue::Scored),
        );
        if tasks == 0 && rollouts == 0 && scored > 0 {
            break scored;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the dead learner's tasks never came back scored: {tasks} tasks, {rollouts} \
             rollouts, {scored} scored results in JetStream"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    eprintln!("{waiting} scored results wait in JetStream");

    let (ok, all) = resume_the_learner_then_stop(&args, &url, survivors);
    eprintln!(
        "resumed learner ended, the other roles stopped, after {:?}",
        t0.elapsed()
    );
    assert!(
        ok,
        "resumed learner failed:\n{all}\n--- broker log\n{}",
        server.log_tail()
    );

    let log = run_log(&run);
    let at = resume_record(&log, &all);
    let from = log[at]["from_step"].as_u64().unwrap_or_else(|| {
        panic!(
            "--resume started a new run instead of resuming ({}):\n{all}",
            log[at]
        )
    });
    assert!(
        from >= last_logged,
        "resumed from the checkpoint of step {from}, but step {last_logged} was logged before \
         the kill:\n{all}"
    );
    let resumed = rl_steps(&log[at..]);
    let numbers: Vec<u64> = resumed.iter().filter_map(|s| s["step"].as_u64()).collect();
    // 4 XE steps, then 12 RL steps: the resumed learner runs exactly those after `from`.
    assert_eq!(numbers, (from + 1..=16).collect::<Vec<_>>(), "{all}");
    // Each task of each resumed step is used once: issued anew, or found in JetStream.
    for s in &resumed {
        assert_eq!(
            s["tasks_issued"].as_u64().unwrap_or(0) + s["results_found"].as_u64().unwrap_or(0),
            4,
            "step {s}:\n{all}"
        );
    }
    let (issued, found) = (
        sum(resumed.iter().copied(), "tasks_issued"),
        sum(resumed.iter().copied(), "results_found"),
    );
    assert!(
        found >= 1 && found <= waiting,
        "the resumed learner used {found} of the {waiting} scored results left in JetStream:\n{all}"
    );
    assert!(
        issued < fresh_issued,
        "the resumed learner issued {issued} tasks, a fresh run issues {fresh_issued}:\n{all}"
    );
    assert!(
        final_weights(&run) == final_weights(&reference),
        "resumed run differs from the uninterrupted one:\n{all}"
    );
}

/// Async mode, issuing two rounds ahead: a learner killed with -9 while tasks are in flight
/// and resumed loses no task and uses none twice. The step records that stand (a redone
/// step's record supersedes its earlier one) trained on exactly their round's task ids, and
/// the resumed learner saw its predecessor's in-flight results in JetStream (used, or dropped
/// as made by a policy past its checkpoint and decoded again).
#[test]
fn async_learner_killed_with_tasks_in_flight_resumes_with_every_task_used_once() {
    let _reaper = Reaper;
    let dir = tempfile::tempdir().unwrap();
    let data = synth(dir.path());
    let extra = [
        "runtime.mode=\"async\"",
        "runtime.max_policy_lag=2",
        "checkpoint.every_steps=1",
        "runtime.ack_wait_secs=10",
    ];
    let run = dir.path().join("run");
    let (server, args, survivors) = kill_the_learner_during_a_fresh_hold(&data, &run, &extra, 700);
    // The roles finish the dead learner's tasks; their results wait in JetStream.
    std::thread::sleep(Duration::from_secs(2));

    let (ok, all) = resume_the_learner_then_stop(&args, &server.url(), survivors);
    assert!(ok, "resumed learner failed:\n{all}");

    let log = run_log(&run);
    let at = resume_record(&log, &all);
    assert!(
        log[at]["from_step"].as_u64().is_some(),
        "started anew:\n{all}"
    );
    // The record of each step that stands: the last one written for its step number.
    let mut standing = std::collections::BTreeMap::new();
    for s in rl_steps(&log) {
        standing.insert(s["step"].as_u64().unwrap(), s);
    }
    // 4 XE steps, then 12 RL steps of 4 tasks; step n trained round n - 1: ids 4(n-1) ...
    assert_eq!(
        standing.keys().copied().collect::<Vec<_>>(),
        (5..=16).collect::<Vec<_>>()
    );
    for (&n, s) in &standing {
        let ids: Vec<u64> = s["task_ids"]
            .as_array()
            .unwrap_or_else(|| panic!("step {n} has no task_ids: {s}"))
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect();
        let round = n - 1;
        assert_eq!(
            ids,
            (4 * round..4 * round + 4).collect::<Vec<_>>(),
            "step {n}:\n{all}"
        );
        assert!(s["max_lag"].as_u64().unwrap_or(0) <= 2, "step {n}: {s}");
    }
    let resumed = rl_steps(&log[at..]);
    let seen = sum(resumed.iter().copied(), "results_found")
        + sum(resumed.iter().copied(), "dropped_stale");
    assert!(
        seen >= 1,
        "the resumed learner found none of its predecessor's in-flight results:\n{all}"
    );
}

#[test]
fn resume_with_no_checkpoint_says_it_starts_a_new_run() {
    let dir = tempfile::tempdir().unwrap();
    let data = synth(dir.path());
    let run = dir.path().join("run");
    let out = caprl()
        .arg("train")
        .args(sets(&data, &run, 1, &[]))
        .arg("--resume")
        .output()
        .expect("caprl runs");
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--resume found no checkpoint") && stderr.contains("starting a NEW run"),
        "no clear word that --resume started a new run:\n{all}"
    );
    let log = run_log(&run);
    let resumes: Vec<&Value> = log.iter().filter(|l| l["type"] == "resume").collect();
    assert_eq!(resumes.len(), 1, "{all}");
    assert!(
        resumes[0]["from_step"].is_null() && resumes[0]["checkpoint"].is_null(),
        "the resume record should name no checkpoint: {}",
        resumes[0]
    );
}
