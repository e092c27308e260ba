//! The `[runtime]` section of the run config: how actors, reward workers and the learner
//! cooperate (re-exported by [`super::schema`]). Its bus keys are checked by the bus
//! ([`crate::bus::BusOptions::CHECKS`]), the rest by the learner that reads them.

use serde::{Deserialize, Serialize};

use super::schema::Dtype;

/// `[runtime]`: how actors, reward workers and the learner cooperate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RuntimeConfig {
    pub mode: Mode,
    /// Namespaces subjects and buckets; `[a-z0-9-]+`.
    pub run_id: String,
    /// Async: rollouts older than this many versions are dropped or reweighted.
    pub max_policy_lag: u64,
    /// Async: what happens to rollouts older than `max_policy_lag`.
    pub stale_rollouts: StaleRollouts,
    /// Async: how sequences sampled by an older policy are weighted (`learner::off_policy`).
    pub off_policy_correction: OffPolicyCorrection,
    /// Async: whether the ratio `π/μ` is one per caption or one per token.
    pub is_level: IsLevel,
    /// Async, truncated IS: ratios above this are cut to it; > 0.
    pub is_clip: f64,
    /// Async, masked IS: sequences (or tokens) whose ratio is below this get no gradient; >= 0.
    pub is_mask_low: f64,
    /// Async, masked IS: ... or above this; > `is_mask_low`.
    pub is_mask_high: f64,
    /// The dtype policy snapshots travel in (`bf16` halves the bytes every actor fetches; the
    /// learner keeps f32 weights, actors load them into their own dtype).
    pub snapshot_dtype: Dtype,
    /// Async: the learner publishes its policy every this many versions (actors fetch each
    /// one), so the broadcast costs 1/`snapshot_every` per step; 1 in sync mode, at most
    /// `max_policy_lag + 1`.
    pub snapshot_every: u64,
    /// Where the learner writes policy snapshots as files that actors and reward workers map
    /// instead of fetching them through NATS (a directory on their one host, or a volume they all
    /// mount); "" sends them through the run's NATS object store. `caprl local` sets
    /// `<run_dir>/snapshots` when this is "".
    pub snapshot_dir: String,
    /// Through the object store, a policy version is stored whole every this many published
    /// versions and as a delta against the one before in between (when the delta is less than
    /// half the snapshot: bf16 snapshots at RL learning rates); 1 stores every version whole.
    pub snapshot_full_every: u64,
    /// A directory on each host where the readers of the object store (actors, reward workers)
    /// share the versions they fetch: the first to need a version fetches it, the host's others
    /// read it there, each copy checked (a host-local disk: an `emptyDir` shared by a pod's
    /// containers, or a node's directory). "" (the default): every reader fetches its own.
    /// Not used with `snapshot_dir`, whose files every reader maps anyway.
    pub snapshot_cache_dir: String,
    /// With `snapshot_dir`: keep the files as the object store keeps versions, whole every
    /// `snapshot_full_every` and as deltas in between, for a volume shared across hosts (NFS),
    /// where each reader's read of a whole file crosses the network. Off (the default), every
    /// version is a whole file, which readers on one host map at memory speed.
    pub snapshot_file_deltas: bool,
    /// Credit-based backpressure: tasks outstanding at once; >= 1.
    pub tasks_in_flight: u32,
    /// >= 1.
    pub images_per_task: u32,
    /// Redelivery after this many seconds without ack; >= 1.
    pub ack_wait_secs: u64,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            mode: Mode::Sync,
            run_id: "default".to_string(),
            max_policy_lag: 2,
            stale_rollouts: StaleRollouts::Drop,
            off_policy_correction: OffPolicyCorrection::TruncatedIs,
            is_level: IsLevel::Sequence,
            is_clip: 1.0,
            is_mask_low: 0.5,
            is_mask_high: 2.0,
            snapshot_dtype: Dtype::F32,
            snapshot_every: 1,
            snapshot_dir: String::new(),
            snapshot_full_every: 10,
            snapshot_cache_dir: String::new(),
            snapshot_file_deltas: false,
            tasks_in_flight: 8,
            images_per_task: 8,
            ack_wait_secs: 30,
        }
    }
}

/// Async mode: what the learner does with a rollout older than `max_policy_lag`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StaleRollouts {
    /// Drop it and decode its images again under the current policy.
    Drop,
    /// Train on it with the truncated importance weight `min(is_clip, π/μ)`, like any rollout
    /// of an older policy.
    Reweight,
}

/// Async mode: the importance weight `w` of a sequence (or token) sampled by an older policy,
/// from its ratio `ρ = π/μ`; the current policy's own sequences always have `w = 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OffPolicyCorrection {
    /// `w = min(ρ, is_clip)` (V-trace's truncated IS; verl's and OpenRLHF's "TIS").
    TruncatedIs,
    /// `w = ρ` inside `[is_mask_low, is_mask_high]`, 0 (no gradient) outside ("MIS").
    MaskedIs,
    /// `w = 1`: the older policies' sequences are trained on as if on-policy.
    None,
}

/// Async mode: whether importance ratios are taken per caption or per token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IsLevel {
    /// `ρ = π(y)/μ(y)`, the whole caption as one action (SCST's bandit view).
    Sequence,
    /// `ρₜ = π(wₜ)/μ(wₜ)` for each token.
    Token,
}

/// `sync`: every rollout of a step comes from the current policy; `async`:
/// actors run ahead within `max_policy_lag`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    Sync,
    Async,
}
