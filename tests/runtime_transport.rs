//! Transport invariance: in sync mode with a fixed seed, the in-process bus
//! (`caprl train`) and NATS with two actors and two reward workers
//! (`caprl local`, which starts its own nats-server) give bit-identical weights, whether the
//! policy snapshots travel as files on the host (the default: in shared memory, removed when
//! the run ends) or through NATS's object store (one fetch per version into the host's cache).

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

    let expected = final_weights(&inproc);
    for transport in ["files", "nats"] {
        let run = dir.path().join(transport);
        let out = caprl()
            .args(["local", "--actors", "2", "--reward-workers", "2"])
            .args(["--snapshots", transport])
            .args(sets(&data, &run, 1, &[]))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "caprl local --snapshots {transport}: {}",
            text(&out)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.contains("[learner] scored rollouts used 16"),
            "{}",
            text(&out)
        );
        // The files transport says where the files went: shared memory, removed at the end, or
        // beside the run, where the newest versions stay. The object store writes none.
        let all = text(&out);
        let dir = all
            .lines()
            .find_map(|l| l.split("policy snapshots as files in ").nth(1))
            .map(|d| std::path::PathBuf::from(d.trim()));
        match (transport, dir) {
            // The two actors share one fetch of each version in the run's host cache.
            ("nats", None) => {
                assert!(!run.join("snapshots").exists());
                assert!(all.contains("one fetch per version into"), "{all}");
                let cached = std::fs::read_dir(run.join("snapshot-cache/default"))
                    .unwrap()
                    .flatten()
                    .filter(|e| e.file_name().to_string_lossy().ends_with(".snapshot"))
                    .count();
                assert!(cached > 0, "no version in the host's snapshot cache");
            }
            ("files", Some(dir)) if dir.starts_with("/dev/shm") => {
                assert!(!dir.exists(), "{} left behind", dir.display())
            }
            ("files", Some(dir)) => {
                assert_eq!(dir, run.join("snapshots"));
                let files = std::fs::read_dir(dir.join("default")).unwrap().count();
                assert!(files > 0, "no snapshot files beside the run");
            }
            (_, dir) => panic!("--snapshots {transport}: snapshot files in {dir:?}\n{all}"),
        }
        assert!(
            final_weights(&run) == expected,
            "weights differ between the in-process bus and NATS (--snapshots {transport})"
        );
    }
}

#[test]
fn local_without_nats_server_binary_names_the_package() {
    let dir = tempfile::tempdir().unwrap();
    // Real data, so that the only thing missing is the broker.
    let data = synth(dir.path());
    let out = caprl()
        .args(["local", "--actors", "1", "--reward-workers", "1"])
        .args(sets(&data, &dir.path().join("run"), 1, &[]))
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

#[test]
fn local_stops_every_role_on_ctrl_c_and_exits_non_zero() {
    let _reaper = support::Reaper;
    let dir = tempfile::tempdir().unwrap();
    let data = synth(dir.path());
    let run = dir.path().join("run");
    let child = caprl()
        .args(["local", "--actors", "1", "--reward-workers", "1"])
        .args(sets(&data, &run, 50, &[]))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while support::steps(&run, "rl").is_empty() {
        assert!(started.elapsed().as_secs() < 40, "RL never started");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // SAFETY: kill(2) on our own child, not yet reaped.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let stopping = std::time::Instant::now();
    let out = child.wait_with_output().unwrap();
    assert!(
        stopping.elapsed().as_secs() < 15,
        "took {:?} to stop",
        stopping.elapsed()
    );
    assert!(!out.status.success(), "{}", text(&out));
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(all.contains("interrupted"), "{all}");
    for role in ["[actor-0]", "[reward-worker-0]"] {
        assert!(
            all.lines()
                .any(|l| l.starts_with(role) && l.contains("stopped:")),
            "{role} did not stop cleanly:\n{all}"
        );
    }
}
