//! The RL algorithms of `[train]` through `caprl train` on a tiny run: group baselines, PPO's
//! clipped passes with their ratio statistics in the run log, the KL to the XE model as a
//! reward penalty or a loss term, GSPO and decoupled PPO with async mode's importance weights,
//! dynamic sampling (also with snapshots every other version), and async mode without policy
//! lag being the sync run.

mod support;

use support::{caprl, sets, steps, synth, text};

/// `caprl train --objective OBJECTIVE` of a tiny run (1 XE + 1 RL epoch) with `keys`; its RL
/// step records.
fn train(objective: &str, keys: &[&str]) -> Vec<serde_json::Value> {
    let tmp = tempfile::tempdir().unwrap();
    let data = synth(tmp.path());
    let run = tmp.path().join("run");
    let out = caprl()
        .args(["train", "-q", "--objective", objective])
        .args(sets(&data, &run, 1, keys))
        .output()
        .expect("caprl runs");
    assert!(out.status.success(), "{keys:?}: {}", text(&out));
    let rl = steps(&run, "rl");
    assert!(!rl.is_empty(), "{keys:?}: no RL step");
    rl
}

fn stat(step: &serde_json::Value, name: &str) -> f64 {
    step["ppo"][name]
        .as_f64()
        .unwrap_or_else(|| panic!("no ppo.{name} in {step}"))
}

#[test]
fn grpo_with_ppo_passes_and_a_kl_reward_penalty_trains_and_reports() {
    let rl = train(
        "scst",
        &[
            "train.baseline=\"grpo\"",
            "train.ppo_epochs=2",
            "train.ppo_minibatches=2",
            "train.clip_high=0.28",
            "train.kl_coef=0.05",
            "train.kl_estimator=\"k3\"",
            "train.kl_in=\"reward\"",
        ],
    );
    for s in &rl {
        let (min, mean, max) = (
            stat(s, "ratio_min"),
            stat(s, "ratio_mean"),
            stat(s, "ratio_max"),
        );
        assert!(min > 0.0 && min <= mean && mean <= max, "{s}");
        assert!((0.0..=1.0).contains(&stat(s, "clip_fraction")), "{s}");
        assert!(stat(s, "approx_kl") >= 0.0, "{s}");
        let kl = s["losses"]["kl"].as_f64().expect("the KL estimate");
        assert!(kl.is_finite() && kl >= 0.0, "k3 is never negative: {s}");
        let penalty = s["rewards"]["kl_penalty"]
            .as_f64()
            .expect("the reward penalty");
        assert!(penalty <= 0.0, "{s}");
    }
    // Two passes of two minibatches are one step each.
    let ids: Vec<u64> = rl.iter().map(|s| s["step"].as_u64().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[1] == w[0] + 1), "{ids:?}");
}

/// In sync mode the first pass's ratio is the learner's log-prob over the actors': 1 up to
/// the difference between the actors' decoding and the learner's teacher-forced pass.
#[test]
fn one_ppo_pass_in_sync_mode_sees_ratios_of_one() {
    let rl = train("scst", &["train.baseline=\"rloo\"", "train.ppo_epochs=1"]);
    for s in &rl {
        assert!(
            (stat(s, "ratio_min") - 1.0).abs() < 1e-3 && (stat(s, "ratio_max") - 1.0).abs() < 1e-3,
            "actors' and learner's log-probs disagree: {s}"
        );
        assert_eq!(stat(s, "clip_fraction"), 0.0, "{s}");
    }
}

#[test]
fn sle_with_dr_grpo_and_a_sampled_kl_loss_trains() {
    let rl = train(
        "sle",
        &[
            "train.baseline=\"dr-grpo\"",
            "train.kl_coef=0.1",
            "train.kl_estimator=\"k2\"",
        ],
    );
    for s in &rl {
        let kl = s["losses"]["kl"].as_f64().expect("the KL term");
        assert!(kl.is_finite() && kl >= 0.0, "{s}");
        assert!(s.get("ppo").is_none(), "no PPO statistics without PPO: {s}");
    }
}

/// Async mode with PPO: the clipped ratio is the off-policy correction, so the sequence-level
/// importance weight is not applied (`importance_weight` stays empty).
#[test]
fn ppo_runs_in_async_mode_without_the_sequence_importance_weight() {
    let rl = train(
        "scst",
        &[
            "runtime.mode=\"async\"",
            "train.baseline=\"mean\"",
            "train.ppo_epochs=2",
        ],
    );
    for s in &rl {
        assert!(stat(s, "ratio_max") >= stat(s, "ratio_min"), "{s}");
        assert!(s["importance_weight"].is_null(), "{s}");
    }
}

fn off_policy(step: &serde_json::Value, name: &str) -> f64 {
    step["off_policy"][name]
        .as_f64()
        .unwrap_or_else(|| panic!("no off_policy.{name} in {step}"))
}

/// Async mode, GSPO's per-caption ratio with decoupled PPO and token-level masked IS: the
/// ratio statistics are over captions, and the captions decoded ahead by an older policy carry
/// importance weights that are 0 or inside the mask's range.
#[test]
fn gspo_with_decoupled_ppo_in_async_mode_reports_ratios_and_masked_weights() {
    let rl = train(
        "scst",
        &[
            "runtime.mode=\"async\"",
            "train.baseline=\"grpo\"",
            "train.ppo_epochs=2",
            "train.ppo_ratio=\"sequence\"",
            "train.ppo_proximal=\"learner\"",
            "runtime.off_policy_correction=\"masked-is\"",
            "runtime.is_level=\"token\"",
            "runtime.is_mask_low=0.8",
            "runtime.is_mask_high=1.25",
        ],
    );
    let mut weighted = 0;
    for s in &rl {
        assert!(stat(s, "ratio_min") <= stat(s, "ratio_max"), "{s}");
        if off_policy(s, "stale_sequences") > 0.0 {
            weighted += 1;
            let (lo, hi) = (off_policy(s, "weight_min"), off_policy(s, "weight_max"));
            assert!(lo == 0.0 || lo >= 0.8 - 1e-6, "{s}");
            assert!(hi <= 1.25 + 1e-6, "{s}");
            assert!((0.0..=1.0).contains(&off_policy(s, "cut_fraction")), "{s}");
            let mean = s["importance_weight"].as_f64().expect("importance_weight");
            assert!(mean >= lo && mean <= hi, "{s}");
        }
    }
    assert!(
        weighted > 0,
        "no step trained on captions issued ahead: {rl:?}"
    );
}

/// Dynamic sampling with GRPO: images whose samples all scored the same are dropped and
/// counted, the batch is topped up from the next images (more tasks issued in that step), and
/// no task id is used twice.
#[test]
fn dynamic_sampling_drops_flat_groups_and_tops_up_the_batch() {
    // A low temperature makes many images' samples one caption.
    let keys = [
        "train.baseline=\"grpo\"",
        "train.dynamic_sampling=true",
        "decode.temperature=0.02",
    ];
    let rl = train("scst", &keys);
    let dropped: u64 = rl
        .iter()
        .map(|s| s["groups_dropped"].as_u64().unwrap_or(0))
        .sum();
    assert!(dropped > 0, "no group dropped: {rl:?}");
    assert!(
        rl.iter()
            .any(|s| s["tasks_issued"].as_u64().unwrap_or(0) > 4),
        "no step topped its batch up: {rl:?}"
    );
    let ids: Vec<u64> = rl
        .iter()
        .flat_map(|s| {
            s["task_ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap())
        })
        .collect();
    let distinct: std::collections::BTreeSet<u64> = ids.iter().copied().collect();
    assert_eq!(ids.len(), distinct.len(), "a task id used twice: {ids:?}");
    let plain = train("scst", &keys[..1]);
    assert!(
        rl.len() < plain.len(),
        "refills take later batches: {} vs {} steps",
        rl.len(),
        plain.len()
    );
}

/// Async snapshots every 2nd version (`runtime.snapshot_every = 2`, lag bound 1) with dynamic
/// sampling, whose refills bring a round before its version: the run finishes, every step
/// trains within the bound, and the policy is published about every other step.
#[test]
fn async_snapshots_every_other_version_with_refills_stay_within_the_lag_bound() {
    let keys = [
        "runtime.mode=\"async\"",
        "runtime.max_policy_lag=1",
        "runtime.snapshot_every=2",
        "train.baseline=\"grpo\"",
        "train.dynamic_sampling=true",
        "decode.temperature=0.02",
        "train.batch_size=8",
    ];
    let rl = train("scst", &keys);
    assert!(rl.len() >= 4, "{} steps: {rl:?}", rl.len());
    for s in &rl {
        assert!(s["max_lag"].as_u64().unwrap() <= 1, "{s}");
    }
    let published: std::collections::BTreeSet<u64> = rl
        .iter()
        .map(|s| s["snapshot_version"].as_u64().unwrap())
        .collect();
    assert!(
        published.len() < rl.len(),
        "a snapshot every step: {published:?} over {} steps",
        rl.len()
    );
    assert!(
        rl.iter()
            .any(|s| s["tasks_issued"].as_u64().unwrap_or(0) > 2),
        "no step refilled its batch: {rl:?}"
    );
}

/// `runtime.max_policy_lag = 0` in async mode issues nothing ahead and takes only rollouts of
/// the current policy: the run is the sync run, bit for bit.
#[test]
fn async_mode_with_no_policy_lag_is_the_sync_run() {
    let tmp = tempfile::tempdir().unwrap();
    let data = synth(tmp.path());
    let run = |name: &str, keys: &[&str]| {
        let dir = tmp.path().join(name);
        let out = caprl()
            .args(["train", "-q", "--objective", "scst"])
            .args(sets(&data, &dir, 2, keys))
            .output()
            .expect("caprl runs");
        assert!(out.status.success(), "{keys:?}: {}", text(&out));
        dir
    };
    let sync = run("sync", &[]);
    let lag0 = run(
        "lag0",
        &["runtime.mode=\"async\"", "runtime.max_policy_lag=0"],
    );
    let (a, b) = (steps(&sync, "rl"), steps(&lag0, "rl"));
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x["task_ids"], y["task_ids"], "{y}");
        assert_eq!(y["max_lag"].as_u64(), Some(0), "{y}");
    }
    assert!(
        support::final_weights(&sync) == support::final_weights(&lag0),
        "async with max_policy_lag 0 trained other weights than sync"
    );
}
