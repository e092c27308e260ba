//! One RL iteration over the bus, and the async-mode importance correction of its targets.

use std::time::Instant;

use super::Result;
use caprl_common::config::{self, KlIn, RunConfig};
use caprl_common::data::{Dataset, Item};
use caprl_common::model::{batch_tokens, inputs_for_rows, DType};
use caprl_common::telemetry::StepRecord;
use caprl_common::wire::{DecodeKind, ScoredRollout};

use super::Run;
use crate::disc_online::OnlineDisc;
use crate::driver::Driver;
use crate::pg::ClipRange;
use crate::targets::PgBatch;
use crate::trainer::{PgTargets, PpoBatch, PpoOptions, StepOptions, StepStats, Trainer};
use crate::{kl, LearnerError};

/// One RL iteration over the bus: publish the policy, have the batch's
/// images decoded by actors and scored by reward workers, then update. `ahead` holds the
/// images of the next steps, which async mode issues while this one trains.
pub(super) fn rl_step(
    run: &Run,
    trainer: &mut Trainer,
    (driver, disc): (&mut Driver, Option<&mut OnlineDisc>),
    (batch, ahead): (&[&Item], &[Vec<u32>]),
    opts: StepOptions,
    record: &mut StepRecord,
) -> Result<(StepStats, f64)> {
    let Run {
        cfg,
        data,
        objective,
    } = *run;
    let version = trainer.state.policy_version;
    driver.publish_with(&trainer.model, disc.as_ref().map(|d| &d.disc), version)?;
    record.snapshot_version = Some(driver.published_version(version));
    let rows: Vec<u32> = batch.iter().map(|it| it.row as u32).collect();
    let started = Instant::now();
    let collected = driver.collect(trainer.state.step, version, &rows, ahead)?;
    driver.record_depths();
    record.rollouts_per_s =
        collected.scored.len() as f64 / started.elapsed().as_secs_f64().max(1e-9);
    record.lag = collected.mean_lag;
    record.max_lag = collected.max_lag;
    record.dropped_stale = collected.dropped_stale;
    record.stale_reweighted = collected.stale_reweighted;
    record.tasks_issued = collected.tasks_issued;
    record.results_found = collected.results_found;
    record.task_ids = collected
        .scored
        .iter()
        .map(|s| s.rollout.task_id.0)
        .collect();
    record.duplicates = collected.duplicates;
    record.rejected = collected
        .rejected_by
        .iter()
        .map(|(reason, n)| (reason.to_string(), *n))
        .collect();
    if let Some(disc) = disc {
        let (real, fake) = disc_examples(&collected.scored);
        let s = disc.step(data, &real, &fake)?;
        record.losses.insert("disc".into(), s.loss as f64);
        record.losses.insert("disc_acc".into(), s.accuracy as f64);
        caprl_common::telemetry::metrics::set_discriminator_accuracy(s.accuracy as f64);
        record.losses.insert("p_d_real".into(), s.p_real as f64);
        record.losses.insert("p_d_fake".into(), s.p_fake as f64);
    }
    let mut scored = collected.scored;
    if cfg.train.kl_coef > 0.0 && cfg.train.kl_in == KlIn::Reward {
        let kl = penalise_rewards(cfg, data, trainer, &mut scored)?;
        record.losses.insert("kl".into(), kl);
    }
    let mut pg = objective.targets(&scored, version)?;
    let ppo = cfg.train.ppo_epochs > 0;
    // PPO's clipped ratio π/μ is its own off-policy correction.
    if cfg.runtime.mode != config::Mode::Sync && !ppo {
        record.importance_weight = importance_weights(cfg, data, trainer, &mut pg)?;
    }
    for (name, value) in &pg.components {
        record.rewards.insert(name.clone(), *value);
    }
    record.rewards.insert("total".into(), pg.mean_reward);
    let stats = if ppo {
        let t = &cfg.train;
        let options = PpoOptions {
            epochs: t.ppo_epochs,
            minibatches: t.ppo_minibatches,
            clip: ClipRange {
                low: t.clip_low as f32,
                high: t.clip_high as f32,
            },
        };
        let batch = PpoBatch {
            rows: &pg.rows,
            seqs: &pg.seqs,
            advantages: &pg.multipliers,
            behaviour: &pg.behaviour,
            norm: pg.norm,
        };
        trainer.ppo_update(data, batch, options, opts)?
    } else {
        let targets = match objective.uses_value_head() {
            true => PgTargets::Critic(&pg.values),
            false => PgTargets::Sequence {
                multipliers: &pg.multipliers,
                norm: pg.norm,
            },
        };
        trainer.pg_step(data, &pg.rows, &pg.seqs, targets, opts)?
    };
    if let Some(r) = &stats.ratios {
        for (name, value) in [
            ("clip_fraction", r.clip_fraction),
            ("approx_kl", r.approx_kl),
            ("ratio_mean", r.mean),
            ("ratio_min", r.min),
            ("ratio_max", r.max),
        ] {
            record.ppo.insert(name.into(), value);
        }
    }
    Ok((stats, pg.mean_reward))
}

/// `train.kl_in = "reward"`: subtracts `β·Σₜ kₜ` ([`crate::kl::sequence_penalty`], from the
/// actors' log-probs and the reference model's) from the reward of every sampled and greedy
/// caption, before the advantages, and records it as reward component `kl_penalty`. Returns the
/// mean per-token estimate.
fn penalise_rewards(
    cfg: &RunConfig,
    data: &Dataset,
    trainer: &Trainer,
    scored: &mut [ScoredRollout],
) -> Result<f64> {
    let penalised = |kind: DecodeKind| matches!(kind, DecodeKind::Sample | DecodeKind::Greedy);
    let mut rows = Vec::new();
    let mut seqs = Vec::new();
    for s in scored.iter() {
        for q in s.rollout.sequences.iter().filter(|q| penalised(q.kind)) {
            rows.push(q.image_row as usize);
            seqs.push(q.tokens.clone());
        }
    }
    let reference = trainer
        .reference_logprobs(data, &rows, &seqs)?
        .ok_or_else(|| {
            LearnerError::Invalid("train.kl_coef > 0 needs the XE model as reference".into())
        })?;
    let beta = cfg.train.kl_coef as f32;
    let (mut sum, mut tokens) = (0.0f64, 0usize);
    let mut next = reference.iter();
    for s in scored.iter_mut() {
        for (q, r) in s.rollout.sequences.iter().zip(s.rewards.iter_mut()) {
            if !penalised(q.kind) {
                continue;
            }
            let Some(ref_logp) = next.next() else { break };
            let k = kl::sequence_penalty(&q.logprobs, ref_logp, cfg.train.kl_estimator);
            sum += k as f64;
            tokens += q.logprobs.len().min(ref_logp.len());
            r.total -= beta * k;
            r.components.push(("kl_penalty".into(), -beta * k));
        }
    }
    Ok(sum / tokens.max(1) as f64)
}

/// Captions with the feature row of their image.
type Captioned = Vec<(usize, Vec<u32>)>;

/// The discriminator's examples in a scored batch: ground-truth captions are real; beam
/// captions (WTF-RL) or, without them, the sampled ones (SCST with `disc`) are generated.
fn disc_examples(scored: &[ScoredRollout]) -> (Captioned, Captioned) {
    let seqs = || scored.iter().flat_map(|s| &s.rollout.sequences);
    let has_beam = seqs().any(|s| s.kind == DecodeKind::Beam);
    let fake_kind = if has_beam {
        DecodeKind::Beam
    } else {
        DecodeKind::Sample
    };
    let pick = |kind: DecodeKind| {
        seqs()
            .filter(|s| s.kind == kind)
            .map(|s| (s.image_row as usize, s.tokens.clone()))
            .collect()
    };
    (pick(DecodeKind::GroundTruth), pick(fake_kind))
}

/// Async mode: multiplies each sampled sequence's multiplier by the truncated
/// importance ratio `ρ = min(is_clip, π(y)/μ(y))`, with `π` the current
/// policy and `μ` the behaviour policy that sampled `y` (its per-token
/// log-probs ride along in the rollout). This is the truncated-IS correction
/// of V-trace (Espeholt et al. 2018) at the sequence level, where the whole
/// caption is one action of the SCST bandit (seed 000/002). Sequences from
/// the current policy have `ρ = 1` exactly and are not recomputed. Returns the
/// mean `ρ` applied to the older policies' sequences (NaN when there are none).
fn importance_weights(
    cfg: &RunConfig,
    data: &Dataset,
    trainer: &Trainer,
    pg: &mut PgBatch,
) -> Result<f64> {
    let stale: Vec<usize> = (0..pg.seqs.len()).filter(|&i| pg.lags[i] > 0).collect();
    if stale.is_empty() {
        return Ok(f64::NAN);
    }
    // π in f32 whatever the learner's passes compute in: the ratio compares it with μ, which
    // CPU actors compute in f32, and bf16's 8-bit mantissa would show as a bias in ρ.
    let model = &trainer.model.with_compute_dtype(DType::F32)?;
    let rows: Vec<usize> = stale.iter().map(|&i| pg.rows[i]).collect();
    let seqs: Vec<Vec<u32>> = stale.iter().map(|&i| pg.seqs[i].clone()).collect();
    let x = inputs_for_rows(data, &rows, model.config(), model.device())?;
    let toks = batch_tokens(&seqs, model.device())?;
    let (logp, _mask) = model.token_logprobs(&x, &toks, None)?;
    let pi: Vec<f32> = logp.sum(1)?.to_vec1()?;
    let clip = cfg.runtime.is_clip as f32;
    let mut rho_sum = 0.0f64;
    for (j, &i) in stale.iter().enumerate() {
        let rho = (pi[j] - pg.behaviour[i].iter().sum::<f32>())
            .exp()
            .min(clip);
        let rho = if rho.is_finite() { rho } else { 0.0 };
        pg.multipliers[i] *= rho;
        rho_sum += rho as f64;
    }
    Ok(rho_sum / stale.len() as f64)
}
