//! Every Prometheus metric name caprl exports, and the label keys they use.
//!
//! Names follow the Prometheus conventions
//! (<https://prometheus.io/docs/practices/naming/>): a `caprl_` prefix,
//! counters end in `_total`, durations are histograms in `_seconds`, sizes in
//! `_bytes`, ratios in `_ratio`. Rates (rollouts/s, tokens/s) are not exported:
//! PromQL derives them from the counters with `rate()`.
//!
//! The Grafana dashboard and the alert rules in `k8s/monitoring/` use exactly
//! these names; a test checks that every name they reference is listed in
//! [`all_metric_names`].

/// Label: which process kind exported the series (`learner`, `actor`, `reward-worker`, `all`).
pub const LABEL_ROLE: &str = "role";
/// Label: the run id (`caprl.<run>.*` subjects); several runs can share one cluster.
pub const LABEL_RUN: &str = "run";
/// Label: which process of a role (pod name or `--worker-id`), for per-actor rates.
pub const LABEL_WORKER: &str = "worker";
/// Label: reward component (`cider`, `clip`, `disc`, ...; `total` for the weighted sum).
pub const LABEL_COMPONENT: &str = "component";
/// Label: loss term (`pg`, `xe`, `diversity`, `value`, `disc`, `total`, ...).
pub const LABEL_TERM: &str = "term";
/// Label: statistic of PPO's ratios (`clip_fraction`, `approx_kl`, `ratio_mean`, ...).
pub const LABEL_STAT: &str = "stat";
/// Label: queue name (`tasks`, `rollouts`, `scored`).
pub const LABEL_QUEUE: &str = "queue";
/// Label: why a message was rejected or a batch skipped.
pub const LABEL_REASON: &str = "reason";
/// Label: a stage of a role's work (`decode`, `forward`, `snapshot_put`, ...; see `stages`).
pub const LABEL_STAGE: &str = "stage";
/// Label: eval metric (`cider_d`, `bleu4`, `rouge_l`, ...).
pub const LABEL_METRIC: &str = "metric";
/// Label: eval split (`val`, `test`).
pub const LABEL_SPLIT: &str = "split";
/// Label on [`INFO`]: the caprl version.
pub const LABEL_VERSION: &str = "version";

/// Gauge, always 1: one series per live process, labelled with role, run and version.
pub const INFO: &str = "caprl_info";

/// Gauge: Unix time this process started serving metrics.
pub const START_TIME: &str = "caprl_start_time_seconds";
/// Gauge: Unix time of the learner's last optimizer step (the stalled-learner alert).
pub const LEARNER_LAST_STEP_TIME: &str = "caprl_learner_last_step_timestamp_seconds";

/// Gauge: mean reward of the last scored batch, per component (label `component`).
pub const REWARD_MEAN: &str = "caprl_reward_mean";
/// Histogram: reward of every scored trajectory, per component (label `component`).
pub const REWARD: &str = "caprl_reward";
/// Gauge: value of each loss term at the last learner step (label `term`).
pub const LOSS: &str = "caprl_loss";
/// Gauge: PPO's ratios `π/μ` at the last learner step (label `stat`: `clip_fraction`,
/// `approx_kl`, `ratio_mean`, `ratio_min`, `ratio_max`).
pub const PPO: &str = "caprl_ppo";
/// Gauge: async mode's importance weights at the last learner step (label `stat`:
/// `stale_sequences`, `weight_mean`, `weight_min`, `weight_max`, `cut_fraction`, `ratio_mean`).
pub const OFF_POLICY: &str = "caprl_off_policy";
/// Gauge: global L2 norm of the gradient before clipping, last learner step.
pub const GRAD_NORM: &str = "caprl_grad_norm";
/// Gauge: learning rate used by the last learner step.
pub const LEARNING_RATE: &str = "caprl_learning_rate";
/// Gauge: policy version the process currently holds (learner: published; actor: loaded).
pub const POLICY_VERSION: &str = "caprl_policy_version";
/// Histogram: `v_learner - v_rollout` of every scored rollout the learner receives,
/// observed before the staleness filter so the tail above the bound stays visible.
pub const POLICY_LAG: &str = "caprl_policy_lag_versions";
/// Gauge: the configured `max_policy_lag` (async mode), for alerting against the bound.
pub const MAX_POLICY_LAG: &str = "caprl_max_policy_lag_versions";
/// Counter: rollouts dropped because they were older than `max_policy_lag`.
pub const DROPPED_STALE_TOTAL: &str = "caprl_dropped_stale_total";
/// Counter: images dynamic sampling dropped because their samples all scored the same.
pub const GROUPS_DROPPED_TOTAL: &str = "caprl_groups_dropped_total";
/// Counter: rollouts older than `max_policy_lag` trained on with a truncated importance weight
/// (`runtime.stale_rollouts = "reweight"`).
pub const STALE_REWEIGHTED_TOTAL: &str = "caprl_stale_reweighted_total";
/// Counter: rollouts an actor published.
pub const ROLLOUTS_TOTAL: &str = "caprl_rollouts_total";
/// Counter: caption tokens an actor generated (all decodes of all rollouts).
pub const TOKENS_TOTAL: &str = "caprl_tokens_total";
/// Histogram: seconds from a reward worker receiving a rollout to publishing its score.
pub const REWARD_LATENCY_SECONDS: &str = "caprl_reward_latency_seconds";
/// Gauge: messages waiting in a stream or consumer (label `queue`).
pub const QUEUE_DEPTH: &str = "caprl_queue_depth_messages";
/// Counter: messages received again after an ack deadline passed (label `queue`).
pub const REDELIVERIES_TOTAL: &str = "caprl_redeliveries_total";
/// Counter: messages rejected by the codec or validation (label `reason`).
pub const REJECTED_MESSAGES_TOTAL: &str = "caprl_rejected_messages_total";
/// Counter: tasks an actor handed back after a fault inside the model (retried, never dropped).
pub const INTERNAL_FAULTS_TOTAL: &str = "caprl_internal_faults_total";
/// Counter: times a role lost the broker and started retrying with backoff.
pub const BUS_OUTAGES_TOTAL: &str = "caprl_bus_outages_total";
/// Gauge: size of the last policy snapshot written (learner) or fetched (actor).
pub const SNAPSHOT_BYTES: &str = "caprl_snapshot_bytes";
/// Histogram: seconds to publish a snapshot (learner) or fetch and verify it (actor).
pub const SNAPSHOT_BROADCAST_SECONDS: &str = "caprl_snapshot_broadcast_seconds";
/// Gauge: last evaluation score (labels `metric`, `split`).
pub const EVAL_SCORE: &str = "caprl_eval_score";
/// Gauge: discriminator accuracy on its last training batch (GT vs generated), in [0, 1].
pub const DISCRIMINATOR_ACCURACY: &str = "caprl_discriminator_accuracy_ratio";
/// Counter: optimizer steps the learner took.
pub const LEARNER_STEPS_TOTAL: &str = "caprl_learner_steps_total";
/// Histogram: wall seconds of one learner step (batch assembly to optimizer step).
pub const LEARNER_STEP_SECONDS: &str = "caprl_learner_step_seconds";
/// Counter: batches skipped instead of stepped (label `reason`: `nan_reward`, `nan_grad`, ...).
pub const SKIPPED_BATCHES_TOTAL: &str = "caprl_skipped_batches_total";
/// Gauge: rollout tasks published by the learner and not yet answered (credit in use).
pub const TASKS_IN_FLIGHT: &str = "caprl_tasks_in_flight";
/// Counter: Monte-Carlo completions decoded by actors (mc-pg's estimate of `Q(s_t, w_t)`).
pub const MC_COMPLETIONS_TOTAL: &str = "caprl_mc_completions_total";
/// Histogram: seconds an actor spent on one task's Monte-Carlo completions (mc-pg's extra cost).
pub const MC_DECODE_SECONDS: &str = "caprl_mc_decode_seconds";
/// Histogram: seconds of one stage of a role's work (label `stage`, unique over the roles): where
/// a step's time goes, role by role.
pub const STAGE_SECONDS: &str = "caprl_stage_seconds";

const ALL: &[&str] = &[
    INFO,
    START_TIME,
    LEARNER_LAST_STEP_TIME,
    REWARD_MEAN,
    REWARD,
    LOSS,
    PPO,
    OFF_POLICY,
    GRAD_NORM,
    LEARNING_RATE,
    POLICY_VERSION,
    POLICY_LAG,
    MAX_POLICY_LAG,
    DROPPED_STALE_TOTAL,
    GROUPS_DROPPED_TOTAL,
    STALE_REWEIGHTED_TOTAL,
    ROLLOUTS_TOTAL,
    TOKENS_TOTAL,
    REWARD_LATENCY_SECONDS,
    QUEUE_DEPTH,
    REDELIVERIES_TOTAL,
    REJECTED_MESSAGES_TOTAL,
    INTERNAL_FAULTS_TOTAL,
    BUS_OUTAGES_TOTAL,
    SNAPSHOT_BYTES,
    SNAPSHOT_BROADCAST_SECONDS,
    EVAL_SCORE,
    DISCRIMINATOR_ACCURACY,
    LEARNER_STEPS_TOTAL,
    LEARNER_STEP_SECONDS,
    SKIPPED_BATCHES_TOTAL,
    TASKS_IN_FLIGHT,
    MC_COMPLETIONS_TOTAL,
    MC_DECODE_SECONDS,
    STAGE_SECONDS,
];

/// Every metric name caprl exports (histograms by base name, without the
/// `_bucket`/`_sum`/`_count` series Prometheus derives from them).
pub fn all_metric_names() -> &'static [&'static str] {
    ALL
}

/// Names of the metrics that are histograms (they appear in PromQL as
/// `<name>_bucket`, `<name>_sum` and `<name>_count`).
pub fn histogram_names() -> &'static [&'static str] {
    &[
        REWARD,
        POLICY_LAG,
        REWARD_LATENCY_SECONDS,
        SNAPSHOT_BROADCAST_SECONDS,
        LEARNER_STEP_SECONDS,
        MC_DECODE_SECONDS,
        STAGE_SECONDS,
    ]
}

/// Whether `series` (a name as written in PromQL) is one caprl exports:
/// a name of [`all_metric_names`], or a histogram's `_bucket`/`_sum`/`_count` (feature
/// `test-support`: the tests that hold dashboards and alerts to the exported names).
#[cfg(any(test, feature = "test-support"))]
pub fn is_known_series(series: &str) -> bool {
    if ALL.contains(&series) {
        return true;
    }
    ["_bucket", "_sum", "_count"].iter().any(|suffix| {
        series
            .strip_suffix(suffix)
            .is_some_and(|base| histogram_names().contains(&base))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_prometheus_conventions() {
        for name in all_metric_names() {
            assert!(name.starts_with("caprl_"), "{name} lacks the caprl_ prefix");
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
                "{name} is not snake_case ascii"
            );
        }
        let mut sorted = all_metric_names().to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(
            sorted.len(),
            all_metric_names().len(),
            "duplicate metric name"
        );
        for h in histogram_names() {
            assert!(all_metric_names().contains(h));
        }
    }

    #[test]
    fn histogram_series_are_known_but_typos_are_not() {
        assert!(is_known_series("caprl_policy_lag_versions_bucket"));
        assert!(is_known_series("caprl_learner_steps_total"));
        assert!(!is_known_series("caprl_learner_steps_total_bucket"));
        assert!(!is_known_series("caprl_learner_step_total"));
    }
}
