//! How the learner drives the roles ([`DriverOptions`]), read from the checked run config
//! with the rules of its `[runtime]` keys.

use std::time::Duration;

use caprl_common::config::{Mode, RunConfig, StaleRollouts};
use caprl_model::model::DType;
use caprl_wire::check::{outside, toml_int, Check, TOML_INT};
use caprl_wire::Sampling;

use crate::objective::{CheckedConfig, Decodes, Objective};

/// How the learner drives the roles; from `[runtime]`, `[train]` and `[decode]`.
#[derive(Debug, Clone)]
pub struct DriverOptions {
    /// `runtime.mode = "sync"`.
    pub sync: bool,
    pub tasks_in_flight: usize,
    pub images_per_task: usize,
    /// Images per optimizer step (`train.batch_size`); fixes the tasks per step.
    pub batch_size: usize,
    /// What actors decode of each image (the objective's choice).
    pub decodes: Decodes,
    /// What the samples are drawn from.
    pub sampling: Sampling,
    /// Forbid EOS after bad-ending words in every decode.
    pub remove_bad_endings: bool,
    /// Groups of diverse beam search of the beam decode; 1 = plain beam search.
    pub beam_groups: u32,
    /// Diversity penalty λ between beam groups.
    pub diversity_lambda: f32,
    /// The run seed; task seeds derive from (seed, task id).
    pub seed: u64,
    pub max_policy_lag: u64,
    /// Async: what happens to a rollout older than `max_policy_lag`.
    pub stale_rollouts: StaleRollouts,
    pub max_message_bytes: usize,
    /// Snapshots kept in the store besides the newest.
    pub keep_snapshots: u64,
    /// The dtype the policy's weights travel in (`runtime.snapshot_dtype`).
    pub snapshot_dtype: DType,
    /// Async: a snapshot is published every this many versions (`runtime.snapshot_every`;
    /// 1 = every version, the only value sync mode takes).
    pub snapshot_every: u64,
    /// How long the learner waits for a result before it says what it is waiting for, and
    /// checks that some role can do the work (`runtime.ack_wait_secs`, held to 5 s – 5 min).
    pub report_wait_after: Duration,
}

impl DriverOptions {
    /// The run's driver settings; the objective decides what actors decode.
    pub fn for_run(cfg: &CheckedConfig) -> DriverOptions {
        Self::of(cfg)
    }

    /// [`DriverOptions::for_run`] of a config whose objective has not been checked yet (the
    /// check itself builds the options to hold them to [`DriverOptions::CHECKS`]).
    pub(crate) fn of(cfg: &RunConfig) -> DriverOptions {
        DriverOptions {
            sync: cfg.runtime.mode == Mode::Sync,
            tasks_in_flight: cfg.runtime.tasks_in_flight as usize,
            images_per_task: cfg.runtime.images_per_task as usize,
            batch_size: cfg.train.batch_size as usize,
            decodes: Objective::from_config(cfg).decodes(cfg),
            sampling: cfg.decode.sampling(),
            remove_bad_endings: cfg.decode.remove_bad_endings,
            beam_groups: cfg.decode.beam_groups,
            diversity_lambda: cfg.decode.diversity_lambda as f32,
            seed: cfg.seed,
            max_policy_lag: cfg.runtime.max_policy_lag,
            stale_rollouts: cfg.runtime.stale_rollouts,
            max_message_bytes: cfg.nats.max_message_bytes as usize,
            keep_snapshots: 2,
            snapshot_dtype: cfg.runtime.snapshot_dtype.into(),
            snapshot_every: cfg.runtime.snapshot_every,
            report_wait_after: Duration::from_secs(cfg.runtime.ack_wait_secs.clamp(5, 300)),
        }
    }

    #[rustfmt::skip]
    pub const CHECKS: &[Check<DriverOptions>] = &[
        Check { key: "runtime.tasks_in_flight", allowed: ">= 1", violation: |o| outside(o.tasks_in_flight, 1..) },
        Check { key: "runtime.images_per_task", allowed: ">= 1", violation: |o| outside(o.images_per_task, 1..) },
        Check { key: "runtime.max_policy_lag", allowed: TOML_INT, violation: |o| toml_int(o.max_policy_lag) },
        Check {
            key: "runtime.snapshot_every",
            allowed: "1 in sync mode (a sync task is decoded by exactly the learner's policy), 1..=max_policy_lag + 1 in async mode (the oldest published policy must stay within the lag bound)",
            violation: |o| {
                let (most, context) = match o.sync {
                    true => (1, " in sync mode".to_string()),
                    false => (o.max_policy_lag.saturating_add(1), format!(" with max_policy_lag = {}", o.max_policy_lag)),
                };
                outside(o.snapshot_every, 1..=most).map(|v| format!("{v}{context}"))
            },
        },
    ];
}
