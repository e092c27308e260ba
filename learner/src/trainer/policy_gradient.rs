//! The trainer's policy-gradient steps: one step on sequence-level, off-policy or value
//! targets, and PPO's passes over one scored batch; each loss with the entropy bonus and the
//! KL penalty when their coefficients are set.

use candle_core::Tensor;
use caprl_common::config::{KlEstimator, PpoRatio};
use caprl_common::telemetry::stages::{self, Stage};
use caprl_data::Dataset;
use caprl_model::model::{
    batch_tokens, inputs_for_rows, on_rayon, Captioner, Inputs, TeacherForced,
};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::{scalar, token_count, StepOptions, StepStats, Trainer};
use crate::critic;
use crate::error::LearnerError;
use crate::off_policy::{self, Correction, WeightStats};
use crate::pg::{ClipRange, LossNorm, RatioStats};
use crate::{gspo, kl, pg};

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

/// The policy's differentiable pass over one batch: its inputs and tokens, the taken tokens'
/// log-probs, the full teacher-forced pass when the loss reads it, and the token mask.
#[derive(Clone, Copy)]
struct PolicyPass<'p> {
    x: &'p Inputs,
    toks: &'p Tensor,
    logp: &'p Tensor,
    full: Option<&'p TeacherForced>,
    mask: &'p Tensor,
}

impl PolicyPass<'_> {
    /// The full pass; `pg_loss` runs it whenever the loss needs it.
    fn full(&self) -> Result<&TeacherForced, LearnerError> {
        self.full.ok_or(LearnerError::Internal(
            "the full teacher-forced pass is missing",
        ))
    }
}

/// One step's loss before the optimizer sees it.
struct PgLoss {
    loss: candle_core::Tensor,
    parts: Vec<(&'static str, f32)>,
    tokens: usize,
    ratios: Option<RatioStats>,
    off_policy: Option<WeightStats>,
}

impl Trainer {
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
        let device = self.model.device().clone();
        on_rayon(&device, || {
            let pg = self.pg_loss(data, rows, seqs, targets, opts)?;
            let mut stats = self.update(pg.loss, opts, pg.tokens)?;
            if !stats.skipped {
                self.advance();
            }
            stats.parts = pg.parts;
            stats.ratios = pg.ratios;
            stats.off_policy = pg.off_policy;
            Ok(stats)
        })
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
        let (logp, full) = pass?;
        let mask = self.model.token_mask(&toks)?;
        let pass = PolicyPass {
            x: &x,
            toks: &toks,
            logp: &logp,
            full: full.as_ref(),
            mask: &mask,
        };
        let mut loss = self.targets_loss(&pass, seqs, targets)?;
        self.add_penalties(&pass, &mut loss, opts)?;
        Ok(loss)
    }

    /// The loss `targets` asks for on the policy's pass over the batch (no penalties yet).
    fn targets_loss(
        &self,
        pass: &PolicyPass,
        seqs: &[Vec<u32>],
        targets: PgTargets,
    ) -> Result<PgLoss, LearnerError> {
        let PolicyPass {
            toks, logp, mask, ..
        } = *pass;
        let device = self.model.device();
        let (_, t) = toks.dims2()?;
        let (mut parts, mut ratios, mut off_policy) = (Vec::new(), None, None);
        let loss = match targets {
            PgTargets::Sequence { multipliers, norm } => pg::loss(logp, mask, multipliers, norm)?,
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
                let w = critic::targets_tensor(&w, t, device)?;
                pg::weighted_loss(logp, mask, multipliers, &w, norm)?
            }
            PgTargets::Critic(y) => {
                let critic = self.critic.as_ref().ok_or(LearnerError::Internal(
                    "this objective needs a value head; call ensure_critic first",
                ))?;
                let y = critic::targets_tensor(y, t, device)?;
                let v = critic.head.forward(&pass.full()?.hidden)?;
                let policy = pg::token_loss(logp, mask, &critic::advantages(&y, &v)?)?;
                let value = critic::value_loss(&v, &y, mask)?;
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
                let old = critic::targets_tensor(old, t, device)?;
                let w = weights
                    .map(|w| critic::targets_tensor(w, t, device))
                    .transpose()?;
                let (loss, stats) = match ratio {
                    PpoRatio::Token => {
                        pg::clipped_loss(logp, &old, mask, advantages, w.as_ref(), (clip, norm))?
                    }
                    PpoRatio::Sequence => {
                        gspo::sequence_clipped_loss(logp, &old, mask, advantages, w.as_ref(), clip)?
                    }
                };
                ratios = Some(stats);
                loss
            }
        };
        Ok(PgLoss {
            loss,
            parts,
            tokens: token_count(mask)?,
            ratios,
            off_policy,
        })
    }

    /// Adds the entropy bonus and the KL penalty to `loss` when their coefficients are set.
    fn add_penalties(
        &self,
        pass: &PolicyPass,
        loss: &mut PgLoss,
        opts: StepOptions,
    ) -> Result<(), LearnerError> {
        if opts.entropy_coef > 0.0 {
            let h = pg::entropy(&pass.full()?.logprobs_full, pass.mask)?;
            loss.parts.push(("entropy", scalar(&h)?));
            loss.loss = (&loss.loss - (h * opts.entropy_coef as f64)?)?;
        }
        if opts.kl_coef > 0.0 {
            let reference = self.reference.as_ref().ok_or(LearnerError::Internal(
                "train.kl_coef > 0 needs the XE model as reference (set_reference)",
            ))?;
            let PolicyPass { x, toks, mask, .. } = *pass;
            let kl = match opts.kl_estimator {
                KlEstimator::Full => {
                    let ref_full = reference.teacher_forced(x, toks, None)?.logprobs_full;
                    kl::full(&pass.full()?.logprobs_full, &ref_full, mask)?
                }
                k => {
                    let (ref_logp, _) = reference.token_logprobs(x, toks, None)?;
                    kl::estimate(pass.logp, &ref_logp, mask, k)?
                }
            };
            loss.parts.push(("kl", scalar(&kl)?));
            loss.loss = (&loss.loss + (kl * opts.kl_coef as f64)?)?;
        }
        Ok(())
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
}

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

/// The order of the sequences in pass `pass` of the PPO update at step `step`.
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
