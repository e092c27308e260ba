//! The learner's state machine: weights, optimizer, data cursor and RNG, one
//! gradient step at a time, checkpointed so that a resumed run continues bit
//! for bit where it stopped.
//!
//! - this file: the state, the data order, the XE step and the optimizer update every step
//!   ends in;
//! - `policy_gradient`: the policy-gradient and PPO steps and their losses;
//! - `persist`: checkpoints written and restored.

mod persist;
mod policy_gradient;

use caprl_common::telemetry::stages::{self, Stage};
use caprl_data::{Dataset, Item};
use caprl_model::model::{batch_tokens, inputs_for_rows, on_rayon, CaprlRng, Captioner, RngState};
use caprl_model::optim::{clip_grad_norm, AdamW, AdamWParams};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::critic::Critic;
use crate::error::LearnerError;
use crate::objective::xe;
use crate::off_policy::WeightStats;
use crate::pg::RatioStats;
use caprl_common::config::KlEstimator;

pub use persist::{VALUE_WEIGHTS, WEIGHTS};
pub use policy_gradient::{PgTargets, PpoBatch, PpoOptions};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    Xe,
    Rl,
}

/// Everything besides weights and optimizer moments that a resume needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainState {
    /// Optimizer steps taken so far.
    pub step: u64,
    /// Epoch within the current phase (0-based).
    pub epoch: u64,
    /// Position in this epoch's image order.
    pub cursor: usize,
    pub phase: Phase,
    /// Incremented after every applied update; snapshots carry it (plus `version_offset`).
    pub policy_version: u64,
    /// What the driver adds to `policy_version` on the bus, so that a resumed learner never
    /// publishes a version its predecessor already did ([`crate::driver::Driver::continue_versions`]).
    #[serde(default)]
    pub version_offset: u64,
    /// Batches skipped because a reward, loss or gradient was not finite.
    pub skipped_batches: u64,
    /// RL collection rounds beyond one per step (dynamic sampling's refills, and the rounds of
    /// skipped steps): round `step + extra_rounds` is the next, and names its tasks.
    #[serde(default)]
    pub extra_rounds: u64,
    dropout_rng: RngState,
}

/// What one step did.
#[derive(Debug, Clone, Default)]
pub struct StepStats {
    pub loss: f32,
    pub grad_norm: f32,
    pub lr: f64,
    /// Tokens the step trained on (masked count).
    pub tokens: usize,
    /// True when the batch was skipped (non-finite reward, loss or gradient).
    pub skipped: bool,
    /// Named parts of `loss` (`pg`, `value`, `kl`, `entropy`) when it has several.
    pub parts: Vec<(&'static str, f32)>,
    /// PPO updates: the ratios `π/μ` over all passes (clip fraction, approximate KL, ...).
    pub ratios: Option<RatioStats>,
    /// Async mode: the importance weights of the older policies' captions.
    pub off_policy: Option<WeightStats>,
}

/// Per-step knobs (from `[optim]` and `[train]`).
#[derive(Debug, Clone, Copy)]
pub struct StepOptions {
    pub lr: f64,
    /// Global-norm clip; 0 = off.
    pub grad_clip: f64,
    pub label_smoothing: f32,
    pub entropy_coef: f32,
    /// Weight of `KL(π ‖ π_XE)` in the loss; needs [`Trainer::set_reference`].
    pub kl_coef: f32,
    /// How that KL is estimated.
    pub kl_estimator: KlEstimator,
    /// Learning rate of the value head (mc-pg, actor-critic).
    pub value_lr: f64,
}

pub struct Trainer {
    pub model: Captioner,
    /// The value head of mc-pg and actor-critic ([`Trainer::ensure_critic`]).
    pub critic: Option<Critic>,
    /// The frozen XE model of the KL regulariser ([`Trainer::set_reference`]).
    reference: Option<Captioner>,
    opt: AdamW,
    dropout_rng: CaprlRng,
    seed: u64,
    pub state: TrainState,
}

impl Trainer {
    pub fn new(model: Captioner, adam: AdamWParams, seed: u64) -> Result<Self, LearnerError> {
        let opt = AdamW::new(model.varmap(), adam)?;
        let dropout_rng = CaprlRng::with_stream(seed, 7);
        let state = TrainState {
            step: 0,
            epoch: 0,
            cursor: 0,
            phase: Phase::Xe,
            policy_version: 0,
            version_offset: 0,
            skipped_batches: 0,
            extra_rounds: 0,
            dropout_rng: dropout_rng.state(),
        };
        Ok(Self {
            model,
            critic: None,
            reference: None,
            opt,
            dropout_rng,
            seed,
            state,
        })
    }

    /// Adds a fresh value head unless there is one (restored from a checkpoint, say).
    pub fn ensure_critic(&mut self, adam: AdamWParams) -> Result<(), LearnerError> {
        if self.critic.is_none() {
            let hidden = self.model.config().model.state_dim();
            let device = self.model.device().clone();
            self.critic = Some(Critic::new(hidden, &device, adam, self.seed)?);
        }
        Ok(())
    }

    /// Sets the frozen model of the KL regulariser (the XE model RL started from).
    pub fn set_reference(&mut self, reference: Captioner) {
        self.reference = Some(reference);
    }

    /// Switches phase (XE → RL): epochs and cursor restart, weights and step count stay.
    /// The optimizer's moments restart too, as when self-critical.pytorch starts SCST
    /// from an XE checkpoint.
    pub fn enter_phase(&mut self, phase: Phase, adam: AdamWParams) -> Result<(), LearnerError> {
        if self.state.phase != phase {
            self.state.phase = phase;
            self.state.epoch = 0;
            self.state.cursor = 0;
            self.opt = AdamW::new(self.model.varmap(), adam)?;
        }
        Ok(())
    }

    /// The next `batch` item indices of this epoch's shuffled order over `n_items`,
    /// or `None` at the end of the epoch (which then advances to the next).
    pub fn next_batch(&mut self, n_items: usize, batch: usize) -> Option<Vec<usize>> {
        if self.state.cursor >= n_items {
            self.state.epoch += 1;
            self.state.cursor = 0;
            return None;
        }
        let rows = self
            .upcoming_batches(n_items, batch, 1, self.state.epoch + 1)
            .pop()?;
        self.state.cursor += rows.len();
        Some(rows)
    }

    /// Whether this epoch's order has batches left ([`Trainer::next_batch`] would hand one out
    /// rather than end the epoch).
    pub fn epoch_has_more(&self, n_items: usize) -> bool {
        self.state.cursor < n_items
    }

    /// The item indices of the next `count` batches, in the order [`Trainer::next_batch`]
    /// hands them out (it takes the first), up to the end of epoch `epochs - 1` (async mode
    /// issues the others ahead).
    pub fn upcoming_batches(
        &self,
        n_items: usize,
        batch: usize,
        count: usize,
        epochs: u64,
    ) -> Vec<Vec<usize>> {
        let (mut epoch, mut cursor) = (self.state.epoch, self.state.cursor);
        let mut order: Option<Vec<usize>> = None;
        let mut out = Vec::with_capacity(count);
        while out.len() < count && n_items > 0 {
            if cursor >= n_items {
                (epoch, cursor, order) = (epoch + 1, 0, None);
            }
            if epoch >= epochs {
                break;
            }
            let order = order
                .get_or_insert_with(|| epoch_order(self.seed, self.state.phase, epoch, n_items));
            let end = (cursor + batch).min(n_items);
            out.push(order[cursor..end].to_vec());
            cursor = end;
        }
        out
    }

    /// One teacher-forced cross-entropy step on all references of `items`.
    pub fn xe_step(
        &mut self,
        data: &Dataset,
        items: &[&Item],
        opts: StepOptions,
    ) -> Result<StepStats, LearnerError> {
        let device = self.model.device().clone();
        on_rayon(&device, || self.xe_step_here(data, items, opts))
    }

    fn xe_step_here(
        &mut self,
        data: &Dataset,
        items: &[&Item],
        opts: StepOptions,
    ) -> Result<StepStats, LearnerError> {
        let forward = stages::Timer::start(Stage::Forward);
        let cfg = self.model.config().clone();
        let mut rows = Vec::new();
        let mut targets = Vec::new();
        for item in items {
            for t in item.targets(&data.vocab, cfg.max_len) {
                rows.push(item.row);
                targets.push(t);
            }
        }
        let device = self.model.device().clone();
        let x = inputs_for_rows(data, &rows, &cfg, &device)?;
        let seqs = batch_tokens(&targets, &device)?;
        self.model.set_running_norm(false);
        let (loss, mask) = if opts.label_smoothing > 0.0 {
            let tf = self
                .model
                .teacher_forced(&x, &seqs, Some(&mut self.dropout_rng))?;
            let mask = self.model.token_mask(&seqs)?;
            let loss = xe::loss(&tf.logprobs_full, &seqs, &mask, opts.label_smoothing)?;
            (loss, mask)
        } else {
            // Without smoothing only the targets' log-probabilities are needed.
            let (logp, mask) = self
                .model
                .token_logprobs(&x, &seqs, Some(&mut self.dropout_rng))?;
            (xe::nll(&logp, &mask)?, mask)
        };
        let tokens = token_count(&mask)?;
        drop(forward);
        let stats = self.update(loss, opts, tokens)?;
        if !stats.skipped {
            self.advance();
        }
        Ok(stats)
    }

    fn skip(&mut self, reason: &str) -> StepStats {
        self.state.skipped_batches += 1;
        tracing::warn!("skipping batch: non-finite {reason}");
        StepStats {
            skipped: true,
            ..StepStats::default()
        }
    }

    /// One optimizer update from `loss`; [`Trainer::advance`] then counts the step.
    fn update(
        &mut self,
        loss: candle_core::Tensor,
        opts: StepOptions,
        tokens: usize,
    ) -> Result<StepStats, LearnerError> {
        let value = loss.to_dtype(candle_core::DType::F32)?.to_scalar::<f32>()?;
        if !value.is_finite() {
            return Ok(self.skip("loss"));
        }
        let backward = stages::Timer::start(Stage::Backward);
        let mut grads = loss.backward()?;
        let vars = self.opt.vars();
        let norm = if opts.grad_clip > 0.0 {
            clip_grad_norm(&mut grads, &vars, opts.grad_clip)?
        } else {
            caprl_model::optim::grad_norm(&grads, &vars)?
        };
        drop(backward);
        if !norm.is_finite() {
            return Ok(self.skip("gradient"));
        }
        let _optimizer = stages::Timer::start(Stage::Optimizer);
        if let Some(critic) = self.critic.as_mut() {
            let vars = critic.opt.vars();
            if vars.iter().any(|v| grads.get(v.as_tensor()).is_some()) {
                if opts.grad_clip > 0.0 {
                    clip_grad_norm(&mut grads, &vars, opts.grad_clip)?;
                }
                critic.opt.step(&grads, opts.value_lr)?;
            }
        }
        self.opt.step(&grads, opts.lr)?;
        Ok(StepStats {
            loss: value,
            grad_norm: norm as f32,
            lr: opts.lr,
            tokens,
            ..StepStats::default()
        })
    }

    /// Counts one step: a new policy version, and the dropout stream's state for a resume.
    fn advance(&mut self) {
        self.state.step += 1;
        self.state.policy_version += 1;
        self.state.dropout_rng = self.dropout_rng.state();
    }
}

/// The unmasked tokens of a `[N, T]` mask.
fn token_count(mask: &candle_core::Tensor) -> Result<usize, LearnerError> {
    Ok(scalar(&mask.sum_all()?)? as usize)
}

fn scalar(t: &candle_core::Tensor) -> Result<f32, LearnerError> {
    Ok(t.to_dtype(candle_core::DType::F32)?.to_scalar::<f32>()?)
}

/// The shuffled item order of one epoch: a pure function of (seed, phase, epoch),
/// so a resumed run visits the same images in the same order.
fn epoch_order(seed: u64, phase: Phase, epoch: u64, n: usize) -> Vec<usize> {
    let tag = match phase {
        Phase::Xe => 0x5845u64,
        Phase::Rl => 0x524cu64,
    };
    let mut rng = ChaCha8Rng::seed_from_u64(
        seed ^ tag.rotate_left(32) ^ epoch.wrapping_mul(0x9E37_79B9_7F4A_7C15),
    );
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(&mut rng);
    order
}
