//! The shipped monitoring on live metrics: a real `prometheus` scrapes a learner, two actors
//! and a reward worker (separate processes on a private nats-server) every second and
//! evaluates a copy of `k8s/monitoring/alerts.yaml` whose `for:` durations, range windows and
//! stall threshold are shortened to seconds. With every actor killed, CaprlNoLiveActors goes
//! pending, then firing, and resolves once actors are back; a learner stopped with SIGSTOP
//! (it answers no scrape, so all its series go stale) fires CaprlLearnerStalled, which
//! resolves after SIGCONT. Then every query of every panel of
//! `k8s/monitoring/grafana-dashboard.json` runs through `/api/v1/query` and returns series
//! of this run.

mod support;

#[path = "../common/tests/support/ci.rs"]
mod ci;
#[path = "support/prometheus.rs"]
mod prometheus;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use prometheus::{free_port, Prometheus};
use serde_json::Value;
use support::{kill9, output_of, sets, spawn, start_broker, synth, Reaper};

const RUN_ID: &str = "live-monitoring";
/// `for:` of every alert in the test's copy of the rules.
const FOR: &str = "5s";
/// Every range window (`[5m]`, `[10m]`, `[15m]`) in the test's copy: 20 scrapes.
const WINDOW: &str = "[20s]";
/// The stall threshold (600 s in the shipped rules): far above a step of the tiny run.
const STALL_SECONDS: &str = "20";

/// Dashboard queries whose metric is recorded only on an event this healthy run need not
/// have: they must run without error, but may return nothing.
const MAY_BE_EMPTY: &[&str] = &[
    // Batches are skipped only on NaN/inf rewards or gradients.
    "caprl_skipped_batches_total",
    // Only the `wtf-rl` objective trains a discriminator.
    "caprl_discriminator_accuracy_ratio",
    // Only PPO objectives (`rloo-ppo`) record ratio statistics.
    "caprl_ppo",
    // Async mode's importance weights: only once an older policy's captions arrive.
    "caprl_off_policy",
    // Only with train.dynamic_sampling.
    "caprl_groups_dropped_total",
    // Rollouts older than max_policy_lag: dropped (the default) or, with
    // `stale_rollouts = "reweight"`, reweighted; whether any arrive depends on timing.
    "caprl_dropped_stale_total",
    "caprl_stale_reweighted_total",
    // A redelivery needs a task held past ack_wait by a killed actor; timing again.
    "caprl_redeliveries_total",
    // Only undecodable or invalid messages are rejected.
    "caprl_rejected_messages_total",
];

#[test]
fn shipped_alerts_fire_and_resolve_and_every_dashboard_query_answers_on_a_live_run() {
    let Some(prometheus_bin) = prometheus::binary() else {
        return;
    };
    let _reaper = Reaper;
    let dir = tempfile::tempdir().unwrap();
    let data = synth(dir.path());
    let run = dir.path().join("run");
    let (server, url) = start_broker();
    // The cluster config's mode (async, bounded lag), no XE phase, and more RL epochs than
    // the test lasts: the roles are killed at the end.
    let run_id = format!("runtime.run_id={RUN_ID:?}");
    let extra = [
        "train.xe_epochs=0",
        "runtime.mode=\"async\"",
        "runtime.max_policy_lag=4",
        "runtime.ack_wait_secs=5",
        &run_id,
    ];
    let args = sets(&data, &run, 100_000, &extra);
    let addr = |port: u16| format!("127.0.0.1:{port}");
    let (learner_port, worker_port) = (free_port(), free_port());
    let actor_ports = [free_port(), free_port()];
    let start_actor = |i: usize| {
        let id = format!("a{i}");
        let metrics = addr(actor_ports[i]);
        spawn(
            &args,
            &["actor", "--id", &id, "--metrics-addr", &metrics],
            &url,
        )
    };
    let mut learner = spawn(
        &args,
        &["learner", "--metrics-addr", &addr(learner_port)],
        &url,
    );
    let worker = spawn(
        &args,
        &[
            "reward-worker",
            "--id",
            "rw0",
            "--metrics-addr",
            &addr(worker_port),
        ],
        &url,
    );
    let mut actors: Vec<Child> = (0..2).map(start_actor).collect();

    let rules = dir.path().join("alerts.yaml");
    let shipped = std::fs::read_to_string(monitoring("alerts.yaml")).expect("alerts.yaml");
    std::fs::write(&rules, shortened(&shipped)).expect("write the rules' copy");
    let targets = [learner_port, worker_port, actor_ports[0], actor_ports[1]]
        .map(|p| format!("'{}'", addr(p)))
        .join(", ");
    let config = format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
         rule_files: ['{}']\n\
         scrape_configs:\n  - job_name: caprl\n    static_configs:\n      - targets: [{targets}]\n",
        rules.display()
    );
    let prom_dir = dir.path().join("prometheus");
    std::fs::create_dir_all(&prom_dir).unwrap();
    let prom = Prometheus::start(&prometheus_bin, &prom_dir, &config);
    let learner_instance = addr(learner_port);
    let roles_output = |learner: &Child, actors: &[Child]| {
        let mut out = format!("--- learner\n{}", output_of(learner));
        out += &format!("\n--- reward worker\n{}", output_of(&worker));
        for (i, a) in actors.iter().enumerate() {
            out += &format!("\n--- actor a{i}\n{}", output_of(a));
        }
        out
    };

    let fail = |what: &str, learner: &Child, actors: &[Child]| -> String {
        format!(
            "{what}\n--- active alerts\n{:#}\n--- prometheus log\n{}\n{}",
            Value::Array(prom.active_alerts()),
            prom.log_text(),
            roles_output(learner, actors)
        )
    };

    // The rules Prometheus loaded are the shortened ones.
    for rule in rule_list(&prom) {
        let (name, query) = (&rule["name"], rule["query"].as_str().unwrap_or_default());
        let duration = rule["duration"].as_f64().unwrap_or_default();
        assert!(duration <= 5.0, "{name} loaded with for: {duration} s");
        for long in ["[5m]", "[10m]", "[15m]", "> 600"] {
            assert!(!query.contains(long), "{name} loaded with {long}: {query}");
        }
    }

    // A healthy run: every target up, rollouts flowing, the learner stepping, no alert
    // pending or firing (NoLiveActors may go pending while the first rollouts are made).
    let healthy = |what: &str, learner: &Child, actors: &[Child]| {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let up = prom.query("up{job=\"caprl\"} == 1").len();
            let rolling = !prom
                .query(&format!("sum(rate(caprl_rollouts_total{WINDOW})) > 0"))
                .is_empty();
            let stepping = !prom
                .query(&format!("increase(caprl_learner_steps_total{WINDOW}) > 0"))
                .is_empty();
            if up == 4 && rolling && stepping && prom.active_alerts().is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{}",
                fail(
                    &format!(
                        "{what}: not healthy within 120 s (targets up: {up} of 4, rollouts \
                         flowing: {rolling}, learner stepping: {stepping})"
                    ),
                    learner,
                    actors
                )
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    };
    healthy("at the start", &learner, &actors);
    eprintln!("healthy: every target up, rollouts flowing, no alert");

    // Every actor killed: no rollouts, so the learner waits; CaprlNoLiveActors goes pending
    // (its expression holds), then firing (it held for `for:`).
    let killed_at = Instant::now();
    for actor in actors.drain(..) {
        kill9(actor);
    }
    let states = wait_for_state(&prom, "CaprlNoLiveActors", "firing", Duration::from_secs(120))
        .unwrap_or_else(|seen| {
            panic!(
                "{}",
                fail(
                    &format!("CaprlNoLiveActors not firing 120 s after every actor was killed (seen: {seen:?})"),
                    &learner,
                    &actors
                )
            )
        });
    assert!(
        states.contains(&"pending".to_string()),
        "CaprlNoLiveActors was never seen pending before firing: {states:?}"
    );
    eprintln!(
        "CaprlNoLiveActors firing {:.1} s after the actors were killed",
        killed_at.elapsed().as_secs_f64()
    );

    // Actors back: rollouts flow again and every alert resolves (the learner, starved of
    // rollouts, may have been reported stalled meanwhile).
    let restarted_at = Instant::now();
    actors = (0..2).map(start_actor).collect();
    healthy("after the actors came back", &learner, &actors);
    eprintln!(
        "every alert resolved {:.1} s after the actors were restarted",
        restarted_at.elapsed().as_secs_f64()
    );

    // The learner stopped: it answers no scrape, its target is down and its series are stale;
    // CaprlLearnerStalled fires from the last values scraped.
    // SAFETY: kill(2) on a child of this test that was not reaped yet.
    unsafe { libc::kill(learner.id() as i32, libc::SIGSTOP) };
    let stopped_at = Instant::now();
    let fired = wait_for_state(
        &prom,
        "CaprlLearnerStalled",
        "firing",
        Duration::from_secs(120),
    );
    let learner_up = prom.query(&format!("up{{instance=\"{learner_instance}\"}}"));
    // SAFETY: as above.
    unsafe { libc::kill(learner.id() as i32, libc::SIGCONT) };
    if let Err(seen) = fired {
        panic!(
            "{}",
            fail(
                &format!("CaprlLearnerStalled not firing 120 s after SIGSTOP (seen: {seen:?})"),
                &learner,
                &actors
            )
        );
    }
    eprintln!(
        "CaprlLearnerStalled firing {:.1} s after SIGSTOP",
        stopped_at.elapsed().as_secs_f64()
    );
    assert_eq!(
        learner_up.first().map(|s| s["value"][1].clone()),
        Some(Value::from("0")),
        "the stopped learner's target was not down: {learner_up:?}"
    );
    healthy("after SIGCONT", &learner, &actors);

    // Every panel's query answers with series of this run.
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(monitoring("grafana-dashboard.json")).expect("dashboard"),
    )
    .expect("the dashboard is JSON");
    let (mut empty_allowed, mut empty) = (BTreeSet::new(), Vec::new());
    let mut queries = 0;
    for (title, expr) in panel_queries(&dashboard) {
        let expr = grafana_substituted(&expr);
        let series = prom.query(&expr);
        queries += 1;
        if series.is_empty() {
            if MAY_BE_EMPTY.iter().any(|m| expr.contains(m)) {
                empty_allowed.insert(title);
            } else {
                empty.push(format!("panel {title:?}: {expr}"));
            }
            continue;
        }
        for s in &series {
            assert_eq!(
                s["metric"]["run"], RUN_ID,
                "panel {title:?}: {expr} returned a series of another run: {s}"
            );
        }
    }
    assert!(
        queries >= 30,
        "only {queries} panel queries found in the dashboard"
    );
    assert!(
        empty.is_empty(),
        "{}",
        fail(
            &format!("dashboard queries without a series:\n{}", empty.join("\n")),
            &learner,
            &actors
        )
    );
    eprintln!("{queries} panel queries answered; empty in this run (allowed): {empty_allowed:?}");

    if let Ok(Some(status)) = learner.try_wait() {
        panic!(
            "{}",
            fail(&format!("the learner exited ({status})"), &learner, &actors)
        );
    }
    for role in actors.into_iter().chain([learner, worker]) {
        kill9(role);
    }
    drop(prom);
    drop(server);
}

/// `k8s/monitoring/<name>`.
fn monitoring(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("k8s/monitoring")
        .join(name)
}

/// The shipped rules with every `for:` set to [`FOR`], every `[5m]`/`[10m]`/`[15m]` window set
/// to [`WINDOW`] and the stall threshold `> 600` set to [`STALL_SECONDS`]. Checks that each
/// rewrite found what it rewrites; Prometheus' loaded rules are checked again by the test.
fn shortened(rules: &str) -> String {
    let mut fors = 0;
    let mut out: String = rules
        .lines()
        .map(|line| {
            let indent = line.len() - line.trim_start().len();
            if line.trim_start().starts_with("for: ") {
                fors += 1;
                format!("{}for: {FOR}\n", &line[..indent])
            } else {
                format!("{line}\n")
            }
        })
        .collect();
    assert!(fors >= 4, "only {fors} `for:` lines in alerts.yaml");
    let stall = format!("> {STALL_SECONDS}");
    for (long, short) in [
        ("[5m]", WINDOW),
        ("[10m]", WINDOW),
        ("[15m]", WINDOW),
        ("> 600", stall.as_str()),
    ] {
        assert!(out.contains(long), "alerts.yaml no longer contains {long}");
        out = out.replace(long, short);
    }
    out
}

/// Every alerting rule Prometheus loaded (`/api/v1/rules`), as JSON objects.
fn rule_list(prom: &Prometheus) -> Vec<Value> {
    let data = prom.api("rules?type=alert");
    let rules: Vec<Value> = data["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .collect();
    assert!(
        rules.iter().any(|r| r["name"] == "CaprlNoLiveActors")
            && rules.iter().any(|r| r["name"] == "CaprlLearnerStalled"),
        "prometheus did not load the alert rules: {data}"
    );
    rules
}

/// Polls `/api/v1/alerts` until alert `name` is in `state`; the states it went through (in
/// order, without repeats), or the same as the error when `within` passes first.
fn wait_for_state(
    prom: &Prometheus,
    name: &str,
    state: &str,
    within: Duration,
) -> Result<Vec<String>, Vec<String>> {
    let deadline = Instant::now() + within;
    let mut seen: Vec<String> = Vec::new();
    loop {
        for s in prom.alert_states(name) {
            if seen.last() != Some(&s) {
                seen.push(s);
            }
        }
        if seen.last().is_some_and(|s| s == state) {
            return Ok(seen);
        }
        if Instant::now() > deadline {
            return Err(seen);
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// `(panel title, expr)` of every Prometheus query of every panel, rows included.
fn panel_queries(dashboard: &Value) -> Vec<(String, String)> {
    fn walk(panels: &Value, out: &mut Vec<(String, String)>) {
        for panel in panels.as_array().into_iter().flatten() {
            walk(&panel["panels"], out);
            let title = panel["title"].as_str().unwrap_or_default();
            for target in panel["targets"].as_array().into_iter().flatten() {
                if let Some(expr) = target["expr"].as_str() {
                    out.push((title.to_string(), expr.to_string()));
                }
            }
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    out
}

/// `expr` as Grafana sends it for this run: `$run` (a multi-value variable, used as
/// `run=~"$run"`) is the run id; Grafana's interval variables become a window of 20 scrapes.
/// Any other `$` variable fails the test, so that a new one gets a value here.
fn grafana_substituted(expr: &str) -> String {
    let out = expr
        .replace("${run}", RUN_ID)
        .replace("$run", RUN_ID)
        .replace("$__rate_interval", "20s")
        .replace("$__interval", "20s")
        .replace("$__range", "1m");
    assert!(
        !out.contains('$'),
        "{expr}: a Grafana variable this test does not know; give it a value here"
    );
    out
}
