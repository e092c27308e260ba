//! A run whose roles cannot work together stops and says why instead of waiting forever: a
//! reward worker or an actor started on another data set is named by the learner, which stops
//! with exit code 3 (the code `caprl local` gives a run up on), as it does on rollouts a reward
//! worker scored with another reward spec (one without the run's `py:` reward, say) within a
//! minute; a second learner for a run id whose learner is alive is refused at start; `caprl
//! status` of a run nobody created says so and creates nothing.

mod support;

use std::time::{Duration, Instant};

use caprl_common::bus::{BusError, BusOptions, NatsBus, NatsConfig};
use support::{
    caprl, finish_within, output_of, sets, spawn, start_broker, stop, synth_seeded, text, Reaper,
};

/// Runs a learner and an actor on data set A and a reward worker on B (`wrong_worker`), or the
/// other way round; returns the learner's exit code and output, and the wrong role's output.
fn run_with_one_role_on_another_data_set(
    run_id: &str,
    wrong_worker: bool,
) -> (Option<i32>, String, String) {
    let _reaper = Reaper;
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (
        synth_seeded(dir.path(), "a", 1),
        synth_seeded(dir.path(), "b", 2),
    );
    let run = dir.path().join("run");
    let (_server, url) = start_broker();
    let extra = [
        "runtime.ack_wait_secs=5".to_string(),
        format!("runtime.run_id={run_id:?}"),
    ];
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let on_a = sets(&a, &run, 1, &extra);
    let on_b = sets(&b, &dir.path().join("run-b"), 1, &extra);
    let (actor_args, worker_args) = match wrong_worker {
        true => (&on_a, &on_b),
        false => (&on_b, &on_a),
    };
    let actor = spawn(actor_args, &["actor", "--id", "a1"], &url);
    let worker = spawn(worker_args, &["reward-worker", "--id", "w1"], &url);
    let mut learner = spawn(&on_a, &["learner"], &url);
    let started = Instant::now();
    let status = loop {
        if let Some(status) = learner.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(150),
            "the learner still waits after {:?}:\n{}",
            started.elapsed(),
            output_of(&learner)
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let learner_out = output_of(&learner);
    let (_, actor_out) = stop(actor);
    let (_, worker_out) = stop(worker);
    let wrong_out = if wrong_worker { worker_out } else { actor_out };
    (status.code(), learner_out, wrong_out)
}

#[test]
fn a_reward_worker_on_another_data_set_stops_the_run_with_both_fingerprints() {
    let (code, learner, worker) = run_with_one_role_on_another_data_set("wrongworker", true);
    assert_eq!(code, Some(3), "{learner}");
    // The worker's own words once it has refused a rollout, or the learner's reading of its
    // heartbeat before that.
    assert!(
        learner.contains("the run cannot go on")
            && learner.contains("no reward worker can take the work: reward worker w1: ")
            && (learner.contains("refusing the run's rollouts")
                || learner.contains("it opened another data set")),
        "{learner}"
    );
    assert!(
        worker.contains("refusing the run's rollouts: they are for data set"),
        "{worker}"
    );
    // Both fingerprints are in the learner's message: the run's and the worker's.
    let fingerprints = learner
        .split(|c: char| !c.is_ascii_hexdigit())
        .filter(|w| w.len() == 16)
        .collect::<std::collections::BTreeSet<_>>();
    assert!(fingerprints.len() >= 2, "{learner}");
}

#[test]
fn an_actor_on_another_data_set_stops_the_run_and_says_why() {
    let (code, learner, actor) = run_with_one_role_on_another_data_set("wrongactor", false);
    assert_eq!(code, Some(3), "{learner}");
    assert!(
        learner.contains("the run cannot go on") && learner.contains("no actor can take the work"),
        "{learner}"
    );
    // Its vocabulary may be the run's (the snapshot loads and the tasks are refused) or not
    // (the snapshot is refused): either way the actor says what it refuses.
    assert!(
        actor.contains("refusing the run's tasks")
            || actor.contains("refusing the learner's policy snapshot"),
        "{actor}"
    );
}

#[test]
fn a_second_learner_for_a_live_run_is_refused_and_the_first_goes_on() {
    let _reaper = Reaper;
    let dir = tempfile::tempdir().unwrap();
    let data = support::synth(dir.path());
    let (_server, url) = start_broker();
    let run_id = "runtime.run_id=\"twolearners\"";
    let first_args = sets(&data, &dir.path().join("first"), 1, &[run_id]);
    // No actor: the first learner trains XE, then waits for rollouts.
    let mut first = spawn(&first_args, &["learner"], &url);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = caprl()
            .args(["status", "--nats-url", &url, "--run", "twolearners"])
            .output()
            .unwrap();
        if String::from_utf8_lossy(&out.stdout).contains("live learners: 1") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{}\n{}",
            text(&out),
            output_of(&first)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let second_args = sets(&data, &dir.path().join("second"), 1, &[run_id]);
    let second = spawn(&second_args, &["learner"], &url);
    let (ok, out) = finish_within(second, Duration::from_secs(60));
    assert!(!ok, "{out}");
    assert!(
        out.contains("run twolearners already has a live learner")
            && out.contains("runtime.run_id"),
        "{out}"
    );
    assert!(first.try_wait().unwrap().is_none(), "{}", output_of(&first));
    assert!(
        !dir.path().join("second").join("run.jsonl").exists(),
        "the refused learner trained"
    );
    let _ = first.kill();
}

#[test]
fn status_of_a_run_nobody_created_says_so_and_creates_nothing() {
    let (_server, url) = start_broker();
    for _ in 0..2 {
        let out = caprl()
            .args(["status", "--nats-url", &url, "--run", "nosuchrun"])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("no run `nosuchrun`") && err.contains("--run"),
            "{err}"
        );
    }
    let rt = support::current_thread_runtime();
    let opened = rt.block_on(NatsBus::open_existing(
        &NatsConfig::to_url(&url),
        &BusOptions::for_run("nosuchrun"),
    ));
    assert!(
        matches!(opened, Err(BusError::NoSuchRun { .. })),
        "status created the run: {:?}",
        opened.err()
    );
}

#[test]
fn rollouts_scored_with_another_reward_spec_stop_the_run_naming_both() {
    let _reaper = Reaper;
    let dir = tempfile::tempdir().unwrap();
    let data = support::synth(dir.path());
    let run = dir.path().join("run");
    let (_server, url) = start_broker();
    let base = ["runtime.ack_wait_secs=5", "runtime.run_id=\"otherspec\""];
    let with = |spec: &str| {
        let mut extra = base.to_vec();
        extra.push(spec);
        sets(&data, &run, 1, &extra)
    };
    let learner_args = with("reward.spec=\"cider=1,bleu4=0.5\"");
    let worker_args = with("reward.spec=\"cider=1\"");
    let actor = spawn(&learner_args, &["actor", "--id", "a1"], &url);
    let worker = spawn(&worker_args, &["reward-worker", "--id", "w1"], &url);
    let learner = spawn(&learner_args, &["learner"], &url);
    let (ok, out) = finish_within(learner, Duration::from_secs(150));
    let (_, _) = stop(actor);
    let (_, _) = stop(worker);
    assert!(!ok, "the learner trained on another spec's rewards:\n{out}");
    assert!(
        out.contains("the run cannot go on")
            && out.contains("was scored with the rewards [cider]")
            && out.contains("this run's reward.spec has [bleu4, cider]"),
        "{out}"
    );
}

/// A run whose `reward.spec` has a `py:` term that no reward worker serves (the only worker was
/// started without it) stops on the first rollout that comes back, within a minute of starting
/// RL instead of waiting for ever, and names the term.
#[test]
fn a_python_reward_no_worker_serves_stops_the_run_within_a_minute() {
    let _reaper = Reaper;
    let dir = tempfile::tempdir().unwrap();
    let data = support::synth(dir.path());
    let run = dir.path().join("run");
    let module = dir.path().join("my_rewards.py");
    std::fs::write(
        &module,
        "def length(batch):\n    return [0.0] * len(batch)\n",
    )
    .unwrap();
    let python = format!("reward.python={:?}", module.display().to_string());
    let (_server, url) = start_broker();
    let base = [
        "runtime.ack_wait_secs=5",
        "runtime.run_id=\"unserved\"",
        "train.xe_epochs=0",
    ];
    let with = |keys: &[&str]| {
        let mut extra = base.to_vec();
        extra.extend(keys);
        sets(&data, &run, 1, &extra)
    };
    let learner_args = with(&["reward.spec=\"cider=1,py:length=0.5\"", &python]);
    let worker_args = with(&["reward.spec=\"cider=1\""]);
    let actor = spawn(&learner_args, &["actor", "--id", "a1"], &url);
    let worker = spawn(&worker_args, &["reward-worker", "--id", "w1"], &url);
    let learner = spawn(&learner_args, &["learner"], &url);
    let (ok, out) = finish_within(learner, Duration::from_secs(60));
    let (_, _) = stop(actor);
    let (_, _) = stop(worker);
    assert!(!ok, "the learner trained without its Python reward:\n{out}");
    assert!(
        out.contains("the run cannot go on")
            && out.contains("was scored with the rewards [cider]")
            && out.contains("py:length"),
        "{out}"
    );
}
