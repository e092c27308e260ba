//! `caprl bench scale` at a tiny size: a row per actor count with positive figures, the output
//! saying that decode and update are simulated, and bad flags refused with a clear error
//! (figures only; speed is not asserted).

mod support;

use support::{caprl, text};

#[test]
fn bench_scale_prints_a_row_per_actor_count_and_says_it_is_simulated() {
    let out = caprl()
        .args([
            "bench",
            "scale",
            "--actors",
            "1,3",
            "--steps",
            "2",
            "--token-ms",
            "0.05",
            "--update-ms",
            "20",
            "--batch",
            "8",
            "--images-per-task",
            "2",
            "--reward-workers",
            "1",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("SIMULATED decode") && stdout.contains("SIMULATED update"),
        "{stdout}"
    );
    let rows: Vec<Vec<f64>> = stdout
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| actors"))
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().trim_end_matches('%').parse::<f64>().expect(l))
                .collect()
        })
        .collect();
    assert_eq!(rows.len(), 2, "{stdout}");
    assert_eq!((rows[0][0], rows[1][0]), (1.0, 3.0), "{stdout}");
    for r in &rows {
        // images/s, ideal, of ideal, of linear, NATS msgs/s and MB/s, MB per version and per
        // reader's share of a snapshot.
        assert_eq!(r.len(), 10, "{stdout}");
        assert!(r[1..9].iter().all(|x| *x > 0.0), "{stdout}");
    }
}

#[test]
fn bench_scale_refuses_zero_actors_a_bad_token_cost_and_hosts_without_the_object_store() {
    for (flag, says) in [
        ("--actors=0,2", "--actors takes counts >= 1"),
        ("--token-ms=-1", "--token-ms must be a number > 0"),
        ("--actors-per-host=2", "use it with --snapshots nats"),
    ] {
        let out = caprl()
            .args(["bench", "scale", "--snapshots", "files", flag])
            .output()
            .unwrap();
        assert!(!out.status.success());
        assert!(text(&out).contains(says), "{flag}: {}", text(&out));
    }
}

/// `caprl bench broadcast` at the synthetic shape: a row per reader count and version, the first
/// version stored whole, and readers that share a host's cache taking one copy through NATS
/// where readers of their own take one each (figures only; speed is not asserted).
#[test]
fn bench_broadcast_sends_one_copy_per_host_with_a_shared_cache() {
    let run = |per_host: &str| -> serde_json::Value {
        let out = caprl()
            .args(["bench", "broadcast", "--shape", "synth", "--versions", "2"])
            .args(["--readers", "3", "--readers-per-host", per_host, "--json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        serde_json::from_slice(&out.stdout).expect("JSON")
    };
    let (shared, own) = (run("3"), run("0"));
    let snapshot = shared["snapshot_bytes"].as_f64().unwrap();
    assert!(snapshot > 0.0);
    for report in [&shared, &own] {
        let rows = report["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 2, "{report}");
        assert_eq!(rows[0]["delta"], false, "{report}");
        assert!(rows
            .iter()
            .all(|r| r["last_reader_ms"].as_f64().unwrap() > 0.0));
    }
    // Version 1 is whole: one copy for the host, three for three readers of their own.
    let out = |r: &serde_json::Value| r["rows"][0]["out_bytes"].as_f64().unwrap();
    assert!(out(&shared) < 1.5 * snapshot, "{shared}");
    assert!(out(&own) > 2.5 * snapshot, "{own}");
}
