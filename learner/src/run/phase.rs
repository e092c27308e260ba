//! One phase of training (XE or RL): its epochs, steps, per-epoch validation, best and
//! periodic checkpoints, and what each step records.

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::Result;
use crate::LearnerError;
use caprl_common::config::{KlIn, RunConfig};
use caprl_common::progress::Progress;
use caprl_common::telemetry::stages;
use caprl_common::telemetry::{metrics as tm, EvalRecord, RunLog, SamplesRecord, StepRecord};
use caprl_data::{Dataset, Item};
use caprl_model::model::{BadEndings, BeamOptions};

use super::layout::{best_cider, latest_in, save_best, save_checkpoint, BEST_RL, BEST_XE};
use super::rl_step::{ahead_rows, rl_step};
use super::setup::schedule;
use super::Run;
use crate::disc_online::OnlineDisc;
use crate::driver::Driver;
use crate::eval::{self, EvalOptions, EvalReport};
use crate::objective::{BestCheckpoint, Objective};
use crate::trainer::{Phase, StepOptions, StepStats, Trainer};

/// Runs the remaining epochs of one phase and returns its best checkpoint dir.
pub(super) fn run_phase(
    run: &Run,
    trainer: &mut Trainer,
    phase: Phase,
    mut driver: Option<&mut Driver>,
    mut disc: Option<&mut OnlineDisc>,
    log: &mut Option<RunLog>,
) -> Result<PathBuf> {
    let Run { cfg, data, .. } = *run;
    let epochs = match phase {
        Phase::Xe => cfg.train.xe_epochs,
        Phase::Rl => cfg.train.rl_epochs,
    } as u64;
    let schedule = schedule(cfg, phase, epochs, data.train.items.len());
    let best_dir = Path::new(&cfg.run_dir).join(match phase {
        Phase::Xe => BEST_XE,
        Phase::Rl => BEST_RL,
    });
    let mut best = best_cider(&best_dir);
    let items = &data.train.items;
    let bs = cfg.train.batch_size as usize;
    let label = phase_label(phase);
    let reached_max_steps =
        |t: &Trainer| cfg.train.max_steps > 0 && t.state.step >= cfg.train.max_steps;
    while trainer.state.epoch < epochs {
        let epoch = trainer.state.epoch;
        let steps = items.len().div_ceil(bs) as u64;
        let bar = Progress::new(steps, &format!("{label} epoch {}/{epochs}", epoch + 1));
        bar.inc((trainer.state.cursor / bs) as u64);
        let mut tally = EpochTally::new();
        while let Some(idx) = trainer.next_batch(items.len(), bs) {
            let batch: Vec<&Item> = idx.iter().map(|&i| &items[i]).collect();
            let cursor = trainer.state.cursor;
            let opts = step_options(cfg, schedule.lr(trainer.state.step, epoch));
            let mut record = StepRecord {
                epoch,
                phase: label.to_string(),
                importance_weight: f64::NAN,
                ..StepRecord::default()
            };
            let stage_totals = stages::totals();
            let (stats, mean_reward) = match phase {
                Phase::Xe => (trainer.xe_step(data, &batch, opts)?, 0.0),
                Phase::Rl => {
                    let driver = driver
                        .as_deref_mut()
                        .ok_or(LearnerError::Internal("RL phase without a bus driver"))?;
                    let ahead = ahead_rows(cfg, items, trainer, driver.issue_ahead_steps());
                    rl_step(
                        run,
                        trainer,
                        (driver, disc.as_deref_mut()),
                        (&batch, &ahead),
                        opts,
                        &mut record,
                    )?
                }
            };
            let seconds = tally.step_done(&stats, mean_reward);
            finish_record(&mut record, trainer, &stats, seconds, &stage_totals);
            tm::record_step(&record);
            if let Some(log) = log.as_mut() {
                log.log_step(&record)?;
            }
            bar.set_message(&tally.message(phase));
            // Dynamic sampling's refills take further batches within the step.
            bar.inc(1 + (trainer.state.cursor - cursor).div_ceil(bs) as u64);
            if trainer
                .state
                .step
                .is_multiple_of(cfg.checkpoint.every_steps.max(1))
            {
                save_checkpoint(cfg, data, trainer, disc.as_deref())?;
            }
            if reached_max_steps(trainer) {
                break;
            }
        }
        bar.finish();
        let finished_epoch = trainer.state.epoch;
        if finished_epoch.is_multiple_of(cfg.train.eval_every.max(1) as u64)
            || finished_epoch == epochs
        {
            let cider = validate_epoch(run, trainer, phase, log)?;
            let by_latest = phase == Phase::Rl
                && run.objective.best_rl_checkpoint(cfg) == BestCheckpoint::Latest;
            if by_latest || best.is_none_or(|b| cider > b) {
                best = Some(cider);
                save_best(cfg, data, &best_dir, trainer, cider, disc.as_deref())?;
            }
        }
        save_checkpoint(cfg, data, trainer, disc.as_deref())?;
        if reached_max_steps(trainer) {
            break;
        }
    }
    if best.is_none() {
        save_best(cfg, data, &best_dir, trainer, 0.0, disc.as_deref())?;
    }
    latest_in(&best_dir)
}

/// The phase's name in step records and progress bars.
fn phase_label(phase: Phase) -> &'static str {
    match phase {
        Phase::Xe => "xe",
        Phase::Rl => "rl",
    }
}

/// A step's knobs from `[optim]` and `[train]`, at learning rate `lr`.
fn step_options(cfg: &RunConfig, lr: f64) -> StepOptions {
    StepOptions {
        lr,
        grad_clip: cfg.optim.grad_clip,
        label_smoothing: cfg.train.label_smoothing as f32,
        entropy_coef: cfg.train.entropy_coef as f32,
        kl_coef: match cfg.train.kl_in {
            KlIn::Loss => cfg.train.kl_coef as f32,
            KlIn::Reward => 0.0,
        },
        kl_estimator: cfg.train.kl_estimator,
        value_lr: cfg.optim.value_lr,
    }
}

/// Fills in what the step itself did: its step and version, losses, rates and stage times.
fn finish_record(
    record: &mut StepRecord,
    trainer: &Trainer,
    stats: &StepStats,
    seconds: f64,
    stage_totals: &stages::Totals,
) {
    if stats.skipped {
        tm::count_skipped_batch("non_finite");
    }
    record.step = trainer.state.step;
    record.policy_version = trainer.state.policy_version;
    record.losses.insert("total".into(), stats.loss as f64);
    for (name, value) in &stats.parts {
        record.losses.insert((*name).into(), *value as f64);
    }
    record.grad_norm = stats.grad_norm as f64;
    record.lr = stats.lr;
    record.tokens_per_s = stats.tokens as f64 / seconds.max(1e-9);
    record.seconds = seconds;
    record.stages = stages::since(stage_totals, "learner");
}

/// The running means of one epoch's steps, for its progress bar.
struct EpochTally {
    started: Instant,
    last: Instant,
    tokens: usize,
    loss_sum: f64,
    reward_sum: f64,
    steps: usize,
}

impl EpochTally {
    fn new() -> EpochTally {
        EpochTally {
            started: Instant::now(),
            last: Instant::now(),
            tokens: 0,
            loss_sum: 0.0,
            reward_sum: 0.0,
            steps: 0,
        }
    }

    /// Counts a finished step; returns the seconds since the previous one.
    fn step_done(&mut self, stats: &StepStats, mean_reward: f64) -> f64 {
        let seconds = self.last.elapsed().as_secs_f64();
        self.last = Instant::now();
        self.tokens += stats.tokens;
        self.loss_sum += stats.loss as f64;
        self.reward_sum += mean_reward;
        self.steps += 1;
        seconds
    }

    fn message(&self, phase: Phase) -> String {
        let n = self.steps.max(1) as f64;
        let rate = self.tokens as f64 / self.started.elapsed().as_secs_f64().max(1e-9);
        match phase {
            Phase::Xe => format!("loss {:.3} · {rate:.0} tok/s", self.loss_sum / n),
            Phase::Rl => format!(
                "reward {:.3} · loss {:.3} · {rate:.0} tok/s",
                self.reward_sum / n,
                self.loss_sum / n
            ),
        }
    }
}

/// Validates at the end of an epoch, logs the scores (and sample captions) and returns the
/// val CIDEr-D.
fn validate_epoch(
    run: &Run,
    trainer: &Trainer,
    phase: Phase,
    log: &mut Option<RunLog>,
) -> Result<f64> {
    let Run {
        cfg,
        data,
        objective,
    } = *run;
    let epoch = trainer.state.epoch;
    let report = validate(cfg, data, trainer)?;
    let cider = report.metrics.get("cider_d").copied().unwrap_or(0.0);
    tracing::info!(
        "{} epoch {epoch}: val CIDEr-D {cider:.4} BLEU-4 {:.4}",
        phase_label(phase),
        report.metrics.get("bleu4").copied().unwrap_or(0.0)
    );
    let eval_record = EvalRecord {
        step: trainer.state.step,
        epoch,
        split: "val".into(),
        metrics: report
            .metrics
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect(),
        unix_ms: 0,
    };
    tm::record_eval(&eval_record);
    if let Some(log) = log.as_mut() {
        log.log_eval(&eval_record)?;
        log_samples(cfg, data, objective, trainer, epoch, log)?;
    }
    Ok(cider)
}

/// Validation with greedy decoding on (part of) the val split (bad endings removed when
/// `decode.remove_bad_endings` says so, as the final evaluation does).
fn validate(cfg: &RunConfig, data: &Dataset, trainer: &Trainer) -> Result<EvalReport> {
    let opts = EvalOptions {
        beam: 1,
        remove_bad_endings: cfg.decode.remove_bad_endings,
        samples: 0,
        limit: cfg.train.eval_images as usize,
        seed: cfg.seed,
        ..EvalOptions::default()
    };
    eval::evaluate(&trainer.model, data, &data.val.items, &opts)
}

/// Records the captions of the first `train.sample_images` val images.
fn log_samples(
    cfg: &RunConfig,
    data: &Dataset,
    objective: &Objective,
    trainer: &Trainer,
    epoch: u64,
    log: &mut RunLog,
) -> Result<()> {
    let n = (cfg.train.sample_images as usize).min(data.val.items.len());
    if n == 0 {
        return Ok(());
    }
    // The beam search `caprl eval` runs with this config.
    let d = &cfg.decode;
    let beam = BeamOptions {
        width: d.beam.max(1) as usize,
        max_len: trainer.model.config().max_len,
        length_norm: d.length_norm,
        block_trigrams: d.block_trigrams,
        groups: d.beam_groups.max(1) as usize,
        diversity_lambda: d.diversity_lambda as f32,
        bad_endings: match d.remove_bad_endings {
            true => BadEndings::from_vocab(&data.vocab),
            false => BadEndings::none(),
        },
    };
    let images =
        crate::samples::sample_captions(&trainer.model, data, &data.val.items[..n], &beam)?;
    let phase = match trainer.state.phase {
        Phase::Xe => "xe".to_string(),
        Phase::Rl => objective.name().to_string(),
    };
    log.log_samples(&SamplesRecord {
        step: trainer.state.step,
        epoch,
        phase,
        images,
        unix_ms: 0,
    })?;
    Ok(())
}
