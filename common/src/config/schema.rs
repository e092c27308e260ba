//! The serde structs of the run config, one per TOML section.
//!
//! Field names, sections and defaults are the contract every role codes
//! against (see the project's config schema). Unknown keys are refused and
//! missing keys take the defaults below, which `default.toml` mirrors.
//! Floats are `f64` so that a value written back to TOML reads exactly as the
//! user wrote it (`0.2`, not `0.20000000298023224`).

use caprl_score::Distance;
use serde::{Deserialize, Serialize};

use super::reward_spec::RewardSpec;
pub use super::runtime_section::{
    IsLevel, Mode, OffPolicyCorrection, RuntimeConfig, StaleRollouts,
};
pub use crate::bus::NatsConfig;
use caprl_data::DataConfig;
/// `dtype` and the `[model]` section deserialise straight into the model's own types.
pub use caprl_model::model::{DecodeConfig, Dtype, ModelConfig, ModelKind, RnnKind};
use caprl_model::model::{DeviceSpec, MAX_CAPTION_WORDS, MAX_CAPTION_WORDS_ALLOWED};
pub use caprl_model::optim::{OptimConfig, ScheduleKind};
use caprl_wire::check::{outside, toml_int, Check, TOML_INT};

/// The whole run configuration: top-level keys plus one struct per section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RunConfig {
    /// Every random stream of the run derives from this seed.
    pub seed: u64,
    /// `cpu` or `cuda:N`.
    pub device: DeviceSpec,
    /// Floating-point type of the learner's and actors' forward passes. Master weights,
    /// optimizer moments, snapshots and checkpoints stay f32.
    pub dtype: Dtype,
    /// Run log, config copy and (by default) checkpoints live here.
    pub run_dir: String,
    pub data: DataConfig,
    pub model: ModelConfig,
    pub decode: DecodeConfig,
    pub train: TrainConfig,
    pub reward: RewardConfig,
    pub optim: OptimConfig,
    pub runtime: RuntimeConfig,
    pub nats: NatsConfig,
    pub checkpoint: CheckpointConfig,
    pub clip: ClipConfig,
}

impl RunConfig {
    /// The rules of the top-level keys, and `data.max_len`'s: the longest caption the models
    /// take bounds it.
    #[rustfmt::skip]
    pub const CHECKS: &[Check<RunConfig>] = &[
        Check { key: "seed", allowed: TOML_INT, violation: |c| toml_int(c.seed) },
        Check { key: "run_dir", allowed: "a non-empty path", violation: |c| c.run_dir.is_empty().then(|| "\"\"".into()) },
        Check { key: "data.max_len", allowed: MAX_CAPTION_WORDS_ALLOWED, violation: |c| outside(c.data.max_len as usize, 1..=MAX_CAPTION_WORDS) },
    ];
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            seed: 42,
            device: DeviceSpec::Cpu,
            dtype: Dtype::F32,
            run_dir: "runs/latest".to_string(),
            data: DataConfig::default(),
            model: ModelConfig::default(),
            decode: DecodeConfig::default(),
            train: TrainConfig::default(),
            reward: RewardConfig::default(),
            optim: OptimConfig::default(),
            runtime: RuntimeConfig::default(),
            nats: NatsConfig::default(),
            checkpoint: CheckpointConfig::default(),
            clip: ClipConfig::default(),
        }
    }
}

/// `[train]`: the objective and its schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrainConfig {
    pub objective: ObjectiveName,
    /// XE warm-start epochs; 0 = start RL at once.
    pub xe_epochs: u32,
    /// RL epochs after XE.
    pub rl_epochs: u32,
    /// Images per step; >= 1.
    pub batch_size: u32,
    /// Samples per image for RL; >= 1 (>= 2 for `sle` or a group baseline).
    pub samples: u32,
    /// The advantage estimator of the sampled objectives (`scst`, `sle`, `mc-pg`, `actor-critic`).
    pub baseline: Baseline,
    /// [0, 1).
    pub label_smoothing: f64,
    /// SLE weight α of the quality term; [0, 1].
    pub sle_alpha: f64,
    /// What WTF / WTF-RL do to the rewards before weighting (eq. 3 uses them as they are).
    pub wtf_baseline: WtfBaseline,
    /// K Monte-Carlo completions per step for `mc-pg`; >= 1.
    pub mc_rollouts: u32,
    /// Entropy bonus; >= 0.
    pub entropy_coef: f64,
    /// KL penalty to the XE model; >= 0.
    pub kl_coef: f64,
    /// How the KL to the XE model is estimated.
    pub kl_estimator: KlEstimator,
    /// Where the KL penalty goes: a loss term or a reward penalty.
    pub kl_in: KlIn,
    /// DAPO's dynamic sampling: drop images whose samples all score the same (a group baseline
    /// gives them no gradient) and fill the batch with the next images of the epoch.
    pub dynamic_sampling: bool,
    /// PPO-style reuse: passes over each scored batch; 0 = one plain policy-gradient step.
    pub ppo_epochs: u32,
    /// Minibatches per PPO pass; >= 1.
    pub ppo_minibatches: u32,
    /// PPO: per-token ratio or GSPO's per-caption one.
    pub ppo_ratio: PpoRatio,
    /// PPO: whose policy the ratio's denominator is (decoupled PPO: the learner's).
    pub ppo_proximal: PpoProximal,
    /// PPO clip range below 1 (`ρ ≥ 1 − clip_low`); in (0, 1).
    pub clip_low: f64,
    /// PPO clip range above 1 (`ρ ≤ 1 + clip_high`; DAPO raises it above `clip_low`); > 0.
    pub clip_high: f64,
    /// Evaluate on val every N epochs; >= 1.
    pub eval_every: u32,
    /// Val images per evaluation; 0 = the whole split.
    pub eval_images: u32,
    /// Fixed val images (the first N) whose greedy and beam captions are
    /// recorded at every evaluation, so the report shows them change; 0 = none.
    pub sample_images: u32,
    /// Also write TensorBoard event files to `RUN_DIR/tb/`.
    pub tensorboard: bool,
    /// Stop after this many steps; 0 = no limit.
    pub max_steps: u64,
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            objective: ObjectiveName::Scst,
            xe_epochs: 2,
            rl_epochs: 1,
            batch_size: 32,
            samples: 5,
            baseline: Baseline::Greedy,
            label_smoothing: 0.0,
            sle_alpha: 0.75,
            wtf_baseline: WtfBaseline::Positive,
            mc_rollouts: 3,
            entropy_coef: 0.0,
            kl_coef: 0.0,
            kl_estimator: KlEstimator::Full,
            kl_in: KlIn::Loss,
            dynamic_sampling: false,
            ppo_epochs: 0,
            ppo_minibatches: 1,
            ppo_ratio: PpoRatio::Token,
            ppo_proximal: PpoProximal::Behaviour,
            clip_low: 0.2,
            clip_high: 0.2,
            eval_every: 1,
            eval_images: 0,
            sample_images: 8,
            tensorboard: true,
            max_steps: 0,
        }
    }
}

/// The training objective `train.objective` names; what each one does is
/// `caprl_learner::objective::Objective`'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ObjectiveName {
    Xe,
    Scst,
    Sle,
    McPg,
    ActorCritic,
    Wtf,
    WtfRl,
}

/// WTF / WTF-RL reward transform (paper 004, eq. 3); the learner's `wtf::Baseline`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WtfBaseline {
    /// Eq. 3 as written: the multiplier is `r` itself.
    None,
    /// `r − r̄` with `r̄` the batch's mean reward over the trained sequences.
    Mean,
    /// `max(r, 0)`: learn only from captions that beat their rivals, never push one down.
    Positive,
}

/// The advantage estimator of the sampled objectives; the learner's `advantage` module has
/// one file per variant with its formula.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Baseline {
    /// `r − b`, `b` = reward of the greedy decode of the same input (SCST, Rennie et al.).
    Greedy,
    /// `r − b`, `b` = mean reward of the *other* samples of the same input (new self-critical,
    /// RLOO; no greedy pass).
    #[serde(alias = "rloo")]
    Mean,
    /// `(r − mean) / (std + ε)` over the samples of one input, each sequence's loss averaged
    /// over its own tokens (GRPO).
    Grpo,
    /// `r − mean` over the samples of one input, no per-sequence length normalisation
    /// (Dr. GRPO).
    DrGrpo,
}

impl Baseline {
    /// Whether the estimator compares each sample with the other samples of its input (and so
    /// needs at least two).
    pub fn is_group(self) -> bool {
        !matches!(self, Baseline::Greedy)
    }
}

/// Estimator of `KL(π ‖ π_ref)` (Schulman, "Approximating KL divergence", 2020), with
/// `log r = log π_ref(w) − log π(w)` at the taken tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KlEstimator {
    /// The exact per-step KL over the whole vocabulary (a loss term only).
    Full,
    /// `k1 = −log r`: unbiased, high variance, can be negative.
    K1,
    /// `k2 = ½ (log r)²`: biased, low variance.
    K2,
    /// `k3 = (r − 1) − log r`: unbiased, low variance, never negative.
    K3,
}

/// Where the KL penalty to the XE model acts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KlIn {
    /// `+ β·KL` in the loss (differentiated).
    Loss,
    /// `r ← r − β·Σₜ kₜ` for each sampled caption before the advantages (not differentiated).
    Reward,
}

/// `[reward]`: what the reward workers compute.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RewardConfig {
    /// Weighted sum of named rewards, e.g. `cider=1,bleu4=0.5`.
    pub spec: RewardSpec,
    /// Where the CIDEr-D reward's document frequencies come from.
    pub df: DfSource,
    /// SLE pairwise distance.
    pub distance: Distance,
    /// CIDEr-D rewards as self-critical.pytorch computes them: `<eos>` appended to every
    /// reference (and so counted in the df) and to every sampled caption that finished, none
    /// to one cut at `max_len` (`score::eos`). Off: pycocoevalcap's plain CIDEr-D. `eval`
    /// scores are the plain ones either way.
    pub cider_eos: bool,
    /// The Python module (a name on `PYTHONPATH` or a `.py` file) whose functions the spec's
    /// `py:<function>` terms name; reward workers serve them through a Python child process.
    pub python: String,
}

impl Default for RewardConfig {
    fn default() -> Self {
        RewardConfig {
            spec: RewardSpec::default(),
            df: DfSource::Train,
            distance: Distance::Bleu,
            cider_eos: true,
            python: String::new(),
        }
    }
}

/// The CIDEr-D reward's document frequencies: precomputed from the training references, or
/// counted over the references of each scored rollout's images (a task's images, as
/// self-critical.pytorch's `CiderD(df="corpus")` counts over each batch it scores).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DfSource {
    Train,
    Corpus,
}

/// PPO (`train.ppo_epochs > 0`): the ratio the clipped surrogate clips.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PpoRatio {
    /// `π(wₜ)/π_old(wₜ)` per token (PPO as OpenRLHF and veRL apply it).
    Token,
    /// GSPO's `(π(y)/π_old(y))^(1/|y|)`, one clipped ratio per caption.
    Sequence,
}

/// PPO: the policy `π_old` of the ratio that is clipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PpoProximal {
    /// The policy that sampled the caption (the actors'): the ratio is also the off-policy
    /// correction.
    Behaviour,
    /// The learner's weights at the step's start (decoupled PPO): the clipped ratio measures
    /// only this update, and the actors' lag is corrected by `runtime.off_policy_correction`
    /// applied to `π_old/μ`.
    Learner,
}

/// `[checkpoint]`: where and how often the learner checkpoints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CheckpointConfig {
    /// "" = `<run_dir>/checkpoints`; see [`RunConfig::checkpoint_dir`].
    pub dir: String,
    /// Keep the last K checkpoints; >= 1.
    pub keep: u32,
    /// >= 1.
    pub every_steps: u64,
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        CheckpointConfig {
            dir: String::new(),
            keep: 3,
            every_steps: 200,
        }
    }
}

/// `[clip]`: the text–image encoders and the discriminator of paper 004's rewards.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClipConfig {
    /// Encoder behind `clip`, `clip-i2t`, `clip-s` and `disc`: a file written by
    /// `caprl clip train`, or a Hugging Face CLIP directory; "" = none.
    pub reward: String,
    /// Frozen encoder for the R@k metrics of `eval`; "" = `reward`'s. Train a separate one
    /// (another seed): evaluating with the encoder the policy was rewarded against flatters it.
    pub eval: String,
    /// Temperature τ of `r_bicont` (eq. 2); > 0.
    pub tau: f64,
    /// Nearest images mined per image for the contrastive image pool.
    pub neighbours: u32,
    /// Discriminator learning rate (online and pre-training); > 0.
    pub disc_lr: f64,
    /// Training images whose GT and XE beam captions pre-train the discriminator.
    pub disc_pretrain_images: u32,
    /// Pre-training epochs over those pairs.
    pub disc_pretrain_epochs: u32,
}

impl Default for ClipConfig {
    fn default() -> Self {
        ClipConfig {
            reward: String::new(),
            eval: String::new(),
            tau: 0.05,
            neighbours: 8,
            disc_lr: 1e-3,
            disc_pretrain_images: 2000,
            disc_pretrain_epochs: 5,
        }
    }
}
