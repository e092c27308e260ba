//! A 3-node JetStream cluster on loopback, every stream, bucket and object store with 3
//! replicas (`nats.replicas = 3`), `caprl local` given all three URLs. Mid-run one server is
//! killed with SIGKILL, once a follower of the tasks stream and once its leader, and later
//! restarted on its port and store; the run finishes with exactly the weights of an
//! undisturbed run, every task used exactly once, and the restarted server catches up as a
//! replica. Losing two of three servers takes the quorum away: the run pauses and, once both
//! are back, finishes with the same weights.

#[path = "support/cluster.rs"]
mod cluster;
mod support;

use std::time::{Duration, Instant};

use cluster::NatsCluster;
use support::{final_weights, finish_within, reference_run, sets, spawn_group, steps, synth};

const TASKS_STREAM: &str = "caprl-default-tasks";

/// Which servers a test kills.
#[derive(Debug, Clone, Copy)]
enum Loss {
    /// One follower of the tasks stream.
    Follower,
    /// The tasks stream's leader.
    Leader,
    /// The leader and one follower: no quorum until one comes back.
    Two,
}

#[test]
fn a_run_survives_losing_a_follower_and_matches_an_undisturbed_one() {
    run_losing(Loss::Follower);
}

#[test]
fn a_run_survives_losing_the_stream_leader_and_matches_an_undisturbed_one() {
    run_losing(Loss::Leader);
}

#[test]
fn losing_two_of_three_servers_pauses_the_run_and_it_recovers_unchanged() {
    run_losing(Loss::Two);
}

fn run_losing(loss: Loss) {
    let _reaper = support::Reaper;
    let dir = tempfile::tempdir().unwrap();
    let data = synth(dir.path());
    let extra = ["runtime.ack_wait_secs=2"];
    let rl_epochs = 3;
    let reference = reference_run(&data, dir.path(), rl_epochs, &extra);
    let all_steps = steps(&reference, "rl").len();

    let mut cluster = NatsCluster::start(dir.path(), 3);
    let run = dir.path().join("run");
    let mut args = vec![
        "local".to_string(),
        "--actors".into(),
        "2".into(),
        "--reward-workers".into(),
        "2".into(),
        "--nats-url".into(),
        cluster.urls(),
    ];
    let mut keys = extra.to_vec();
    keys.push("nats.replicas=3");
    args.extend(sets(&data, &run, rl_epochs, &keys));
    let local = spawn_group(&args);

    let started = Instant::now();
    while steps(&run, "rl").len() < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "RL never got going; servers:\n{}",
            cluster.log_tails()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let placement = cluster
        .stream_placement(TASKS_STREAM)
        .unwrap_or_else(|| panic!("{TASKS_STREAM} has no leader:\n{}", cluster.log_tails()));
    assert_eq!(
        placement.followers.len(),
        2,
        "{TASKS_STREAM} is not replicated 3 times: {placement:?}"
    );
    let leader = cluster.index_of(&placement.leader);
    let follower = cluster.index_of(&placement.followers[0].0);
    let victims = match loss {
        Loss::Follower => vec![follower],
        Loss::Leader => vec![leader],
        Loss::Two => vec![leader, follower],
    };
    for &v in &victims {
        cluster.kill(v);
    }
    let during = steps(&run, "rl").len();
    // Longer than the bus's 10 s request timeout when the quorum is gone, so that every role
    // sees its operations fail and retries; a few seconds otherwise (a leader election).
    std::thread::sleep(match loss {
        Loss::Two => Duration::from_secs(12),
        _ => Duration::from_secs(4),
    });
    let at_restart = steps(&run, "rl").len();
    for &v in &victims {
        cluster.restart(v);
    }

    let (ok, out) = finish_within(local, Duration::from_secs(240));
    let context = format!("{out}\n--- servers\n{}", cluster.log_tails());
    assert!(
        ok,
        "caprl local failed after losing {victims:?}:\n{context}"
    );
    assert!(
        during < all_steps,
        "the servers went down only after the run ({during} of {all_steps} RL steps):\n{context}"
    );
    if let Loss::Two = loss {
        // Without a quorum nothing is stored: at most the step already in hand completes.
        assert!(
            at_restart <= during + 1,
            "the run went on without a quorum ({during} -> {at_restart} RL steps):\n{context}"
        );
        assert!(
            out.contains("broker unavailable"),
            "no role saw the cluster's outage:\n{context}"
        );
    }
    let tasks = all_steps * 4;
    assert!(
        out.contains(&format!("task ids used {tasks} ({tasks} distinct)")),
        "{context}"
    );
    assert!(
        final_weights(&run) == final_weights(&reference),
        "the run through losing {victims:?} differs from the undisturbed one:\n{context}"
    );

    // The restarted servers rejoin and catch up as replicas of the stream.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let placement = cluster.stream_placement(TASKS_STREAM);
        let caught_up = placement.as_ref().is_some_and(|p| {
            p.followers.len() == 2 && p.followers.iter().all(|(_, current)| *current)
        });
        if caught_up {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the restarted servers did not catch up: {placement:?}\n{}",
            cluster.log_tails()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
