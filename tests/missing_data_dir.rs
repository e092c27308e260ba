//! A `data.dir` that does not exist — a mistyped path, an unmounted volume — is a clear error
//! from every command that would train on it (`train`, `run`, `local`, `learner`): the message
//! names the path and how to fix it, and nothing is generated there. Only the default
//! `data/synth` is generated on first use.

mod support;

use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use caprl_common::bus::{LocalNatsServer, LocalNatsServerOptions};
use support::{caprl, sets};

/// A refusal comes before any work; a command still running after this is generating data or
/// training where it should have refused.
const REFUSE_WITHIN: Duration = Duration::from_secs(60);

/// Runs `cmd` with its output in a temp file, killing it after [`REFUSE_WITHIN`] (then the status
/// is `None`).
fn run_bounded(mut cmd: Command) -> (Option<ExitStatus>, String) {
    let log = tempfile::NamedTempFile::new().unwrap();
    let out = log.reopen().unwrap();
    let mut child = cmd
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .expect("caprl starts");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > REFUSE_WITHIN {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let text = String::from_utf8_lossy(&std::fs::read(log.path()).unwrap()).into_owned();
    (status, text)
}

/// `caprl <sub>` with the tiny config and a `data.dir` that does not exist must fail at once,
/// name the directory, and leave it uncreated.
fn assert_refused(sub: &[&str], extra: &[String]) {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("no-such-data");
    let mut cmd = caprl();
    cmd.args(sub)
        .args(sets(&missing, &tmp.path().join("run"), 1, &[]))
        .args(extra)
        .current_dir(tmp.path());
    let (status, out) = run_bounded(cmd);
    let cmd = format!("caprl {}", sub.join(" "));
    let status = status.unwrap_or_else(|| {
        panic!("{cmd} with a missing data.dir still ran after {REFUSE_WITHIN:?}:\n{out}")
    });
    assert!(
        !status.success(),
        "{cmd} with a missing data.dir succeeded:\n{out}"
    );
    assert!(
        out.contains(&format!("data.dir {} does not exist", missing.display()))
            && out.contains("caprl data synth --out"),
        "{cmd}: the error does not name the missing data.dir and the fix:\n{out}"
    );
    assert!(
        !missing.exists(),
        "{cmd} created {} (generated data in a mistyped path)",
        missing.display()
    );
    // Nor the default location, relative to the working directory.
    assert!(
        !tmp.path().join("data").exists(),
        "{cmd} generated data/synth"
    );
}

#[test]
fn train_refuses_a_missing_data_dir() {
    assert_refused(&["train", "--objective", "xe"], &[]);
}

#[test]
fn run_refuses_a_missing_data_dir() {
    assert_refused(&["run"], &[]);
}

#[test]
fn local_refuses_a_missing_data_dir() {
    assert_refused(&["local", "--actors", "1", "--reward-workers", "1"], &[]);
}

#[test]
fn learner_refuses_a_missing_data_dir() {
    let server = LocalNatsServer::start(LocalNatsServerOptions::default()).expect("nats-server");
    assert_refused(&["learner"], &["--nats-url".into(), server.url()]);
}
