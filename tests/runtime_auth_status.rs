//! A NATS server with user/password auth: the right credentials (password
//! from `CAPRL_NATS_PASSWORD`) reach the run and `caprl status` reports it;
//! a wrong password fails fast with a clear error instead of hanging; and the
//! password shows up in no log, output or file of a whole run.

mod support;

use std::time::{Duration, Instant};

use caprl_common::bus::{LocalNatsServer, LocalNatsServerOptions};
use support::{caprl, finish, sets, spawn, stop, synth, text};

#[test]
fn right_credentials_work_and_a_wrong_password_is_a_clear_error() {
    let _reaper = support::Reaper;
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("auth.conf");
    std::fs::write(
        &conf,
        "authorization { user: alice, password: \"s3cret\" }\n",
    )
    .unwrap();
    let server = LocalNatsServer::start(LocalNatsServerOptions {
        config_file: Some(conf),
        ..LocalNatsServerOptions::default()
    })
    .expect("nats-server");
    let url = server.url();

    let started = Instant::now();
    let out = caprl()
        .args(["status", "--nats-url", &url, "--set", "nats.user=\"alice\""])
        .env("CAPRL_NATS_PASSWORD", "wrong")
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "took {:?}",
        started.elapsed()
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rejected the credentials"), "{}", text(&out));

    // Right credentials: an actor and the learner (its password in its config, not the env)
    // join, and status sees them; then a reward worker joins and the run trains to the end. No
    // log line, output or run-dir file carries the password.
    let data = synth(dir.path());
    let mut args = sets(
        &data,
        &dir.path().join("run"),
        1,
        &["nats.user=\"alice\"", "runtime.run_id=\"authrun\""],
    );
    args.push("-q".into());
    std::env::set_var("CAPRL_NATS_PASSWORD", "s3cret");
    let actor = spawn(&args, &["actor", "--id", "a1"], &url);
    let mut learner_args = args.clone();
    learner_args.extend(["--set".into(), "nats.password=\"s3cret\"".into()]);
    let learner = {
        std::env::remove_var("CAPRL_NATS_PASSWORD");
        spawn(&learner_args, &["learner"], &url)
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        let out = caprl()
            .args([
                "status",
                "--nats-url",
                &url,
                "--run",
                "authrun",
                "--set",
                "nats.user=\"alice\"",
            ])
            .env("CAPRL_NATS_PASSWORD", "s3cret")
            .output()
            .unwrap();
        let s = String::from_utf8_lossy(&out.stdout).to_string();
        if s.contains("live actors: 1") || Instant::now() > deadline {
            break format!("{s}{}", String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        status.contains("live actors: 1") && status.contains("  a1 "),
        "{status}"
    );
    assert!(
        status.contains("run authrun") && status.contains("tasks"),
        "{status}"
    );
    let worker = {
        std::env::set_var("CAPRL_NATS_PASSWORD", "s3cret");
        spawn(&args, &["reward-worker", "--id", "w1"], &url)
    };
    std::env::remove_var("CAPRL_NATS_PASSWORD");
    let (ok, learner_out) = finish(learner);
    let (_, actor_out) = stop(actor);
    let (_, worker_out) = stop(worker);
    assert!(ok, "learner failed:\n{learner_out}");
    let mut leaks = Vec::new();
    for (name, text) in [
        ("learner", &learner_out),
        ("actor", &actor_out),
        ("worker", &worker_out),
        ("status", &status),
        ("wrong-password error", &err.to_string()),
    ] {
        if text.contains("s3cret") {
            leaks.push(name.to_string());
        }
    }
    let run_dir = dir.path().join("run");
    let files = walk(&run_dir);
    assert!(
        files.iter().any(|f| f.ends_with("config.toml")),
        "the run wrote no checkpoint: {files:?}\n{learner_out}"
    );
    for file in files {
        let bytes = std::fs::read(&file).unwrap();
        if bytes.windows(6).any(|w| w == b"s3cret") {
            leaks.push(file.display().to_string());
        }
    }
    assert!(leaks.is_empty(), "the password leaks into {leaks:?}");
}

/// Every file under `dir`, recursively.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}
