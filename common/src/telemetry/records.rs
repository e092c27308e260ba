//! The records of a run log, one per kind of `run.jsonl` line: steps, evaluations, resumes
//! and sample captions. Non-finite floats are written as `null` (JSON has no NaN) and read
//! back as NaN.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

/// One optimizer step of the learner.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    /// Optimizer step, counted from 1 over the whole run (resumes continue it).
    pub step: u64,
    /// Pass over the training images the step's batch came from.
    #[serde(default)]
    pub epoch: u64,
    /// Which objective ran (`xe`, `scst`, `sle`, `wtf-rl`, ...).
    #[serde(default)]
    pub phase: String,
    /// Policy version the step produced.
    pub policy_version: u64,
    /// RL steps: the version the step's snapshot had on the bus (what actors saw). It only ever
    /// grows over a run, resumes included, while a resumed learner repeats `step` and
    /// `policy_version` from its checkpoint on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_version: Option<u64>,
    /// Value of each loss term (`total`, `pg`, `xe`, `diversity`, `disc`, ...).
    #[serde(default, deserialize_with = "map_null_as_nan")]
    pub losses: BTreeMap<String, f64>,
    /// Mean reward of the batch per component (`cider`, `clip`, ..., `total`).
    #[serde(default, deserialize_with = "map_null_as_nan")]
    pub rewards: BTreeMap<String, f64>,
    /// Global L2 norm of the gradient before clipping.
    #[serde(default = "nan", deserialize_with = "null_as_nan")]
    pub grad_norm: f64,
    /// Learning rate of the step.
    #[serde(default = "nan", deserialize_with = "null_as_nan")]
    pub lr: f64,
    /// Caption tokens generated per second since the previous step.
    #[serde(default = "nan", deserialize_with = "null_as_nan")]
    pub tokens_per_s: f64,
    /// Rollouts scored per second since the previous step.
    #[serde(default = "nan", deserialize_with = "null_as_nan")]
    pub rollouts_per_s: f64,
    /// Mean policy lag (`v_learner - v_rollout`) of the batch's rollouts.
    #[serde(default = "nan", deserialize_with = "null_as_nan")]
    pub lag: f64,
    /// Largest policy lag among the batch's rollouts; async mode keeps it at
    /// most `runtime.max_policy_lag`.
    #[serde(default)]
    pub max_lag: u64,
    /// Mean importance weight applied to the batch's sequences sampled by an
    /// older policy (async mode; decoupled PPO: to `π_old/μ`); NaN (`null`) when
    /// the batch has none.
    #[serde(default = "nan", deserialize_with = "null_as_nan")]
    pub importance_weight: f64,
    /// Async mode's off-policy correction: `stale_sequences`, `weight_mean`,
    /// `weight_min`, `weight_max`, `cut_fraction` (truncated or masked), `ratio_mean`.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "map_null_as_nan"
    )]
    pub off_policy: BTreeMap<String, f64>,
    /// Rollouts dropped as stale during this step.
    #[serde(default)]
    pub dropped_stale: u64,
    /// Rollouts past `max_policy_lag` trained on with a truncated importance weight.
    #[serde(default)]
    pub stale_reweighted: u64,
    /// PPO updates: `clip_fraction`, `approx_kl`, `ratio_mean`, `ratio_min`, `ratio_max`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ppo: BTreeMap<String, f64>,
    /// Dynamic sampling: images dropped because their samples all scored the same.
    #[serde(default)]
    pub groups_dropped: u64,
    /// Rollout tasks the learner published during this step.
    #[serde(default)]
    pub tasks_issued: u64,
    /// Scored results the step used whose task this learner did not publish:
    /// a resumed learner's predecessor's, found in JetStream.
    #[serde(default)]
    pub results_found: u64,
    /// Ids of the tasks whose scored rollouts the step trained on, ascending (RL steps).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub task_ids: Vec<u64>,
    /// Scored results dropped during this step because their task's result was already
    /// used or held (a redelivery, a role run twice).
    #[serde(default)]
    pub duplicates: u64,
    /// Messages the learner rejected during this step, by reason (the labels of
    /// `caprl_rejected_messages_total`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub rejected: BTreeMap<String, u64>,
    /// Wall seconds of the step.
    #[serde(default = "nan", deserialize_with = "null_as_nan")]
    pub seconds: f64,
    /// RL steps: the learner's seconds in each stage of the step (`snapshot_serialise`,
    /// `wait_results`, `forward`, ...; see `telemetry::stages`); the rest of `seconds` is
    /// bookkeeping.
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        deserialize_with = "map_null_as_nan"
    )]
    pub stages: BTreeMap<String, f64>,
    /// Wall clock at the end of the step, milliseconds since the Unix epoch
    /// (`RunLog::log_step` fills it in when left 0).
    #[serde(default)]
    pub unix_ms: u64,
}

/// One evaluation pass.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EvalRecord {
    /// Optimizer step the evaluated weights come from.
    pub step: u64,
    #[serde(default)]
    pub epoch: u64,
    /// Which split was scored (`val`, `test`).
    pub split: String,
    /// Metric name to score (`cider_d`, `bleu4`, `rouge_l`, `meteor_free`, ...).
    #[serde(default, deserialize_with = "map_null_as_nan")]
    pub metrics: BTreeMap<String, f64>,
    /// Wall clock, milliseconds since the Unix epoch (filled in when left 0).
    #[serde(default)]
    pub unix_ms: u64,
}

/// A learner started with `--resume`: the checkpoint it continued from, or
/// none when it found nothing to resume and started a new run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ResumeRecord {
    /// Optimizer step of the checkpoint resumed from; `None`: a new run.
    pub from_step: Option<u64>,
    /// The checkpoint directory resumed from.
    pub checkpoint: Option<String>,
    /// Wall clock, milliseconds since the Unix epoch (filled in when left 0).
    #[serde(default)]
    pub unix_ms: u64,
}

/// The captions of one fixed validation image at one evaluation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SampleCaption {
    /// Image id in the data set.
    pub image: String,
    /// Greedy decode of the evaluated weights.
    pub greedy: String,
    /// Top beam (of width `decode.beam`).
    pub beam: String,
    /// The image's reference captions.
    #[serde(default)]
    pub refs: Vec<String>,
}

/// Sample captions recorded at one evaluation, so a reader sees how the
/// captions of the same images change over training.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SamplesRecord {
    /// Optimizer step the evaluated weights come from.
    pub step: u64,
    #[serde(default)]
    pub epoch: u64,
    /// Phase of the evaluated weights (`xe`, `scst`, ...).
    #[serde(default)]
    pub phase: String,
    pub images: Vec<SampleCaption>,
    /// Wall clock, milliseconds since the Unix epoch (filled in when left 0).
    #[serde(default)]
    pub unix_ms: u64,
}

fn nan() -> f64 {
    f64::NAN
}

fn null_as_nan<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

fn map_null_as_nan<'de, D: Deserializer<'de>>(
    d: D,
) -> std::result::Result<BTreeMap<String, f64>, D::Error> {
    let map = BTreeMap::<String, Option<f64>>::deserialize(d)?;
    Ok(map
        .into_iter()
        .map(|(k, v)| (k, v.unwrap_or(f64::NAN)))
        .collect())
}
