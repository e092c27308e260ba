//! The training loop of one process: XE warm start, then the configured RL
//! objective, with per-epoch validation, best-checkpoint keeping, periodic
//! checkpoints and exact resume.
//!
//! Rollouts are produced and scored in this process by the same functions the
//! actor and reward-worker roles run ([`caprl_actor::rollout`],
//! [`caprl_reward_worker::Rewarder`]); the learner's objectives see only the
//! scored batch, never how it arrived.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use caprl_common::config::{self, Baseline as CfgBaseline, Objective, RunConfig};
use caprl_common::data::{Dataset, Item};
use caprl_common::model::{Captioner, CaptionerConfig, Device};
use caprl_common::optim::AdamWParams;
use caprl_common::progress::Progress;
use caprl_common::score::Distance;
use caprl_common::wire::{DecodeKind, PolicyVersion, RolloutTask, ScoredRollout, TaskId};
use caprl_learner::eval::{self, EvalOptions, EvalReport};
use caprl_learner::{checkpoint, scst, sle, Phase, StepOptions, Trainer};
use caprl_reward_worker::Rewarder;

use crate::setup;

/// What a finished training run leaves behind.
pub struct Outcome {
    /// Best checkpoint of each phase that ran, by validation CIDEr-D.
    pub best_xe: Option<PathBuf>,
    pub best_rl: Option<PathBuf>,
}

/// Trains per `cfg`: `xe_epochs` of XE (skipped when 0), then `rl_epochs` of
/// the configured objective (skipped for `objective = xe`). With `resume`,
/// continues from the newest valid checkpoint in the checkpoint dir.
pub fn train(cfg: &RunConfig, data: &Dataset, device: &Device, resume: bool) -> Result<Outcome> {
    let model_cfg = setup::captioner_config(cfg, data)?;
    let adam = adam_params(cfg);
    let ck_root = cfg.checkpoint_dir();
    let mut trainer = match resume {
        true => match checkpoint::latest_valid(&ck_root)? {
            Some(ck) => {
                tracing::info!("resuming from {}", ck.dir.display());
                Trainer::restore(&ck, &model_cfg, device, adam, cfg.seed)?
            }
            None => bail!(
                "--resume: no valid checkpoint in {}; start without --resume",
                ck_root.display()
            ),
        },
        false => Trainer::new(Captioner::new(&model_cfg, device, cfg.seed)?, adam, cfg.seed)?,
    };
    let mut outcome = Outcome {
        best_xe: None,
        best_rl: None,
    };
    let train_items = &data.train.items;
    let wants_rl = cfg.train.objective != Objective::Xe;

    if trainer.state.phase == Phase::Xe && cfg.train.xe_epochs > 0 {
        outcome.best_xe = Some(run_phase(cfg, data, &mut trainer, Phase::Xe, None)?);
    }
    if wants_rl && cfg.train.rl_epochs > 0 {
        if trainer.state.phase == Phase::Xe {
            // RL starts from the best XE weights, as in the seed papers' schedules.
            if let Some(best) = &outcome.best_xe {
                let ck = checkpoint::open(best)?;
                trainer = Trainer::restore(&ck, &model_cfg, device, adam, cfg.seed)?;
            }
            trainer.enter_phase(Phase::Rl, adam)?;
        }
        let df = Rewarder::training_df(data, train_items);
        let exploration = (cfg.train.objective == Objective::Sle).then(|| match cfg.reward.distance {
            config::Distance::Bleu => Distance::Bleu,
            config::Distance::Cider => Distance::Cider,
        });
        let rewarder = Rewarder::new(data, train_items, cfg.reward.spec.terms(), df, exploration)?;
        outcome.best_rl = Some(run_phase(cfg, data, &mut trainer, Phase::Rl, Some(&rewarder))?);
    }
    Ok(outcome)
}

fn adam_params(cfg: &RunConfig) -> AdamWParams {
    AdamWParams {
        beta1: cfg.optim.beta1,
        beta2: cfg.optim.beta2,
        eps: cfg.optim.eps,
        weight_decay: cfg.optim.weight_decay,
    }
}

/// Runs the remaining epochs of one phase and returns its best checkpoint dir.
fn run_phase(
    cfg: &RunConfig,
    data: &Dataset,
    trainer: &mut Trainer,
    phase: Phase,
    rewarder: Option<&Rewarder>,
) -> Result<PathBuf> {
    let epochs = match phase {
        Phase::Xe => cfg.train.xe_epochs,
        Phase::Rl => cfg.train.rl_epochs,
    } as u64;
    let base_lr = match phase {
        Phase::Xe => cfg.optim.lr,
        Phase::Rl => cfg.optim.rl_lr,
    };
    let schedule = setup::schedule(cfg, base_lr, epochs, data.train.items.len());
    let best_dir = Path::new(&cfg.run_dir).join(match phase {
        Phase::Xe => "best-xe",
        Phase::Rl => "best-rl",
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
        while let Some(idx) = trainer.next_batch(items.len(), bs) {
            let batch: Vec<&Item> = idx.iter().map(|&i| &items[i]).collect();
            let opts = StepOptions {
                lr: schedule.lr(trainer.state.step, epoch),
                grad_clip: cfg.optim.grad_clip,
                label_smoothing: cfg.train.label_smoothing as f32,
                entropy_coef: cfg.train.entropy_coef as f32,
            };
            let stats = match phase {
                Phase::Xe => trainer.xe_step(data, &batch, opts)?,
                Phase::Rl => {
                    let rewarder = rewarder.context("RL phase without a rewarder")?;
                    let (stats, mean_reward) = rl_step(cfg, data, trainer, rewarder, &batch, opts)?;
                    reward_sum += mean_reward;
                    stats
                }
            };
            tokens += stats.tokens;
            loss_sum += stats.loss as f64;
            n += 1;
            let secs = started.elapsed().as_secs_f64().max(1e-9);
            let msg = match phase {
                Phase::Xe => format!("loss {:.3} · {:.0} tok/s", loss_sum / n as f64, tokens as f64 / secs),
                Phase::Rl => format!(
                    "reward {:.3} · loss {:.3} · {:.0} tok/s",
                    reward_sum / n as f64,
                    loss_sum / n as f64,
                    tokens as f64 / secs
                ),
            };
            bar.set_message(&msg);
            bar.inc(1);
            if trainer.state.step % cfg.checkpoint.every_steps.max(1) == 0 {
                trainer.save(&cfg.checkpoint_dir(), cfg.checkpoint.keep as usize, &extras(cfg, data))?;
            }
            if cfg.train.max_steps > 0 && trainer.state.step >= cfg.train.max_steps {
                break;
            }
        }
        bar.finish();
        let finished_epoch = trainer.state.epoch;
        if finished_epoch % cfg.train.eval_every.max(1) as u64 == 0 || finished_epoch == epochs {
            let report = validate(cfg, data, trainer)?;
            let cider = report.metrics.get("cider_d").copied().unwrap_or(0.0);
            tracing::info!(
                "{label} epoch {finished_epoch}: val CIDEr-D {cider:.4} BLEU-4 {:.4}",
                report.metrics.get("bleu4").copied().unwrap_or(0.0)
            );
            if best.is_none_or(|b| cider > b) {
                best = Some(cider);
                save_best(cfg, data, &best_dir, trainer, cider)?;
            }
        }
        trainer.save(&cfg.checkpoint_dir(), cfg.checkpoint.keep as usize, &extras(cfg, data))?;
        if cfg.train.max_steps > 0 && trainer.state.step >= cfg.train.max_steps {
            break;
        }
    }
    if best.is_none() {
        save_best(cfg, data, &best_dir, trainer, 0.0)?;
    }
    Ok(latest_in(&best_dir)?)
}

/// One RL iteration: the actor's decodes, the reward worker's scores, the
/// learner's update.
fn rl_step(
    cfg: &RunConfig,
    data: &Dataset,
    trainer: &mut Trainer,
    rewarder: &Rewarder,
    batch: &[&Item],
    opts: StepOptions,
) -> Result<(caprl_learner::StepStats, f64)> {
    let objective = cfg.train.objective;
    let greedy_baseline = objective == Objective::Sle || cfg.train.baseline == CfgBaseline::Greedy;
    let task_id = TaskId(trainer.state.step);
    let task = RolloutTask {
        task_id,
        policy_version: PolicyVersion(trainer.state.policy_version),
        min_version: PolicyVersion(trainer.state.policy_version),
        image_rows: batch.iter().map(|it| it.row as u32).collect(),
        samples: cfg.train.samples as u32,
        temperature: cfg.decode.temperature as f32,
        top_k: cfg.decode.top_k,
        greedy: greedy_baseline,
        beam: 0,
        seed: setup::task_seed(cfg.seed, task_id),
        with_gt: false,
    };
    let rollout = caprl_actor::rollout(
        &trainer.model,
        PolicyVersion(trainer.state.policy_version),
        data,
        &task,
        "local",
    )?;
    let scored = rewarder.score(rollout)?;
    let batch = assemble(cfg, &scored)?;
    let stats = trainer.pg_step(data, &batch.rows, &batch.seqs, &batch.multipliers, opts)?;
    Ok((stats, batch.mean_reward))
}

/// Sampled sequences of a scored rollout with their multipliers.
struct PgBatch {
    rows: Vec<usize>,
    seqs: Vec<Vec<u32>>,
    multipliers: Vec<f32>,
    mean_reward: f64,
}

fn assemble(cfg: &RunConfig, scored: &ScoredRollout) -> Result<PgBatch> {
    let mut greedy: BTreeMap<u32, f32> = BTreeMap::new();
    let mut samples: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (i, s) in scored.rollout.sequences.iter().enumerate() {
        match s.kind {
            DecodeKind::Greedy => {
                greedy.insert(s.image_row, scored.rewards[i].total);
            }
            DecodeKind::Sample => samples.entry(s.image_row).or_default().push(i),
            _ => {}
        }
    }
    let mut out = PgBatch {
        rows: Vec::new(),
        seqs: Vec::new(),
        multipliers: Vec::new(),
        mean_reward: 0.0,
    };
    let mut reward_total = 0.0f64;
    for (row, idx) in &samples {
        let rewards: Vec<f32> = idx.iter().map(|&i| scored.rewards[i].total).collect();
        reward_total += rewards.iter().map(|&r| r as f64).sum::<f64>();
        let m = match cfg.train.objective {
            Objective::Sle => {
                let b = *greedy.get(row).context("SLE needs the greedy caption's reward")?;
                let e: Vec<f32> = idx
                    .iter()
                    .map(|&i| {
                        scored.rewards[i]
                            .components
                            .iter()
                            .find(|(n, _)| n == "diversity")
                            .map(|(_, v)| *v)
                            .unwrap_or(0.0)
                    })
                    .collect();
                sle::multipliers(&rewards, b, &e, cfg.train.sle_alpha as f32)
            }
            _ => {
                let baseline = match cfg.train.baseline {
                    CfgBaseline::Greedy => scst::Baseline::Greedy,
                    CfgBaseline::Mean => scst::Baseline::Mean,
                };
                scst::advantages(&rewards, greedy.get(row).copied(), baseline)
            }
        };
        for (&i, m) in idx.iter().zip(m) {
            out.rows.push(*row as usize);
            out.seqs.push(scored.rollout.sequences[i].tokens.clone());
            out.multipliers.push(m);
        }
    }
    out.mean_reward = reward_total / out.seqs.len().max(1) as f64;
    Ok(out)
}

/// Validation with greedy decoding on (part of) the val split.
fn validate(cfg: &RunConfig, data: &Dataset, trainer: &Trainer) -> Result<EvalReport> {
    let opts = EvalOptions {
        beam: 1,
        samples: 0,
        limit: cfg.train.eval_images as usize,
        seed: cfg.seed,
        ..EvalOptions::default()
    };
    Ok(eval::evaluate(&trainer.model, data, &data.val.items, &opts)?)
}

const BEST_SCORE: &str = "val_cider.txt";
const CONFIG_FILE: &str = "config.toml";
const VOCAB_HASH_FILE: &str = "vocab_hash.txt";

fn save_best(
    cfg: &RunConfig,
    data: &Dataset,
    dir: &Path,
    trainer: &mut Trainer,
    cider: f64,
) -> Result<()> {
    let mut files = extras(cfg, data);
    files.push((BEST_SCORE, format!("{cider}\n").into_bytes()));
    trainer
        .save(dir, 1, &files)
        .with_context(|| format!("writing the best checkpoint to {}", dir.display()))?;
    Ok(())
}

/// Files every checkpoint carries besides weights and optimizer state: the run
/// config (so `eval` and `caption` can rebuild the model) and the vocabulary hash.
fn extras(cfg: &RunConfig, data: &Dataset) -> Vec<(&'static str, Vec<u8>)> {
    vec![
        (CONFIG_FILE, cfg.to_toml_string().into_bytes()),
        (VOCAB_HASH_FILE, data.vocab.hash().as_bytes().to_vec()),
    ]
}

fn best_cider(dir: &Path) -> Option<f64> {
    let ck = checkpoint::latest_valid(dir).ok()??;
    std::fs::read_to_string(ck.file(BEST_SCORE)).ok()?.trim().parse().ok()
}

fn latest_in(dir: &Path) -> Result<PathBuf> {
    Ok(checkpoint::latest_valid(dir)?
        .with_context(|| format!("no checkpoint in {}", dir.display()))?
        .dir)
}

/// A trained model with the config it was trained with and its data set
/// (checked against the checkpoint's vocabulary hash). `data_dir` overrides
/// the data set directory recorded in the checkpoint.
pub struct Loaded {
    pub cfg: RunConfig,
    pub data: Dataset,
    pub model: Captioner,
}

/// Opens checkpoint `ck_dir` (a `ckpt-*` directory, or a directory holding them:
/// the newest valid one is used).
pub fn load_checkpoint(ck_dir: &Path, data_dir: Option<&Path>, device: &Device) -> Result<Loaded> {
    let ck = match checkpoint::open(ck_dir) {
        Ok(ck) => ck,
        Err(first) => match checkpoint::latest_valid(ck_dir)? {
            Some(ck) => ck,
            None => return Err(first).with_context(|| {
                format!(
                    "{} is not a checkpoint (expected a ckpt-* directory written by `caprl train`, or a directory holding them)",
                    ck_dir.display()
                )
            }),
        },
    };
    let text = std::fs::read_to_string(ck.file(CONFIG_FILE))
        .with_context(|| format!("reading {}", ck.file(CONFIG_FILE).display()))?;
    let mut cfg = RunConfig::from_toml_str(&text, &ck.file(CONFIG_FILE).display().to_string())?;
    if let Some(d) = data_dir {
        cfg.data.dir = d.display().to_string();
    }
    let hash = std::fs::read_to_string(ck.file(VOCAB_HASH_FILE))
        .with_context(|| format!("reading {}", ck.file(VOCAB_HASH_FILE).display()))?;
    let data = Dataset::open_expecting(Path::new(&cfg.data.dir), hash.trim())
        .with_context(|| format!("opening the data set the checkpoint was trained on ({})", cfg.data.dir))?;
    let model_cfg: CaptionerConfig = setup::captioner_config(&cfg, &data)?;
    let model = Captioner::load(&ck.file("model.safetensors"), &model_cfg, device)?;
    Ok(Loaded { cfg, data, model })
}
