//! `caprl local` keeps its roles running: an actor and a reward worker are killed with -9
//! mid-run (the learner held meanwhile), then the learner; each is restarted (the learner with
//! `--resume`), the command exits 0, its log says what died and what was restarted, and the
//! weights equal an undisturbed run's. A role that keeps dying right after each start (a GPU
//! that is not there) makes it give up with that role's name and last lines; a password the NATS
//! server refuses fails the command at once, before any role starts.

mod support;

use std::time::{Duration, Instant};

use caprl_common::bus::{LocalNatsServer, LocalNatsServerOptions};
use support::{
    final_weights, finish_within, output_of, reference_run, sets, spawn_group, steps, synth, Reaper,
};

/// The pid `caprl local` last logged for `role` ("<role> started (pid N)").
fn pid_of(log: &str, role: &str) -> Option<u32> {
    let mark = format!("{role} started (pid ");
    let at = log.rfind(&mark)? + mark.len();
    log[at..].split(')').next()?.parse().ok()
}

fn signal(pid: u32, signal: i32) {
    // SAFETY: kill(2) on a role process of the `caprl local` this test started.
    unsafe {
        libc::kill(pid as i32, signal);
    }
}

#[test]
fn caprl_local_restarts_killed_roles_and_ends_with_the_undisturbed_weights() {
    let _reaper = Reaper;
    let dir = tempfile::tempdir().unwrap();
    let data = synth(dir.path());
    let extra = ["checkpoint.every_steps=1", "runtime.ack_wait_secs=3"];
    let reference = reference_run(&data, dir.path(), 6, &extra);

    let run = dir.path().join("run");
    let mut args = vec!["local".to_string()];
    args.extend(sets(&data, &run, 6, &extra));
    let local = spawn_group(&args);
    let wait_for = |what: &str, done: &dyn Fn() -> bool| {
        let started = Instant::now();
        while !done() {
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "waited 120 s for {what}:\n{}",
                output_of(&local)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    wait_for("RL step 1", &|| !steps(&run, "rl").is_empty());
    // The learner held (SIGSTOP) while the others are killed and come back: a tiny run could
    // otherwise finish before their restart.
    let log = output_of(&local);
    let learner = pid_of(&log, "learner").expect("the learner's pid");
    signal(learner, libc::SIGSTOP);
    let (actor, worker) = (pid_of(&log, "actor-0"), pid_of(&log, "reward-worker-1"));
    signal(actor.expect("actor-0's pid in the log"), libc::SIGKILL);
    signal(
        worker.expect("reward-worker-1's pid in the log"),
        libc::SIGKILL,
    );
    for (role, old) in [("actor-0", actor), ("reward-worker-1", worker)] {
        wait_for(&format!("{role} back"), &|| {
            pid_of(&output_of(&local), role).is_some_and(|p| Some(p) != old)
        });
    }
    // Killed while stopped, mid-run: restarted with --resume, it finishes the run.
    signal(learner, libc::SIGKILL);

    let (ok, out) = finish_within(local, Duration::from_secs(300));
    assert!(ok, "caprl local failed:\n{out}");
    for line in [
        "actor-0 died (signal: 9 (SIGKILL))",
        "reward-worker-1 died (signal: 9 (SIGKILL))",
        "learner died (signal: 9 (SIGKILL))",
        "restarting actor-0 (restart 1)",
        "restarting reward-worker-1 (restart 1)",
        "restarting learner (restart 1, with --resume)",
        "roles restarted during the run: learner 1×, actor-0 1×, reward-worker-1 1×",
    ] {
        assert!(out.contains(line), "the log does not say {line:?}:\n{out}");
    }
    let resumed = std::fs::read_to_string(run.join("run.jsonl")).unwrap();
    assert!(resumed.contains("\"type\":\"resume\""), "{resumed}");
    assert!(
        final_weights(&run) == final_weights(&reference),
        "the supervised run differs from the undisturbed one:\n{out}"
    );
}

#[test]
fn caprl_local_gives_up_on_a_role_that_keeps_failing_and_shows_its_last_lines() {
    let _reaper = Reaper;
    let dir = tempfile::tempdir().unwrap();
    let data = synth(dir.path());
    let server = LocalNatsServer::start(LocalNatsServerOptions::default()).expect("nats-server");
    // The bus is fine (`caprl local` checks it before it starts any role); the learner and the
    // actor then fail at once on a GPU that no machine has.
    let mut args = vec!["local".to_string(), "--nats-url".into(), server.url()];
    args.extend(sets(
        &data,
        &dir.path().join("run"),
        1,
        &["device=\"cuda:99\""],
    ));
    let started = Instant::now();
    let (ok, out) = finish_within(spawn_group(&args), Duration::from_secs(150));
    assert!(!ok, "caprl local succeeded on device cuda:99:\n{out}");
    assert!(
        out.contains("keeps failing: it exited with exit status: 1 6 times in a row"),
        "{out}"
    );
    let tail = &out[out.find("keeps failing").unwrap()..];
    assert!(
        tail.contains("Its last lines:") && tail.contains("cuda:99"),
        "the last lines of the failing role are missing:\n{out}"
    );
    eprintln!("gave up after {:?}", started.elapsed());
}

#[test]
fn caprl_local_with_a_password_the_server_refuses_exits_before_starting_any_role() {
    let _reaper = Reaper;
    let dir = tempfile::tempdir().unwrap();
    let data = synth(dir.path());
    let auth = dir.path().join("auth.conf");
    std::fs::write(
        &auth,
        "authorization { user: caprl, password: right-one }\n",
    )
    .unwrap();
    let server = LocalNatsServer::start(LocalNatsServerOptions {
        config_file: Some(auth),
        ..LocalNatsServerOptions::default()
    })
    .expect("nats-server");
    let run = dir.path().join("run");
    let mut args = vec![
        "local".to_string(),
        "--nats-url".into(),
        server.url(),
        "--set".into(),
        "nats.user=\"caprl\"".into(),
        "--set".into(),
        "nats.password=\"not-the-password\"".into(),
    ];
    args.extend(sets(&data, &run, 1, &[]));
    let started = Instant::now();
    let (ok, out) = finish_within(spawn_group(&args), Duration::from_secs(60));
    let took = started.elapsed();
    assert!(!ok, "caprl local succeeded with a wrong password:\n{out}");
    assert!(took < Duration::from_secs(15), "took {took:?}:\n{out}");
    assert!(
        out.contains("connecting to NATS") && out.contains("rejected the credentials"),
        "{out}"
    );
    assert!(!out.contains("started (pid"), "roles were started:\n{out}");
    assert!(!run.exists(), "the run directory was made:\n{out}");
    assert!(
        !out.contains("not-the-password"),
        "the password reached the log:\n{out}"
    );
}
