//! Transport invariance: in sync mode with a fixed seed, the in-process bus
//! (`caprl train`) and NATS with two actors and two reward workers
//! (`caprl local`, which starts its own nats-server) give bit-identical weights.

mod support;

use support::{caprl, final_weights, sets, synth, text};

#[test]
fn in_process_and_nats_with_two_actors_and_two_workers_give_identical_weights() {
    let dir = tempfile::tempdir().unwrap();
    let data = synth(dir.path());
    let inproc = dir.path().join("inproc");
    let out = caprl()
        .arg("train")
        .args(sets(&data, &inproc, 1, &[]))
        .arg("-q")
        .output()
        .unwrap();
    assert!(out.status.success(), "caprl train: {}", text(&out));

    let nats = dir.path().join("nats");
    let out = caprl()
        .args(["local", "--actors", "2", "--reward-workers", "2"])
        .args(sets(&data, &nats, 1, &[]))
        .output()
        .unwrap();
    assert!(out.status.success(), "caprl local: {}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("[learner] scored rollouts used 16"),
        "{}",
        text(&out)
    );

    let (a, b) = (final_weights(&inproc), final_weights(&nats));
    assert!(a == b, "weights differ between the in-process bus and NATS");
}

#[test]
fn local_without_nats_server_binary_names_the_package() {
    let dir = tempfile::tempdir().unwrap();
    let out = caprl()
        .args(["local", "--actors", "1", "--reward-workers", "1"])
        .args(sets(
            &dir.path().join("data"),
            &dir.path().join("run"),
            1,
            &[],
        ))
        .env("PATH", dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("nats-server") && err.contains("apt-get install"),
        "{}",
        text(&out)
    );
}
