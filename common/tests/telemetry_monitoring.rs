//! The Grafana dashboard and Prometheus rules in `k8s/monitoring/` use only
//! metric names caprl exports, and the rules pass promtool.

#[path = "support/ci.rs"]
mod ci;

use std::path::{Path, PathBuf};
use std::process::Command;

use caprl_common::telemetry::names::is_known_series;

fn monitoring(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../k8s/monitoring")
        .join(file)
}

/// Every `caprl_...` identifier in `text`.
fn referenced_series(text: &str) -> Vec<String> {
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while let Some(at) = text[i..].find("caprl_") {
        let start = i + at;
        let boundary =
            start == 0 || !(bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
        let end = start
            + text[start..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(text.len() - start);
        if boundary {
            found.push(text[start..end].to_string());
        }
        i = end;
    }
    found
}

#[test]
fn dashboard_and_alerts_reference_only_declared_metrics() {
    for (file, at_least) in [
        ("grafana-dashboard.json", 20),
        ("alerts.yaml", 8),
        ("alerts.test.yaml", 6),
    ] {
        let text = std::fs::read_to_string(monitoring(file)).expect("monitoring file");
        let series = referenced_series(&text);
        assert!(
            series.len() >= at_least,
            "{file}: only {} metric references",
            series.len()
        );
        for s in &series {
            assert!(
                is_known_series(s),
                "{file} uses {s}, which names.rs does not declare"
            );
        }
    }
}

#[test]
fn dashboard_is_valid_grafana_json_with_queries() {
    let text = std::fs::read_to_string(monitoring("grafana-dashboard.json")).expect("dashboard");
    let dash: serde_json::Value = serde_json::from_str(&text).expect("dashboard is JSON");
    let panels = dash["panels"].as_array().expect("panels");
    let queries: Vec<&str> = panels
        .iter()
        .filter(|p| p["type"] == "timeseries")
        .flat_map(|p| p["targets"].as_array().into_iter().flatten())
        .filter_map(|t| t["expr"].as_str())
        .collect();
    assert!(queries.len() >= 20);
    for needle in [
        "caprl_reward_mean",
        "caprl_policy_lag_versions_bucket",
        "caprl_tokens_total",
        "caprl_queue_depth_messages",
    ] {
        assert!(
            queries.iter().any(|q| q.contains(needle)),
            "dashboard lacks a {needle} panel"
        );
    }
    let mut ids: Vec<u64> = panels.iter().filter_map(|p| p["id"].as_u64()).collect();
    ids.dedup();
    assert_eq!(ids.len(), panels.len(), "panel ids are unique");
}

#[test]
fn alert_rules_cover_the_failure_modes() {
    let text = std::fs::read_to_string(monitoring("alerts.yaml")).expect("alerts");
    for alert in [
        "CaprlLearnerStalled",
        "CaprlPolicyLagAboveBound",
        "CaprlRedeliveryStorm",
        "CaprlNoLiveActors",
    ] {
        assert!(
            text.contains(&format!("alert: {alert}")),
            "missing alert {alert}"
        );
    }
}

/// `$PROMTOOL`, else `promtool` on the PATH. Debian's `prometheus` package
/// ships it: `apt-get download prometheus && dpkg -x prometheus_*.deb DIR`
/// (`scripts/ci/install-prometheus.sh` does that).
fn promtool() -> Option<PathBuf> {
    let candidate = match std::env::var_os("PROMTOOL") {
        Some(path) => PathBuf::from(path),
        None => ci::tool("promtool")?,
    };
    let runs = Command::new(&candidate)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !runs {
        ci::unavailable(&format!(
            "`{} --version` does not run (set PROMTOOL to a working promtool)",
            candidate.display()
        ));
        return None;
    }
    Some(candidate)
}

#[test]
fn alert_rules_pass_promtool_check_and_unit_tests() {
    let Some(promtool) = promtool() else {
        return;
    };
    let dir = monitoring("");
    for args in [
        ["check", "rules", "alerts.yaml"],
        ["test", "rules", "alerts.test.yaml"],
    ] {
        let out = Command::new(&promtool)
            .args(args)
            .current_dir(&dir)
            .output()
            .expect("run promtool");
        assert!(
            out.status.success(),
            "promtool {}:\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
