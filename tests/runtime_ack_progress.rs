//! No live task runs twice: an actor whose decode outlasts `ack_wait` (here 2 s against 5 s of
//! work per task) keeps extending its delivery, so its task is not handed to a second actor;
//! an actor killed (-9) in the middle of such a task stops extending it, and that task alone is
//! redelivered, once, and used once. The run ends with the undisturbed run's weights.

mod support;

use std::time::{Duration, Instant};

use caprl_common::bus::{LocalNatsServer, LocalNatsServerOptions};
use support::{final_weights, finish, reference_run, sets, spawn, steps, stop, synth, Reaper};

#[test]
fn slow_tasks_are_not_run_twice_and_a_killed_workers_task_is_run_once_more() {
    let _reaper = Reaper;
    let dir = tempfile::tempdir().unwrap();
    let data = synth(dir.path());
    // 4 XE steps, then 2 RL steps of 4 tasks.
    let extra = ["runtime.ack_wait_secs=2", "train.max_steps=6"];
    let reference = reference_run(&data, dir.path(), 1, &extra);

    let run = dir.path().join("run");
    let server = LocalNatsServer::start(LocalNatsServerOptions::default()).expect("nats-server");
    let url = server.url();
    let args = sets(&data, &run, 1, &extra);
    let slow = spawn(
        &args,
        &["actor", "--id", "slow", "--delay-ms", "5000"],
        &url,
    );
    let victim = spawn(
        &args,
        &["actor", "--id", "victim", "--delay-ms", "5000"],
        &url,
    );
    let fast = spawn(&args, &["actor", "--id", "fast"], &url);
    let worker = spawn(&args, &["reward-worker", "--id", "rw"], &url);
    let learner = spawn(&args, &["learner"], &url);

    // Kill the victim 3 s into a task it holds: past ack_wait, so without the extensions the
    // task would have been handed out again already.
    let started = Instant::now();
    let (mut holds, mut since) = (0, None::<Instant>);
    let held = loop {
        let out = support::output_of(&victim);
        let now = support::task_ids(&out, " for 5000 ms");
        if now.len() > holds {
            (holds, since) = (now.len(), Some(Instant::now()));
        }
        if since.is_some_and(|at| at.elapsed() >= Duration::from_secs(3)) {
            break now.last().cloned().expect("a held task");
        }
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "the victim never held a task:\n{out}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    support::kill9(victim);

    let (ok, learner_out) = finish(learner);
    let (ok_s, slow_out) = stop(slow);
    let (ok_f, fast_out) = stop(fast);
    let (ok_w, worker_out) = stop(worker);
    let all = format!(
        "--- learner\n{learner_out}\n--- slow\n{slow_out}\n--- fast\n{fast_out}\n--- worker\n\
         {worker_out}"
    );
    assert!(ok && ok_s && ok_f && ok_w, "a role failed:\n{all}");

    // The slow actor held tasks past ack_wait and none of them came back to anyone; the one
    // the victim died holding came back exactly once.
    let redelivered: Vec<String> = [&slow_out, &fast_out]
        .iter()
        .flat_map(|out| support::task_ids(out, " redelivered"))
        .collect();
    assert_eq!(redelivered, vec![held.clone()], "{all}");
    assert!(
        !support::task_ids(&slow_out, " for 5000 ms").is_empty(),
        "the slow actor never held a task:\n{all}"
    );
    let rl = steps(&run, "rl");
    assert_eq!(rl.len(), 2, "{all}");
    let mut used: Vec<u64> = rl
        .iter()
        .flat_map(|s| s["task_ids"].as_array().cloned().unwrap_or_default())
        .filter_map(|v| v.as_u64())
        .collect();
    let n = used.len();
    used.sort_unstable();
    used.dedup();
    assert_eq!(used.len(), n, "a task was used twice:\n{all}");
    let duplicates: u64 = rl.iter().filter_map(|s| s["duplicates"].as_u64()).sum();
    assert_eq!(duplicates, 0, "{all}");
    assert!(
        final_weights(&run) == final_weights(&reference),
        "the run differs from the undisturbed one:\n{all}"
    );
    drop(server);
}
