//! The learner's state machine: weights, optimizer, data cursor and RNG, one
//! gradient step at a time, checkpointed so that a resumed run continues bit
//! for bit where it stopped.

use std::path::Path;

use caprl_common::data::{Dataset, Item};
use caprl_common::model::{
    batch_tokens, inputs_for_rows, on_rayon, CaprlRng, Captioner, CaptionerConfig, Device, RngState,
};
use caprl_common::optim::{clip_grad_norm, AdamW, AdamWParams};
use caprl_common::telemetry::stages::{self, Stage};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::batch;
use crate::checkpoint::{self, Checkpoint};
use crate::critic::{self, Critic};
use crate::error::LearnerError;
use crate::off_policy::{self, Correction, WeightStats};
use crate::pg::{ClipRange, LossNorm, RatioStats};
use crate::{gspo, kl, pg, xe};
use caprl_common::config::{KlEstimator, PpoRatio};

/// Which part of the schedule the learner is in.
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

/// What a policy-gradient step trains toward.
#[derive(Debug, Clone, Copy)]
pub enum PgTargets<'a> {
    /// One multiplier per sequence, `Aᵢ` of [`crate::pg::loss`] (SCST, SLE, WTF), averaged as
    /// `norm` says.
    Sequence {
        multipliers: &'a [f32],
        norm: LossNorm,
    },
    /// Per-token value targets `yᵢₜ` (mc-pg's `Q` estimates, actor-critic's returns): the
    /// advantage is `yᵢₜ − v(sᵢₜ)` and the value head is regressed on `y` ([`crate::critic`]).
    Critic(&'a [Vec<f32>]),
    /// A sequence-level loss as [`PgTargets::Sequence`] whose captions sampled by an older
    /// policy carry an importance weight ([`crate::off_policy`]): `behaviour` is each
    /// caption's `log μ` per token, `stale[i]` whether an older policy sampled it.
    OffPolicy {
        multipliers: &'a [f32],
        norm: LossNorm,
        behaviour: &'a [Vec<f32>],
        stale: &'a [bool],
        correction: Correction,
    },
    /// PPO's clipped surrogate ([`crate::pg::clipped_loss`], or GSPO's per-caption
    /// [`crate::gspo::sequence_clipped_loss`]): one advantage per sequence, the per-token
    /// log-probs of the policy `π_old` the ratio is taken to, and optional importance weights
    /// per token (decoupled PPO's `π_old/μ`).
    Clipped {
        advantages: &'a [f32],
        old: &'a [Vec<f32>],
        weights: Option<&'a [Vec<f32>]>,
        ratio: PpoRatio,
        clip: ClipRange,
        norm: LossNorm,
    },
}

impl<'a> PgTargets<'a> {
    /// One multiplier per sequence, averaged over the batch's tokens (self-critical.pytorch).
    pub fn sequence(multipliers: &'a [f32]) -> Self {
        PgTargets::Sequence {
            multipliers,
            norm: LossNorm::Tokens,
        }
    }
}

/// PPO-style reuse of one scored batch: `epochs` passes, each over the sequences in a fresh
/// order cut into `minibatches` optimizer steps.
#[derive(Debug, Clone, Copy)]
pub struct PpoOptions {
    pub epochs: u32,
    pub minibatches: u32,
    pub clip: ClipRange,
    /// Per-token ratios, or GSPO's per-caption one.
    pub ratio: PpoRatio,
    /// Decoupled PPO: `Some` takes the ratio to the learner's weights at the step's start and
    /// weighs each caption's terms by this correction of `π_old/μ`; `None` takes it to `μ`.
    pub proximal: Option<Correction>,
}

/// One scored batch for [`Trainer::ppo_update`]: sequence `i` of image `rows[i]`, with its
/// advantage, the per-token log-probs `log μ` of the policy that decoded it and whether that
/// was an older policy than the learner's.
#[derive(Debug, Clone, Copy)]
pub struct PpoBatch<'a> {
    pub rows: &'a [usize],
    pub seqs: &'a [Vec<u32>],
    pub advantages: &'a [f32],
    pub behaviour: &'a [Vec<f32>],
    pub stale: &'a [bool],
    pub norm: LossNorm,
}

/// One step's loss before the optimizer sees it.
struct PgLoss {
    loss: candle_core::Tensor,
    parts: Vec<(&'static str, f32)>,
    tokens: usize,
    ratios: Option<RatioStats>,
    off_policy: Option<WeightStats>,
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

/// The captioner's weights in a checkpoint directory.
pub const WEIGHTS: &str = "model.safetensors";
const OPTIM: &str = "optim.safetensors";
const STATE: &str = "state.json";
/// The value head's weights (mc-pg, actor-critic).
pub const VALUE_WEIGHTS: &str = "value.safetensors";
const VALUE_OPTIM: &str = "value-optim.safetensors";

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
            let hidden = self.model.config().state_dim();
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
            for t in batch::reference_targets(item, &data.vocab, cfg.max_len) {
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

    /// One policy-gradient step: sequence `i` (tokens ending at EOS) belongs to image
    /// `rows[i]` and is weighted per `targets` (see [`PgTargets`]); the entropy bonus and the
    /// KL penalty are added when their coefficients are set. Non-finite targets skip the
    /// whole batch, which is counted.
    pub fn pg_step(
        &mut self,
        data: &Dataset,
        rows: &[usize],
        seqs: &[Vec<u32>],
        targets: PgTargets,
        opts: StepOptions,
    ) -> Result<StepStats, LearnerError> {
        let device = self.model.device().clone();
        on_rayon(&device, || {
            self.pg_step_here(data, rows, seqs, targets, opts)
        })
    }

    fn pg_step_here(
        &mut self,
        data: &Dataset,
        rows: &[usize],
        seqs: &[Vec<u32>],
        targets: PgTargets,
        opts: StepOptions,
    ) -> Result<StepStats, LearnerError> {
        let finite = match targets {
            PgTargets::Sequence { multipliers, .. } | PgTargets::OffPolicy { multipliers, .. } => {
                multipliers.iter().all(|x| x.is_finite())
            }
            PgTargets::Critic(y) => y.iter().flatten().all(|x| x.is_finite()),
            PgTargets::Clipped { advantages, .. } => advantages.iter().all(|x| x.is_finite()),
        };
        if !finite {
            return Ok(self.skip("reward"));
        }
        let pg = self.pg_loss(data, rows, seqs, targets, opts)?;
        let mut stats = self.update(pg.loss, opts, pg.tokens)?;
        if !stats.skipped {
            self.advance();
        }
        stats.parts = pg.parts;
        stats.ratios = pg.ratios;
        stats.off_policy = pg.off_policy;
        Ok(stats)
    }

    /// PPO-style updates on one scored batch: `ppo.epochs` passes, each over a fresh order of
    /// the sequences (a pure function of seed, step and pass, so a resumed run repeats it) cut
    /// into `ppo.minibatches` clipped optimizer steps. The whole update counts as one step and
    /// one new policy version. Non-finite advantages skip the batch; a minibatch whose loss or
    /// gradient is not finite is skipped alone.
    pub fn ppo_update(
        &mut self,
        data: &Dataset,
        batch: PpoBatch,
        ppo: PpoOptions,
        opts: StepOptions,
    ) -> Result<StepStats, LearnerError> {
        let PpoBatch {
            rows,
            seqs,
            advantages,
            behaviour,
            stale,
            norm,
        } = batch;
        if !advantages.iter().all(|x| x.is_finite()) {
            return Ok(self.skip("reward"));
        }
        let device = self.model.device().clone();
        on_rayon(&device, || {
            let n = seqs.len();
            // Decoupled PPO: the ratio's `π_old` is the weights now, before the first minibatch.
            let (old, weights, off_policy) = match ppo.proximal {
                None => (behaviour.to_vec(), None, None),
                Some(correction) => {
                    let proximal = self.taken_logprobs(data, rows, seqs)?;
                    let lens: Vec<usize> = seqs.iter().map(Vec::len).collect();
                    let (w, stats) =
                        off_policy::weights(correction, &proximal, behaviour, &lens, stale);
                    (proximal, Some(w), Some(stats))
                }
            };
            let per_minibatch = n.div_ceil(ppo.minibatches.max(1) as usize).max(1);
            let mut total = StepStats::default();
            let mut ratios = Vec::new();
            let mut updates = 0usize;
            for pass in 0..ppo.epochs.max(1) {
                let order = ppo_order(self.seed, self.state.step, pass, n);
                for chunk in order.chunks(per_minibatch) {
                    let mb_rows: Vec<usize> = chunk.iter().map(|&i| rows[i]).collect();
                    let mb_seqs: Vec<Vec<u32>> = chunk.iter().map(|&i| seqs[i].clone()).collect();
                    let mb_adv: Vec<f32> = chunk.iter().map(|&i| advantages[i]).collect();
                    let mb_old: Vec<Vec<f32>> = chunk.iter().map(|&i| old[i].clone()).collect();
                    let mb_w: Option<Vec<Vec<f32>>> = weights
                        .as_ref()
                        .map(|w| chunk.iter().map(|&i| w[i].clone()).collect());
                    let targets = PgTargets::Clipped {
                        advantages: &mb_adv,
                        old: &mb_old,
                        weights: mb_w.as_deref(),
                        ratio: ppo.ratio,
                        clip: ppo.clip,
                        norm,
                    };
                    let pg = self.pg_loss(data, &mb_rows, &mb_seqs, targets, opts)?;
                    let stats = self.update(pg.loss, opts, pg.tokens)?;
                    if stats.skipped {
                        continue;
                    }
                    updates += 1;
                    total.loss += stats.loss;
                    total.grad_norm += stats.grad_norm;
                    total.tokens += stats.tokens;
                    total.parts = pg.parts;
                    ratios.extend(pg.ratios);
                }
            }
            if updates == 0 {
                return Ok(StepStats {
                    skipped: true,
                    ..StepStats::default()
                });
            }
            self.advance();
            total.loss /= updates as f32;
            total.grad_norm /= updates as f32;
            total.lr = opts.lr;
            total.ratios = Some(pg::merge_ratio_stats(&ratios));
            total.off_policy = off_policy;
            Ok(total)
        })
    }

    /// The loss of one policy-gradient step on `seqs` of images `rows`, with the entropy bonus
    /// and the KL penalty when their coefficients are set.
    fn pg_loss(
        &mut self,
        data: &Dataset,
        rows: &[usize],
        seqs: &[Vec<u32>],
        targets: PgTargets,
        opts: StepOptions,
    ) -> Result<PgLoss, LearnerError> {
        let _forward = stages::Timer::start(Stage::Forward);
        let cfg = self.model.config().clone();
        let device = self.model.device().clone();
        let x = inputs_for_rows(data, rows, &cfg, &device)?;
        let toks = batch_tokens(seqs, &device)?;
        // Differentiate the policy the samples came from (batch norm on running statistics).
        // A sequence-level loss without entropy or the exact KL needs only the taken tokens'
        // log-probs; the others read the full log-softmax or the hidden states.
        let exact_kl = opts.kl_coef > 0.0 && opts.kl_estimator == KlEstimator::Full;
        let full_pass =
            matches!(targets, PgTargets::Critic(_)) || opts.entropy_coef > 0.0 || exact_kl;
        self.model.set_running_norm(true);
        let pass = if full_pass {
            self.model.teacher_forced(&x, &toks, None).and_then(|tf| {
                let logp = tf
                    .logprobs_full
                    .gather(&toks.unsqueeze(2)?, 2)?
                    .squeeze(2)?;
                Ok((logp, Some(tf)))
            })
        } else {
            let taken = self.model.token_logprobs(&x, &toks, None);
            taken.map(|(logp, _)| (logp, None))
        };
        self.model.set_running_norm(false);
        let (logp, tf) = pass?;
        let full = || {
            tf.as_ref().ok_or_else(|| {
                LearnerError::Invalid("internal: the full teacher-forced pass is missing".into())
            })
        };
        let mask = self.model.token_mask(&toks)?;
        let mut parts = Vec::new();
        let mut ratios = None;
        let mut off_policy = None;
        let mut loss = match targets {
            PgTargets::Sequence { multipliers, norm } => pg::loss(&logp, &mask, multipliers, norm)?,
            PgTargets::OffPolicy {
                multipliers,
                norm,
                behaviour,
                stale,
                correction,
            } => {
                let current: Vec<Vec<f32>> =
                    logp.detach().to_dtype(candle_core::DType::F32)?.to_vec2()?;
                let lens: Vec<usize> = seqs.iter().map(Vec::len).collect();
                let (w, stats) = off_policy::weights(correction, &current, behaviour, &lens, stale);
                off_policy = Some(stats);
                let (_, t) = toks.dims2()?;
                let w = critic::targets_tensor(&w, t, &device)?;
                pg::weighted_loss(&logp, &mask, multipliers, &w, norm)?
            }
            PgTargets::Critic(y) => {
                let critic = self.critic.as_ref().ok_or_else(|| {
                    LearnerError::Invalid(
                        "this objective needs a value head; call ensure_critic first".into(),
                    )
                })?;
                let (_, t) = toks.dims2()?;
                let y = critic::targets_tensor(y, t, &device)?;
                let v = critic.head.forward(&full()?.hidden)?;
                let policy = pg::token_loss(&logp, &mask, &critic::advantages(&y, &v)?)?;
                let value = critic::value_loss(&v, &y, &mask)?;
                parts.push(("pg", scalar(&policy)?));
                parts.push(("value", scalar(&value)?));
                policy.add(&value.to_dtype(policy.dtype())?)?
            }
            PgTargets::Clipped {
                advantages,
                old,
                weights,
                ratio,
                clip,
                norm,
            } => {
                let (_, t) = toks.dims2()?;
                let old = critic::targets_tensor(old, t, &device)?;
                let w = weights
                    .map(|w| critic::targets_tensor(w, t, &device))
                    .transpose()?;
                let (loss, stats) = match ratio {
                    PpoRatio::Token => {
                        pg::clipped_loss(&logp, &old, &mask, advantages, w.as_ref(), (clip, norm))?
                    }
                    PpoRatio::Sequence => gspo::sequence_clipped_loss(
                        &logp,
                        &old,
                        &mask,
                        advantages,
                        w.as_ref(),
                        clip,
                    )?,
                };
                ratios = Some(stats);
                loss
            }
        };
        if opts.entropy_coef > 0.0 {
            let h = pg::entropy(&full()?.logprobs_full, &mask)?;
            parts.push(("entropy", scalar(&h)?));
            loss = (loss - (h * opts.entropy_coef as f64)?)?;
        }
        if opts.kl_coef > 0.0 {
            let reference = self.reference.as_ref().ok_or_else(|| {
                LearnerError::Invalid(
                    "train.kl_coef > 0 needs the XE model as reference (set_reference)".into(),
                )
            })?;
            let kl = match opts.kl_estimator {
                KlEstimator::Full => {
                    let ref_full = reference.teacher_forced(&x, &toks, None)?.logprobs_full;
                    kl::full(&full()?.logprobs_full, &ref_full, &mask)?
                }
                k => {
                    let (ref_logp, _) = reference.token_logprobs(&x, &toks, None)?;
                    kl::estimate(&logp, &ref_logp, &mask, k)?
                }
            };
            parts.push(("kl", scalar(&kl)?));
            loss = (loss + (kl * opts.kl_coef as f64)?)?;
        }
        let tokens = token_count(&mask)?;
        Ok(PgLoss {
            loss,
            parts,
            tokens,
            ratios,
            off_policy,
        })
    }

    /// The reference model's log-probs of each token of `seqs` (images `rows`): the KL penalty
    /// of the rewards (`train.kl_in = "reward"`). `None` without a reference model.
    pub fn reference_logprobs(
        &self,
        data: &Dataset,
        rows: &[usize],
        seqs: &[Vec<u32>],
    ) -> Result<Option<Vec<Vec<f32>>>, LearnerError> {
        let Some(reference) = self.reference.as_ref() else {
            return Ok(None);
        };
        on_rayon(reference.device(), || {
            taken_logprobs(reference, data, rows, seqs).map(Some)
        })
    }

    /// The current policy's log-probs of each token of `seqs` (images `rows`), as its
    /// policy-gradient passes compute them (batch norm on running statistics): decoupled PPO's
    /// proximal policy.
    fn taken_logprobs(
        &mut self,
        data: &Dataset,
        rows: &[usize],
        seqs: &[Vec<u32>],
    ) -> Result<Vec<Vec<f32>>, LearnerError> {
        self.model.set_running_norm(true);
        let logp = taken_logprobs(&self.model, data, rows, seqs);
        self.model.set_running_norm(false);
        logp
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
            caprl_common::optim::grad_norm(&grads, &vars)?
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

    /// Writes weights, optimizer moments and trainer state as one checkpoint
    /// under `root` (plus any `extra` files), keeping the newest `keep`.
    pub fn save(
        &mut self,
        root: &Path,
        keep: usize,
        extra: &[(&str, Vec<u8>)],
    ) -> Result<Checkpoint, LearnerError> {
        self.state.dropout_rng = self.dropout_rng.state();
        let weights = self.model.to_safetensors()?;
        let optim = self.opt.to_bytes()?;
        let state = serde_json::to_vec_pretty(&self.state)
            .map_err(|e| LearnerError::Invalid(format!("cannot encode trainer state: {e}")))?;
        let mut files = vec![(WEIGHTS, weights), (OPTIM, optim), (STATE, state)];
        if let Some(critic) = &self.critic {
            files.push((VALUE_WEIGHTS, critic.head.to_safetensors()?));
            files.push((VALUE_OPTIM, critic.opt.to_bytes()?));
        }
        files.extend(extra.iter().map(|(n, b)| (*n, b.clone())));
        checkpoint::write(root, self.state.step, &files, keep)
    }

    /// Takes the weights of checkpoint `ck` (the best XE model RL starts from) and fresh
    /// optimizer moments, keeping the step count, the policy version and the dropout stream:
    /// numbers only go forward, so the RL phase's steps and checkpoints follow the XE phase's
    /// instead of reusing them.
    pub fn adopt_weights(
        &mut self,
        ck: &Checkpoint,
        cfg: &CaptionerConfig,
        device: &Device,
        adam: AdamWParams,
    ) -> Result<(), LearnerError> {
        self.model = Captioner::load(&ck.file(WEIGHTS), cfg, device)?;
        self.opt = AdamW::new(self.model.varmap(), adam)?;
        Ok(())
    }

    /// The phase and step checkpoint `ck` was written at (from its trainer state), to tell a
    /// user which model a directory of checkpoints resolved to.
    pub fn phase_of(ck: &Checkpoint) -> Result<(Phase, u64), LearnerError> {
        let state = read_state(ck)?;
        Ok((state.phase, state.step))
    }

    /// Restores a trainer from a verified checkpoint.
    pub fn restore(
        ck: &Checkpoint,
        cfg: &CaptionerConfig,
        device: &Device,
        adam: AdamWParams,
        seed: u64,
    ) -> Result<Self, LearnerError> {
        let model = Captioner::load(&ck.file(WEIGHTS), cfg, device)?;
        let mut opt = AdamW::new(model.varmap(), adam)?;
        opt.load(&ck.file(OPTIM))?;
        let state = read_state(ck)?;
        let critic = match ck.file(VALUE_WEIGHTS).exists() {
            true => Some(Critic::load(
                &ck.file(VALUE_WEIGHTS),
                &ck.file(VALUE_OPTIM),
                cfg.state_dim(),
                device,
                adam,
            )?),
            false => None,
        };
        Ok(Self {
            dropout_rng: CaprlRng::from_state(&state.dropout_rng),
            model,
            critic,
            reference: None,
            opt,
            seed,
            state,
        })
    }
}

/// The unmasked tokens of a `[N, T]` mask.
fn token_count(mask: &candle_core::Tensor) -> Result<usize, LearnerError> {
    Ok(scalar(&mask.sum_all()?)? as usize)
}

fn scalar(t: &candle_core::Tensor) -> Result<f32, LearnerError> {
    Ok(t.to_dtype(candle_core::DType::F32)?.to_scalar::<f32>()?)
}

/// The order of the sequences in pass `pass` of the PPO update at step `step`.
/// `model`'s log-prob of each token of `seqs` (images `rows`), one row per sequence, as long
/// as the sequence.
fn taken_logprobs(
    model: &Captioner,
    data: &Dataset,
    rows: &[usize],
    seqs: &[Vec<u32>],
) -> Result<Vec<Vec<f32>>, LearnerError> {
    if seqs.is_empty() {
        return Ok(Vec::new());
    }
    let device = model.device();
    let x = inputs_for_rows(data, rows, model.config(), device)?;
    let toks = batch_tokens(seqs, device)?;
    let (logp, _) = model.token_logprobs(&x, &toks, None)?;
    let logp: Vec<Vec<f32>> = logp.to_dtype(candle_core::DType::F32)?.to_vec2()?;
    Ok(logp
        .into_iter()
        .zip(seqs)
        .map(|(row, s)| row[..s.len().min(row.len())].to_vec())
        .collect())
}

fn ppo_order(seed: u64, step: u64, pass: u32, n: usize) -> Vec<usize> {
    let mut rng = ChaCha8Rng::seed_from_u64(
        seed ^ 0x5050_4f00u64.rotate_left(40)
            ^ step.wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ (pass as u64).wrapping_mul(0xD1B5_4A32_D192_ED03),
    );
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(&mut rng);
    order
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

/// The trainer state checkpoint `ck` holds.
fn read_state(ck: &Checkpoint) -> Result<TrainState, LearnerError> {
    let path = ck.file(STATE);
    let raw = std::fs::read(&path).map_err(|e| LearnerError::Io {
        path: path.clone(),
        source: e,
    })?;
    serde_json::from_slice(&raw).map_err(|e| LearnerError::Corrupt {
        path,
        reason: e.to_string(),
    })
}
