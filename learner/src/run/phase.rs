//! One phase of training (XE or RL): its epochs, steps, per-epoch validation, best and
//! periodic checkpoints, and what each step records.

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::Result;
use crate::LearnerError;
use caprl_common::config::{KlIn, RunConfig};
use caprl_common::data::{Dataset, Item};
use caprl_common::progress::Progress;
use caprl_common::telemetry::stages;
use caprl_common::telemetry::{metrics as tm, EvalRecord, RunLog, SamplesRecord, StepRecord};

use super::layout::{best_cider, latest_in, save_best, save_checkpoint, BEST_RL, BEST_XE};
use super::rl_step::{ahead_rows, rl_step};
use super::setup::schedule;
use super::Run;
use crate::disc_online::OnlineDisc;
use crate::driver::Driver;
use crate::eval::{self, EvalOptions, EvalReport};
use crate::objective::{uses_clip, Objective};
use crate::trainer::{Phase, StepOptions, Trainer};

/// Runs the remaining epochs of one phase and returns its best checkpoint dir.
pub(super) fn run_phase(
    run: &Run,
    trainer: &mut Trainer,
    phase: Phase,
    mut driver: Option<&mut Driver>,
    mut disc: Option<&mut OnlineDisc>,
    log: &mut Option<RunLog>,
) -> Result<PathBuf> {
    let Run {
        cfg,
        data,
        objective,
    } = *run;
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
    let label = match phase {
        Phase::Xe => "xe",
        Phase::Rl => "rl",
    };
    while trainer.state.epoch < epochs {
        let epoch = trainer.state.epoch;
        let steps = items.len().div_ceil(bs) as u64;
        let bar = Progress::new(steps, &format!("{label} epoch {}/{epochs}", epoch + 1));
        bar.inc((trainer.state.cursor / bs) as u64);
        let started = Instant::now();
        let mut tokens = 0usize;
        let mut loss_sum = 0.0f64;
        let mut reward_sum = 0.0f64;
        let mut n = 0usize;
        let mut last = Instant::now();
        while let Some(idx) = trainer.next_batch(items.len(), bs) {
            let batch: Vec<&Item> = idx.iter().map(|&i| &items[i]).collect();
            let cursor = trainer.state.cursor;
            let opts = StepOptions {
                lr: schedule.lr(trainer.state.step, epoch),
                grad_clip: cfg.optim.grad_clip,
                label_smoothing: cfg.train.label_smoothing as f32,
                entropy_coef: cfg.train.entropy_coef as f32,
                kl_coef: match cfg.train.kl_in {
                    KlIn::Loss => cfg.train.kl_coef as f32,
                    KlIn::Reward => 0.0,
                },
                kl_estimator: cfg.train.kl_estimator,
                value_lr: cfg.optim.value_lr,
            };
            let mut record = StepRecord {
                epoch,
                phase: label.to_string(),
                importance_weight: f64::NAN,
                ..StepRecord::default()
            };
            let stage_totals = stages::totals();
            let stats = match phase {
                Phase::Xe => trainer.xe_step(data, &batch, opts)?,
                Phase::Rl => {
                    let driver = driver.as_deref_mut().ok_or_else(|| {
                        LearnerError::Invalid("RL phase without a bus driver".into())
                    })?;
                    let ahead = ahead_rows(cfg, items, trainer, driver.issue_ahead_steps());
                    let (stats, mean_reward) = rl_step(
                        run,
                        trainer,
                        (driver, disc.as_deref_mut()),
                        (&batch, &ahead),
                        opts,
                        &mut record,
                    )?;
                    reward_sum += mean_reward;
                    stats
                }
            };
            if stats.skipped {
                tm::count_skipped_batch("non_finite");
            }
            let secs_step = last.elapsed().as_secs_f64();
            last = Instant::now();
            record.step = trainer.state.step;
            record.policy_version = trainer.state.policy_version;
            record.losses.insert("total".into(), stats.loss as f64);
            for (name, value) in &stats.parts {
                record.losses.insert((*name).into(), *value as f64);
            }
            record.grad_norm = stats.grad_norm as f64;
            record.lr = stats.lr;
            record.tokens_per_s = stats.tokens as f64 / secs_step.max(1e-9);
            record.seconds = secs_step;
            record.stages = stages::since(&stage_totals, "learner");
            tm::record_step(&record);
            if let Some(log) = log.as_mut() {
                log.log_step(&record)?;
            }
            tokens += stats.tokens;
            loss_sum += stats.loss as f64;
            n += 1;
            let secs = started.elapsed().as_secs_f64().max(1e-9);
            let msg = match phase {
                Phase::Xe => format!(
                    "loss {:.3} · {:.0} tok/s",
                    loss_sum / n as f64,
                    tokens as f64 / secs
                ),
                Phase::Rl => format!(
                    "reward {:.3} · loss {:.3} · {:.0} tok/s",
                    reward_sum / n as f64,
                    loss_sum / n as f64,
                    tokens as f64 / secs
                ),
            };
            bar.set_message(&msg);
            // Dynamic sampling's refills take further batches within the step.
            bar.inc(1 + (trainer.state.cursor - cursor).div_ceil(bs) as u64);
            if trainer
                .state
                .step
                .is_multiple_of(cfg.checkpoint.every_steps.max(1))
            {
                save_checkpoint(cfg, data, trainer, disc.as_deref())?;
            }
            if cfg.train.max_steps > 0 && trainer.state.step >= cfg.train.max_steps {
                break;
            }
        }
        bar.finish();
        let finished_epoch = trainer.state.epoch;
        if finished_epoch.is_multiple_of(cfg.train.eval_every.max(1) as u64)
            || finished_epoch == epochs
        {
            let report = validate(cfg, data, trainer)?;
            let cider = report.metrics.get("cider_d").copied().unwrap_or(0.0);
            tracing::info!(
                "{label} epoch {finished_epoch}: val CIDEr-D {cider:.4} BLEU-4 {:.4}",
                report.metrics.get("bleu4").copied().unwrap_or(0.0)
            );
            let eval_record = EvalRecord {
                step: trainer.state.step,
                epoch: finished_epoch,
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
                log_samples(cfg, data, objective, trainer, finished_epoch, log)?;
            }
            // The CLIP rewards trade CIDEr-D for distinctiveness on purpose: selecting their
            // epochs by CIDEr-D would undo it, so their best model is the latest.
            let by_latest = phase == Phase::Rl && uses_clip(cfg);
            if by_latest || best.is_none_or(|b| cider > b) {
                best = Some(cider);
                save_best(cfg, data, &best_dir, trainer, cider, disc.as_deref())?;
            }
        }
        save_checkpoint(cfg, data, trainer, disc.as_deref())?;
        if cfg.train.max_steps > 0 && trainer.state.step >= cfg.train.max_steps {
            break;
        }
    }
    if best.is_none() {
        save_best(cfg, data, &best_dir, trainer, 0.0, disc.as_deref())?;
    }
    latest_in(&best_dir)
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
    let images = crate::samples::sample_captions(
        &trainer.model,
        data,
        &data.val.items[..n],
        cfg.decode.beam as usize,
    )?;
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
