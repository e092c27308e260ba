//! An actor on the CPU computes in f32 when the run's `dtype` is bf16 (chosen for the learner's
//! GPU), and says so; `caprl actor --dtype bf16` makes it follow the run. The line is logged
//! while the actor is set up, before it connects, so a NATS URL nobody listens on ends each run.

mod support;

use support::{caprl, synth, text};

/// `caprl actor` with the run's dtype bf16, `extra` arguments and a NATS URL that refuses.
fn actor(data: &std::path::Path, extra: &[&str]) -> std::process::Output {
    caprl()
        .args(["actor", "--nats-url", "nats://127.0.0.1:1"])
        .args([
            "--set",
            &format!("data.dir={:?}", data.display().to_string()),
        ])
        .args([
            "--set",
            "dtype=\"bf16\"",
            "--set",
            "nats.connect_timeout_secs=1",
        ])
        .args(extra)
        .env_remove("RUST_LOG")
        .output()
        .expect("caprl runs")
}

#[test]
fn a_cpu_actor_computes_in_f32_unless_told_the_runs_dtype() {
    let dir = tempfile::tempdir().unwrap();
    let data = synth(dir.path());

    let out = actor(&data, &[]);
    assert!(!out.status.success(), "no NATS server: {}", text(&out));
    let log = text(&out);
    assert!(
        log.contains("computes in f32, not the run's dtype BF16"),
        "{log}"
    );
    assert!(
        log.contains("connecting to NATS"),
        "it went on to connect: {log}"
    );

    let out = actor(&data, &["--dtype", "bf16"]);
    let log = text(&out);
    assert!(log.contains("connecting to NATS"), "{log}");
    assert!(
        !log.contains("computes in f32"),
        "told bf16, it still fell back: {log}"
    );
}
