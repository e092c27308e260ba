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
fn bench_scale_refuses_zero_actors_and_a_bad_token_cost() {
    for (flag, says) in [
        ("--actors=0,2", "--actors takes counts >= 1"),
        ("--token-ms=-1", "--token-ms must be a number > 0"),
    ] {
        let out = caprl().args(["bench", "scale", flag]).output().unwrap();
        assert!(!out.status.success());
        assert!(text(&out).contains(says), "{flag}: {}", text(&out));
    }
}
