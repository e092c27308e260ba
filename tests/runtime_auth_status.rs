//! A NATS server with user/password auth: the right credentials (password
//! from `CAPRL_NATS_PASSWORD`) reach the run and `caprl status` reports it;
//! a wrong password fails fast with a clear error instead of hanging.

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

    // Right credentials: an actor joins and status sees it.
    let data = synth(dir.path());
    let mut args = sets(
        &data,
        &dir.path().join("run"),
        1,
        &["nats.user=\"alice\"", "runtime.run_id=\"authrun\""],
    );
    args.push("-q".into());
    let actor = {
        std::env::set_var("CAPRL_NATS_PASSWORD", "s3cret");
        spawn(&args, &["actor", "--id", "a1"], &url)
    };
    let deadline = Instant::now() + Duration::from_secs(20);
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
        assert!(out.status.success(), "{}", text(&out));
        let s = String::from_utf8_lossy(&out.stdout).to_string();
        if s.contains("live actors: 1") || Instant::now() > deadline {
            break s;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let (_, actor_out) = stop(actor);
    assert!(
        status.contains("live actors: 1") && status.contains("  a1 "),
        "{status}\n{actor_out}"
    );
    assert!(
        status.contains("run authrun") && status.contains("tasks"),
        "{status}"
    );
    let _ = finish;
}
