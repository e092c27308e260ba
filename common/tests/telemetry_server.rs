//! The metrics endpoint, scraped over real HTTP.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use caprl_common::telemetry::metrics as caprl_metrics;
use caprl_common::telemetry::names;
use caprl_common::telemetry::{serve, Readiness, StepRecord};

fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).expect("connect to the metrics endpoint");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("set timeout");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nUser-Agent: test\r\n\r\n"
    )
    .expect("send request");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read response");
    let (head, body) = response
        .split_once("\r\n\r\n")
        .expect("response has a head");
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status code");
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .and_then(|l| l.trim().parse().ok())
        .expect("content length");
    assert_eq!(length, body.len(), "Content-Length matches the body");
    (status, body.to_owned())
}

/// Value of the unlabelled sample `name` in a Prometheus text exposition.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (name, value) = l.rsplit_once(' ')?;
        (name == series).then(|| value.parse().ok())?
    })
}

#[test]
fn metrics_endpoint_serves_recorded_metrics_over_http() {
    let server = serve("127.0.0.1:0".parse().expect("addr"), Readiness::new()).expect("serve");
    let addr = server.local_addr();

    caprl_metrics::count_rollout(10);
    let (status, before) = get(addr, "/metrics");
    assert_eq!(status, 200);
    let rollouts_before =
        sample(&before, names::ROLLOUTS_TOTAL).expect("rollouts counter exported");
    let tokens_before = sample(&before, names::TOKENS_TOTAL).expect("tokens counter exported");

    caprl_metrics::count_rollout(12);
    caprl_metrics::count_rollout(8);
    caprl_metrics::observe_reward_latency(Duration::from_millis(30));
    caprl_metrics::observe_policy_lag(2);
    caprl_metrics::observe_reward("cider", 0.9);
    caprl_metrics::count_rejected("bad_magic");
    caprl_metrics::set_queue_depth("tasks", 17);
    caprl_metrics::record_step(&StepRecord {
        step: 3,
        policy_version: 3,
        losses: [("total".to_string(), 0.5)].into(),
        rewards: [("cider".to_string(), 0.8)].into(),
        grad_norm: 1.5,
        lr: 1e-4,
        seconds: 0.2,
        ..StepRecord::default()
    });

    let (status, after) = get(addr, "/metrics");
    assert_eq!(status, 200);
    assert_eq!(
        sample(&after, names::ROLLOUTS_TOTAL),
        Some(rollouts_before + 2.0)
    );
    assert_eq!(
        sample(&after, names::TOKENS_TOTAL),
        Some(tokens_before + 20.0)
    );
    assert_eq!(sample(&after, names::GRAD_NORM), Some(1.5));
    assert!(sample(&after, names::LEARNER_STEPS_TOTAL).is_some_and(|v| v >= 1.0));
    assert!(
        after.contains("# TYPE caprl_learner_steps_total counter"),
        "{after}"
    );
    assert!(
        after.contains("# HELP caprl_rollouts_total "),
        "descriptions are registered"
    );
    assert!(
        after.contains("caprl_queue_depth_messages{queue=\"tasks\"} 17"),
        "{after}"
    );
    assert!(
        after.contains("caprl_rejected_messages_total{reason=\"bad_magic\"} "),
        "{after}"
    );
    assert!(after.contains("caprl_loss{term=\"total\"} 0.5"), "{after}");
    // `_seconds` histograms are real Prometheus histograms with the configured buckets.
    assert!(
        after.contains("caprl_reward_latency_seconds_bucket{le=\"0.05\"} "),
        "latency histogram has buckets: {after}"
    );
    assert!(
        after.contains("caprl_policy_lag_versions_bucket{le=\"2\"} "),
        "{after}"
    );
    assert!(
        after.contains("caprl_reward_bucket{component=\"cider\",le=\"1\"} "),
        "{after}"
    );
    assert!(after.contains("caprl_info{version="), "{after}");

    // Everything exported under the caprl_ prefix is declared in names.rs.
    for line in after.lines().filter(|l| l.starts_with("caprl_")) {
        let series = line.split(['{', ' ']).next().unwrap_or_default();
        assert!(names::is_known_series(series), "undeclared series {series}");
    }
    server.shutdown();
}

#[test]
fn healthz_is_ok_and_readyz_follows_readiness() {
    let readiness = Readiness::new();
    let server = serve("127.0.0.1:0".parse().expect("addr"), readiness.clone()).expect("serve");
    let addr = server.local_addr();

    assert_eq!(get(addr, "/healthz").0, 200);
    assert_eq!(get(addr, "/readyz").0, 503);
    readiness.set_ready(true);
    assert_eq!(get(addr, "/readyz").0, 200);
    assert_eq!(get(addr, "/readyz?verbose=1").0, 200);
    readiness.set_ready(false);
    assert_eq!(get(addr, "/readyz").0, 503);
    assert_eq!(get(addr, "/nope").0, 404);

    drop(server);
    assert!(
        TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_err(),
        "the port is released once the handle is dropped"
    );
}

#[test]
fn a_taken_port_is_a_clear_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr");
    let err = serve(addr, Readiness::new()).expect_err("port is taken");
    let msg = err.to_string();
    assert!(
        msg.contains(&addr.to_string()) && msg.contains("--metrics-addr"),
        "{msg}"
    );
}

#[test]
fn serving_on_all_interfaces_answers_and_shuts_down() {
    let server = serve("0.0.0.0:0".parse().expect("addr"), Readiness::new()).expect("serve");
    let port = server.local_addr().port();
    let local = SocketAddr::from(([127, 0, 0, 1], port));
    assert_eq!(get(local, "/healthz").0, 200);
    server.shutdown();
    assert!(TcpStream::connect_timeout(&local, Duration::from_millis(500)).is_err());
}
