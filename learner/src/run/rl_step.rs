//! One RL iteration over the bus.

use std::time::Instant;

use super::Result;
use caprl_clip::Discriminator;
use caprl_common::config::{KlIn, Mode, PpoProximal, RunConfig};
use caprl_common::telemetry::stages::{self, Stage};
use caprl_common::telemetry::StepRecord;
use caprl_data::{Dataset, Item};
use caprl_wire::{DecodeKind, ScoredRollout};

use super::Run;
use crate::disc_online::OnlineDisc;
use crate::driver::{Collected, Driver};
use crate::dynamic_sampling;
use crate::off_policy::Correction;
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
    let snapshot_disc = disc.as_deref().map(|d| &d.disc);
    let latest = driver.publish_with(&trainer.model, snapshot_disc, version)?;
    record.snapshot_version = Some(latest.version);
    let mut scored = collect_batch(
        run,
        trainer,
        (driver, snapshot_disc),
        (batch, ahead),
        record,
    )?;
    if let Some(disc) = disc {
        let (real, fake) = disc_examples(&scored);
        let s = disc.step(data, &real, &fake)?;
        record.losses.insert("disc".into(), s.loss as f64);
        record.losses.insert("disc_acc".into(), s.accuracy as f64);
        caprl_common::telemetry::metrics::set_discriminator_accuracy(s.accuracy as f64);
        record.losses.insert("p_d_real".into(), s.p_real as f64);
        record.losses.insert("p_d_fake".into(), s.p_fake as f64);
    }
    if cfg.train.kl_coef > 0.0 && cfg.train.kl_in == KlIn::Reward {
        let kl = penalise_rewards(cfg, data, trainer, &mut scored)?;
        record.losses.insert("kl".into(), kl);
    }
    let pg = stages::time(Stage::Targets, || objective.targets(&scored, version))?;
    for (name, value) in &pg.components {
        record.rewards.insert(name.clone(), *value);
    }
    record.rewards.insert("total".into(), pg.mean_reward);
    let stats = update(run, trainer, &pg, opts)?;
    record_update(record, &stats);
    if stats.skipped {
        // The step did not advance, but its round's task ids are used: the next step takes
        // the next round.
        trainer.state.extra_rounds += 1;
    }
    Ok((stats, pg.mean_reward))
}

/// The step's scored rollouts: its round, and with dynamic sampling the further rounds that
/// fill the batch and the groups it drops; what the collection saw goes into `record`.
fn collect_batch(
    run: &Run,
    trainer: &mut Trainer,
    (driver, disc): (&mut Driver, Option<&Discriminator>),
    (batch, ahead): (&[&Item], &[Vec<u32>]),
    record: &mut StepRecord,
) -> Result<Vec<ScoredRollout>> {
    let cfg = run.cfg;
    let version = trainer.state.policy_version;
    let rows: Vec<u32> = batch.iter().map(|it| it.row as u32).collect();
    let started = Instant::now();
    let round = trainer.state.step + trainer.state.extra_rounds;
    let mut collected = driver.collect(round, version, &rows, ahead)?;
    let first_round = collected.scored.len();
    if cfg.train.dynamic_sampling {
        refill(run, trainer, (driver, disc), version, &mut collected)?;
    }
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
    if !cfg.train.dynamic_sampling {
        return Ok(collected.scored);
    }
    let filled =
        dynamic_sampling::fill(collected.scored, cfg.train.batch_size as usize, first_round);
    record.groups_dropped = filled.groups_dropped;
    Ok(filled.scored)
}

/// The update on the step's targets: PPO passes, or one policy-gradient step (on a value head's
/// targets, or per caption with async mode's importance weights for the captions an older
/// policy sampled, [`crate::off_policy`]; coupled PPO's clipped ratio `π/μ` is its own
/// correction).
fn update(run: &Run, trainer: &mut Trainer, pg: &PgBatch, opts: StepOptions) -> Result<StepStats> {
    let Run {
        cfg,
        data,
        objective,
    } = *run;
    let stale: Vec<bool> = pg.lags.iter().map(|&lag| lag > 0).collect();
    let correction = Correction::from_config(&cfg.runtime);
    let t = &cfg.train;
    if t.ppo_epochs > 0 {
        let options = PpoOptions {
            epochs: t.ppo_epochs,
            minibatches: t.ppo_minibatches,
            clip: ClipRange {
                low: t.clip_low as f32,
                high: t.clip_high as f32,
            },
            ratio: t.ppo_ratio,
            proximal: (t.ppo_proximal == PpoProximal::Learner).then_some(correction),
        };
        let batch = PpoBatch {
            rows: &pg.rows,
            seqs: &pg.seqs,
            advantages: &pg.multipliers,
            behaviour: &pg.behaviour,
            stale: &stale,
            norm: pg.norm,
        };
        return trainer.ppo_update(data, batch, options, opts);
    }
    let targets = if objective.uses_value_head() {
        PgTargets::Critic(&pg.values)
    } else if cfg.runtime.mode == Mode::Async {
        PgTargets::OffPolicy {
            multipliers: &pg.multipliers,
            norm: pg.norm,
            behaviour: &pg.behaviour,
            stale: &stale,
            correction,
        }
    } else {
        PgTargets::Sequence {
            multipliers: &pg.multipliers,
            norm: pg.norm,
        }
    };
    trainer.pg_step(data, &pg.rows, &pg.seqs, targets, opts)
}

/// The update's importance weights and PPO ratios in the step record.
fn record_update(record: &mut StepRecord, stats: &StepStats) {
    if let Some(w) = &stats.off_policy {
        record.importance_weight = w.mean;
        for (name, value) in w.named() {
            record.off_policy.insert(name.into(), value);
        }
    }
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
}

/// Dynamic sampling ([`crate::dynamic_sampling`]): collects further rounds, each the next
/// batch of the epoch, until the step's rollouts hold `batch_size` images whose samples
/// spread, the epoch has no batch left, or [`dynamic_sampling::MAX_ROUNDS`] rounds ran. Each
/// round is offered the policy first, as the step's own was: with `runtime.snapshot_every > 1`
/// a task issued ahead for this round may wait for the current version (see
/// [`Driver::publish_with`]).
fn refill(
    run: &Run,
    trainer: &mut Trainer,
    (driver, disc): (&mut Driver, Option<&Discriminator>),
    version: u64,
    collected: &mut Collected,
) -> Result<()> {
    let cfg = run.cfg;
    let items = &run.data.train.items;
    let batch = cfg.train.batch_size as usize;
    let mut rounds = 1;
    while dynamic_sampling::images_with_spread(&collected.scored) < batch
        && rounds < dynamic_sampling::MAX_ROUNDS
        && trainer.epoch_has_more(items.len())
    {
        let Some(idx) = trainer.next_batch(items.len(), batch) else {
            break;
        };
        trainer.state.extra_rounds += 1;
        let rows: Vec<u32> = idx.iter().map(|&i| items[i].row as u32).collect();
        let ahead = ahead_rows(cfg, items, trainer, driver.issue_ahead_steps());
        let round = trainer.state.step + trainer.state.extra_rounds;
        driver.publish_with(&trainer.model, disc, version)?;
        collected.absorb(driver.collect(round, version, &rows, &ahead)?);
        rounds += 1;
    }
    Ok(())
}

/// The image rows of the `count` batches after the current one (what async mode issues
/// ahead), up to the end of the RL phase.
pub(super) fn ahead_rows(
    cfg: &RunConfig,
    items: &[Item],
    trainer: &Trainer,
    count: usize,
) -> Vec<Vec<u32>> {
    let batch = cfg.train.batch_size as usize;
    trainer
        .upcoming_batches(items.len(), batch, count, cfg.train.rl_epochs as u64)
        .iter()
        .map(|b| b.iter().map(|&i| items[i].row as u32).collect())
        .collect()
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
    let reference =
        trainer
            .reference_logprobs(data, &rows, &seqs)?
            .ok_or(LearnerError::Internal(
                "train.kl_coef > 0 needs the XE model as reference",
            ))?;
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
