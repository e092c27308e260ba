//! The training loop of one process: XE warm start, then the configured RL
//! objective, with per-epoch validation, best-checkpoint keeping, periodic
//! checkpoints and exact resume.
//!
//! The RL phase runs over a bus ([`caprl_learner::driver::Driver`]): the
//! learner publishes a snapshot, issues rollout tasks, and trains on the
//! scored rollouts the actor and reward-worker roles send back, whether they
//! run as tasks of this process (in-process bus) or as other processes (NATS).
//! The learner's objectives see only the scored batch, never how it arrived.
//! Every step goes to `RUN_DIR/run.jsonl` and the Prometheus metrics.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use caprl_common::config::{self, Baseline as CfgBaseline, Objective, RunConfig};
use caprl_common::data::{Dataset, Item};
use caprl_common::model::{batch_tokens, inputs_for_rows};
use caprl_common::model::{Captioner, CaptionerConfig, DType, Device, ValueHead};
use caprl_common::optim::AdamWParams;
use caprl_common::progress::Progress;
use caprl_common::telemetry::{
    metrics as tm, tensorboard::TB_DIR, EvalRecord, ResumeRecord, RunLog, SamplesRecord, StepRecord,
};
use caprl_common::wire::{DecodeKind, ScoredRollout};
use caprl_learner::disc_online::{OnlineDisc, PretrainOptions};
use caprl_learner::driver::Driver;
use caprl_learner::eval::{self, EvalOptions, EvalReport};
use caprl_learner::{
    actor_critic, checkpoint, mc_pg, scst, sle, wtf, PgTargets, Phase, StepOptions, Trainer,
};

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
///
/// The RL phase gets its rollouts through `driver` (see [`crate::roles`] for
/// how the in-process and NATS wirings build one); `on_ready` runs once the
/// first snapshot is published (readiness of the learner).
pub fn train(
    cfg: &RunConfig,
    data: &Dataset,
    device: &Device,
    resume: bool,
    start_from: Option<&Path>,
    driver: &mut Driver,
) -> Result<Outcome> {
    if uses_critic(cfg) && cfg.runtime.mode != config::Mode::Sync {
        anyhow::bail!(
            "train.objective = \"{}\" trains a value head on on-policy returns: set runtime.mode = \"sync\"",
            objective_name(cfg)
        );
    }
    let model_cfg = setup::captioner_config(cfg, data)?;
    let adam = adam_params(cfg);
    let ck_root = cfg.checkpoint_dir();
    // `--resume` with nothing to resume starts fresh: a learner pod restarted
    // by Kubernetes always passes it, including on its very first start.
    let previous = match resume {
        true => checkpoint::latest_valid(&ck_root)?,
        false => None,
    };
    let resumed_from = previous.as_ref().map(|ck| ck.dir.clone());
    let resume_record = resume.then(|| ResumeRecord {
        from_step: previous.as_ref().map(|ck| ck.step),
        checkpoint: resumed_from.as_ref().map(|d| d.display().to_string()),
        unix_ms: 0,
    });
    let mut trainer = match previous {
        Some(ck) => {
            tracing::info!("resuming from {}", ck.dir.display());
            Trainer::restore(&ck, &model_cfg, device, adam, cfg.seed)?
        }
        None => {
            if resume {
                tracing::warn!(
                    "--resume found no checkpoint in {}: starting a NEW run from scratch",
                    ck_root.display()
                );
            }
            // A bad --start-from is refused before an earlier run is moved aside.
            let model = match start_from {
                Some(dir) => start_model(dir, data, &model_cfg, device)?,
                None => Captioner::new(&model_cfg, device, cfg.seed)?,
            };
            set_aside_previous_run(cfg)?;
            let mut trainer = Trainer::new(model, adam, cfg.seed)?;
            if start_from.is_some() {
                trainer.enter_phase(Phase::Rl, adam)?;
            }
            trainer
        }
    };
    let mut outcome = Outcome {
        best_xe: start_from.map(Path::to_path_buf),
        best_rl: None,
    };
    let mut log = open_run_log(cfg, resume, trainer.state.step)?;
    if let (Some(log), Some(record)) = (log.as_mut(), &resume_record) {
        log.log_resume(record)?;
    }
    let wants_rl = cfg.train.objective != Objective::Xe;

    if trainer.state.phase == Phase::Xe && cfg.train.xe_epochs > 0 {
        outcome.best_xe = Some(run_phase(
            cfg,
            data,
            &mut trainer,
            Phase::Xe,
            None,
            None,
            &mut log,
        )?);
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
        if uses_critic(cfg) {
            trainer.ensure_critic(adam)?;
        }
        if cfg.train.kl_coef > 0.0 {
            let xe_dir = outcome
                .best_xe
                .clone()
                .unwrap_or_else(|| Path::new(&cfg.run_dir).join("best-xe"));
            let ck = resolve_checkpoint(&xe_dir).with_context(|| {
                format!(
                    "train.kl_coef > 0 needs the XE model RL started from, and {} holds none \
                     (train XE first, or pass --start-from)",
                    xe_dir.display()
                )
            })?;
            trainer.set_reference(Captioner::load(
                &ck.file("model.safetensors"),
                &model_cfg,
                device,
            )?);
        }
        let mut disc = match uses_disc(cfg) {
            true => Some(online_disc(cfg, data, &trainer, resumed_from.as_deref())?),
            false => None,
        };
        if !resume {
            driver.purge()?;
        }
        outcome.best_rl = Some(run_phase(
            cfg,
            data,
            &mut trainer,
            Phase::Rl,
            Some(driver),
            disc.as_mut(),
            &mut log,
        )?);
    }
    Ok(outcome)
}

/// The reward spec has `disc`: the learner trains the discriminator (seed 004).
fn uses_disc(cfg: &RunConfig) -> bool {
    cfg.reward
        .spec
        .terms()
        .iter()
        .any(|(n, _)| *n == config::RewardName::Disc)
}

/// The discriminator of a resumed run, or a fresh one pre-trained on ground-truth vs beam
/// captions of the model RL starts from (seed 004 §4).
fn online_disc(
    cfg: &RunConfig,
    data: &Dataset,
    trainer: &Trainer,
    resumed_from: Option<&Path>,
) -> Result<OnlineDisc> {
    let open = || {
        caprl_common::clip::open_encoder(Path::new(&cfg.clip.reward), &data.vocab).with_context(
            || {
                format!(
                    "opening the reward encoder [clip] reward = {}",
                    cfg.clip.reward
                )
            },
        )
    };
    if let Some(dir) = resumed_from {
        if let Some(d) = OnlineDisc::restore(open()?, dir, cfg.clip.disc_lr)? {
            tracing::info!("discriminator restored from {}", dir.display());
            return Ok(d);
        }
    }
    let mut disc = OnlineDisc::new(open()?, cfg.seed, cfg.clip.disc_lr)?;
    let n = (cfg.clip.disc_pretrain_images as usize).min(data.train.items.len());
    let items = &data.train.items[..n];
    let model = &trainer.model;
    let mcfg = model.config();
    let mut real = Vec::new();
    let mut fake = Vec::new();
    let bar = Progress::new(n as u64, "discriminator: XE beam captions");
    let decoder = model.decoder()?;
    for chunk in items.chunks(64) {
        let rows: Vec<usize> = chunk.iter().map(|it| it.row).collect();
        let x = inputs_for_rows(data, &rows, mcfg, model.device())?;
        let beams = decoder.beam(
            &x,
            &caprl_common::model::BeamOptions {
                width: cfg.decode.beam as usize,
                max_len: mcfg.max_len,
                length_norm: false,
                block_trigrams: false,
            },
        )?;
        for (it, hyps) in chunk.iter().zip(beams) {
            if let Some(h) = hyps.into_iter().next() {
                fake.push((it.row, h.tokens));
            }
            for t in it.targets(&data.vocab, mcfg.max_len) {
                real.push((it.row, t));
            }
        }
        bar.inc(chunk.len() as u64);
    }
    bar.finish();
    let stats = disc.pretrain(
        data,
        &real,
        &fake,
        PretrainOptions {
            epochs: cfg.clip.disc_pretrain_epochs as usize,
            batch: 64,
            seed: cfg.seed,
        },
        &mut |epoch, s| {
            tracing::info!(
                "discriminator pre-training epoch {}: loss {:.4} accuracy {:.3} P_D(gt) {:.3} P_D(beam) {:.3}",
                epoch + 1,
                s.loss,
                s.accuracy,
                s.p_real,
                s.p_fake
            )
        },
    )?;
    tracing::info!(
        "discriminator pre-trained on {} ground-truth and {} beam captions: accuracy {:.3}",
        real.len(),
        fake.len(),
        stats.accuracy
    );
    Ok(disc)
}

/// mc-pg and actor-critic learn a value head (their baseline / critic).
fn uses_critic(cfg: &RunConfig) -> bool {
    matches!(
        cfg.train.objective,
        Objective::McPg | Objective::ActorCritic
    )
}

/// The objective as written in the config (`mc-pg`, `actor-critic`, ...).
pub(crate) fn objective_name(cfg: &RunConfig) -> String {
    serde_json::to_value(cfg.train.objective)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// The weights of checkpoint `dir` (a `ckpt-*` dir or a dir holding them, e.g. `RUN/best-xe`)
/// as the start of an RL run, checked against the data set's vocabulary.
fn start_model(
    dir: &Path,
    data: &Dataset,
    model_cfg: &CaptionerConfig,
    device: &Device,
) -> Result<Captioner> {
    let ck = resolve_checkpoint(dir).context("--start-from")?;
    let hash = std::fs::read_to_string(ck.file(VOCAB_HASH_FILE))
        .with_context(|| format!("reading {}", ck.file(VOCAB_HASH_FILE).display()))?;
    if hash.trim() != data.vocab.hash() {
        anyhow::bail!(
            "--start-from {}: the checkpoint was trained with another vocabulary (hash {}, this data set's is {}); use the data set it was trained on",
            ck.dir.display(),
            hash.trim(),
            data.vocab.hash()
        );
    }
    tracing::info!("starting RL from {}", ck.dir.display());
    Captioner::load(&ck.file("model.safetensors"), model_cfg, device).with_context(|| {
        format!(
            "--start-from {}: its weights do not fit the configured model (set [model] as it was trained)",
            ck.dir.display()
        )
    })
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
    mut driver: Option<&mut Driver>,
    mut disc: Option<&mut OnlineDisc>,
    log: &mut Option<RunLog>,
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
        let mut last = Instant::now();
        while let Some(idx) = trainer.next_batch(items.len(), bs) {
            let batch: Vec<&Item> = idx.iter().map(|&i| &items[i]).collect();
            let opts = StepOptions {
                lr: schedule.lr(trainer.state.step, epoch),
                grad_clip: cfg.optim.grad_clip,
                label_smoothing: cfg.train.label_smoothing as f32,
                entropy_coef: cfg.train.entropy_coef as f32,
                kl_coef: cfg.train.kl_coef as f32,
                value_lr: cfg.optim.value_lr,
            };
            let mut record = StepRecord {
                epoch,
                phase: label.to_string(),
                importance_weight: f64::NAN,
                ..StepRecord::default()
            };
            let stats = match phase {
                Phase::Xe => trainer.xe_step(data, &batch, opts)?,
                Phase::Rl => {
                    let driver = driver
                        .as_deref_mut()
                        .context("RL phase without a bus driver")?;
                    let (stats, mean_reward) = rl_step(
                        cfg,
                        data,
                        trainer,
                        (driver, disc.as_deref_mut()),
                        &batch,
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
            bar.inc(1);
            if trainer
                .state
                .step
                .is_multiple_of(cfg.checkpoint.every_steps.max(1))
            {
                trainer.save(
                    &cfg.checkpoint_dir(),
                    cfg.checkpoint.keep as usize,
                    &files(cfg, data, disc.as_deref())?,
                )?;
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
                log_samples(cfg, data, trainer, finished_epoch, log)?;
            }
            // The CLIP rewards trade CIDEr-D for distinctiveness on purpose: selecting their
            // epochs by CIDEr-D would undo it, so their best model is the latest.
            let by_latest = phase == Phase::Rl && crate::roles::uses_clip(cfg);
            if by_latest || best.is_none_or(|b| cider > b) {
                best = Some(cider);
                save_best(cfg, data, &best_dir, trainer, cider, disc.as_deref())?;
            }
        }
        trainer.save(
            &cfg.checkpoint_dir(),
            cfg.checkpoint.keep as usize,
            &files(cfg, data, disc.as_deref())?,
        )?;
        if cfg.train.max_steps > 0 && trainer.state.step >= cfg.train.max_steps {
            break;
        }
    }
    if best.is_none() {
        save_best(cfg, data, &best_dir, trainer, 0.0, disc.as_deref())?;
    }
    latest_in(&best_dir)
}

/// One RL iteration over the bus: publish the policy, have the batch's
/// images decoded by actors and scored by reward workers, then update.
fn rl_step(
    cfg: &RunConfig,
    data: &Dataset,
    trainer: &mut Trainer,
    (driver, disc): (&mut Driver, Option<&mut OnlineDisc>),
    batch: &[&Item],
    opts: StepOptions,
    record: &mut StepRecord,
) -> Result<(caprl_learner::StepStats, f64)> {
    let version = trainer.state.policy_version;
    driver.publish_with(&trainer.model, disc.as_ref().map(|d| &d.disc), version)?;
    let rows: Vec<u32> = batch.iter().map(|it| it.row as u32).collect();
    let started = Instant::now();
    let collected = driver.collect(trainer.state.step, version, &rows)?;
    driver.record_depths();
    record.rollouts_per_s =
        collected.scored.len() as f64 / started.elapsed().as_secs_f64().max(1e-9);
    record.lag = collected.mean_lag;
    record.max_lag = collected.max_lag;
    record.dropped_stale = collected.dropped_stale;
    record.tasks_issued = collected.tasks_issued;
    record.results_found = collected.results_found;
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
        record.losses.insert("p_d_real".into(), s.p_real as f64);
        record.losses.insert("p_d_fake".into(), s.p_fake as f64);
    }
    let mut pg = assemble(cfg, &collected.scored, version)?;
    if !cfg.runtime.mode.eq(&config::Mode::Sync) {
        record.importance_weight = importance_weights(cfg, data, trainer, &mut pg)?;
    }
    for (name, value) in &pg.components {
        record.rewards.insert(name.clone(), *value);
    }
    record.rewards.insert("total".into(), pg.mean_reward);
    let targets = match uses_critic(cfg) {
        true => PgTargets::Critic(&pg.values),
        false => PgTargets::Sequence(&pg.multipliers),
    };
    let stats = trainer.pg_step(data, &pg.rows, &pg.seqs, targets, opts)?;
    Ok((stats, pg.mean_reward))
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
        let rho = (pi[j] - pg.behaviour[i]).exp().min(clip);
        let rho = if rho.is_finite() { rho } else { 0.0 };
        pg.multipliers[i] *= rho;
        rho_sum += rho as f64;
    }
    Ok(rho_sum / stale.len() as f64)
}

/// Sampled sequences of a scored rollout with their multipliers.
struct PgBatch {
    rows: Vec<usize>,
    seqs: Vec<Vec<u32>>,
    multipliers: Vec<f32>,
    /// Per-token value targets (mc-pg's `Q` estimates, actor-critic's returns).
    values: Vec<Vec<f32>>,
    /// `Σₜ log μ(wₜ)` of each sequence under the policy that sampled it.
    behaviour: Vec<f32>,
    /// Policy lag of the rollout each sequence came from.
    lags: Vec<u64>,
    mean_reward: f64,
    /// Mean of each reward component over the sampled sequences.
    components: BTreeMap<String, f64>,
}

/// The sampled sequences of the step's scored rollouts (in task-id order) with
/// their SCST/SLE multipliers.
fn assemble(cfg: &RunConfig, scored: &[ScoredRollout], version: u64) -> Result<PgBatch> {
    let mut out = PgBatch {
        rows: Vec::new(),
        seqs: Vec::new(),
        multipliers: Vec::new(),
        values: Vec::new(),
        behaviour: Vec::new(),
        lags: Vec::new(),
        mean_reward: 0.0,
        components: BTreeMap::new(),
    };
    let mut reward_total = 0.0f64;
    let mut component_sums: BTreeMap<String, f64> = BTreeMap::new();
    for one in scored {
        let lag = version.saturating_sub(one.rollout.policy_version.0);
        assemble_one(
            cfg,
            one,
            lag,
            &mut out,
            &mut reward_total,
            &mut component_sums,
        )?;
    }
    if let Objective::Wtf | Objective::WtfRl = cfg.train.objective {
        let baseline = match cfg.train.wtf_baseline {
            config::WtfBaseline::None => wtf::Baseline::None,
            config::WtfBaseline::Mean => wtf::Baseline::Mean,
            config::WtfBaseline::Positive => wtf::Baseline::Positive,
        };
        out.multipliers = wtf::multipliers(&out.multipliers, baseline);
    }
    let n = out.seqs.len().max(1) as f64;
    out.mean_reward = reward_total / n;
    out.components = component_sums
        .into_iter()
        .map(|(k, v)| (k, v / n))
        .collect();
    Ok(out)
}

fn assemble_one(
    cfg: &RunConfig,
    scored: &ScoredRollout,
    lag: u64,
    out: &mut PgBatch,
    reward_total: &mut f64,
    component_sums: &mut BTreeMap<String, f64>,
) -> Result<()> {
    if let Objective::Wtf | Objective::WtfRl = cfg.train.objective {
        let rl = cfg.train.objective == Objective::WtfRl;
        for (i, s) in scored.rollout.sequences.iter().enumerate() {
            if !wtf::trains_on(s.kind, rl) {
                continue;
            }
            let r = &scored.rewards[i];
            *reward_total += r.total as f64;
            for (name, v) in &r.components {
                *component_sums.entry(name.clone()).or_default() += *v as f64;
            }
            out.rows.push(s.image_row as usize);
            out.seqs.push(s.tokens.clone());
            out.multipliers.push(r.total);
            out.values.push(Vec::new());
            out.behaviour.push(s.logprobs.iter().sum());
            // Ground truth is off-policy by design (eq. 3): no importance ratio.
            out.lags.push(if s.kind == DecodeKind::GroundTruth {
                0
            } else {
                lag
            });
        }
        return Ok(());
    }
    let mut greedy: BTreeMap<u32, f32> = BTreeMap::new();
    let mut samples: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    // mc-pg: the scored completions of each sample, `(prefix_len, reward)`.
    let mut completions: BTreeMap<usize, Vec<(usize, f32)>> = BTreeMap::new();
    for (i, s) in scored.rollout.sequences.iter().enumerate() {
        match s.kind {
            DecodeKind::Greedy => {
                greedy.insert(s.image_row, scored.rewards[i].total);
            }
            DecodeKind::Sample => samples.entry(s.image_row).or_default().push(i),
            DecodeKind::Completion { sample, prefix_len } => completions
                .entry(sample as usize)
                .or_default()
                .push((prefix_len as usize, scored.rewards[i].total)),
            _ => {}
        }
    }
    for (row, idx) in &samples {
        let rewards: Vec<f32> = idx.iter().map(|&i| scored.rewards[i].total).collect();
        *reward_total += rewards.iter().map(|&r| r as f64).sum::<f64>();
        for &i in idx {
            for (name, v) in &scored.rewards[i].components {
                *component_sums.entry(name.clone()).or_default() += *v as f64;
            }
        }
        let m = match cfg.train.objective {
            Objective::Sle => {
                let b = *greedy
                    .get(row)
                    .context("SLE needs the greedy caption's reward")?;
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
            let tokens = &scored.rollout.sequences[i].tokens;
            let r = scored.rewards[i].total;
            out.values.push(match cfg.train.objective {
                Objective::McPg => mc_pg::q_estimates(
                    tokens.len(),
                    r,
                    completions.get(&i).map_or(&[][..], Vec::as_slice),
                ),
                _ => actor_critic::return_targets(tokens.len(), r),
            });
            out.rows.push(*row as usize);
            out.seqs.push(tokens.clone());
            out.multipliers.push(m);
            out.behaviour
                .push(scored.rollout.sequences[i].logprobs.iter().sum());
            out.lags.push(lag);
        }
    }
    Ok(())
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
    Ok(eval::evaluate(
        &trainer.model,
        data,
        &data.val.items,
        &opts,
    )?)
}

/// Records the captions of the first `train.sample_images` val images.
fn log_samples(
    cfg: &RunConfig,
    data: &Dataset,
    trainer: &Trainer,
    epoch: u64,
    log: &mut RunLog,
) -> Result<()> {
    let n = (cfg.train.sample_images as usize).min(data.val.items.len());
    if n == 0 {
        return Ok(());
    }
    let images = caprl_learner::samples::sample_captions(
        &trainer.model,
        data,
        &data.val.items[..n],
        cfg.decode.beam as usize,
    )?;
    let phase = match trainer.state.phase {
        Phase::Xe => "xe".to_string(),
        Phase::Rl => objective_name(cfg),
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

/// The run log: created for a new run, appended to on resume (created when
/// the resumed run has none yet); mirrored to TensorBoard from `step` on.
fn open_run_log(cfg: &RunConfig, resume: bool, step: u64) -> Result<Option<RunLog>> {
    let dir = Path::new(&cfg.run_dir);
    let toml = cfg.redacted().to_toml_string();
    let header = serde_json::json!({
        "run_id": cfg.runtime.run_id,
        "seed": cfg.seed,
        "device": cfg.device.to_string(),
        "mode": format!("{:?}", cfg.runtime.mode).to_lowercase(),
    });
    let mut log = if resume
        && dir
            .join(caprl_common::telemetry::runlog::RUN_LOG_FILE)
            .exists()
    {
        RunLog::open_append(dir)?
    } else {
        match RunLog::create(dir, &toml, header) {
            Ok(log) => log,
            Err(caprl_common::telemetry::TelemetryError::RunLogExists { .. }) => {
                RunLog::open_append(dir)?
            }
            Err(e) => return Err(e.into()),
        }
    };
    if cfg.train.tensorboard {
        log.mirror_to_tensorboard(&dir.join(TB_DIR), &toml, step)?;
    }
    Ok(Some(log))
}

/// A new run in a run dir that holds an earlier one moves the earlier run's
/// checkpoints, best models and run log into `RUN_DIR/previous/` (replacing an
/// older one there), so its best checkpoints and log never leak into the new run.
fn set_aside_previous_run(cfg: &RunConfig) -> Result<()> {
    let run_dir = Path::new(&cfg.run_dir);
    let ck_root = cfg.checkpoint_dir();
    let entries = [
        run_dir.join("best-xe"),
        run_dir.join("best-rl"),
        run_dir.join(caprl_common::telemetry::runlog::RUN_LOG_FILE),
        run_dir.join(TB_DIR),
        ck_root.clone(),
    ];
    if !entries.iter().any(|p| p.exists()) {
        return Ok(());
    }
    let previous = run_dir.join("previous");
    if previous.exists() {
        std::fs::remove_dir_all(&previous)
            .with_context(|| format!("removing {}", previous.display()))?;
    }
    std::fs::create_dir_all(&previous)
        .with_context(|| format!("creating {}", previous.display()))?;
    for path in entries.iter().filter(|p| p.exists()) {
        let name = path.file_name().unwrap_or_default();
        std::fs::rename(path, previous.join(name)).with_context(|| {
            format!("moving {} aside to {}", path.display(), previous.display())
        })?;
    }
    tracing::warn!(
        "{} held an earlier run: moved its checkpoints and run log to {} (use --resume to continue a run)",
        run_dir.display(),
        previous.display()
    );
    Ok(())
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
    disc: Option<&OnlineDisc>,
) -> Result<()> {
    let mut files = files(cfg, data, disc)?;
    files.push((BEST_SCORE, format!("{cider}\n").into_bytes()));
    trainer
        .save(dir, 1, &files)
        .with_context(|| format!("writing the best checkpoint to {}", dir.display()))?;
    Ok(())
}

/// Files every checkpoint carries besides weights and optimizer state: the run
/// config (so `eval` and `caption` can rebuild the model; NATS secrets
/// redacted, a checkpoint gets copied around) and the vocabulary hash.
fn extras(cfg: &RunConfig, data: &Dataset) -> Vec<(&'static str, Vec<u8>)> {
    vec![
        (CONFIG_FILE, cfg.redacted().to_toml_string().into_bytes()),
        (VOCAB_HASH_FILE, data.vocab.hash().as_bytes().to_vec()),
    ]
}

/// [`extras`] plus the discriminator's weights and optimizer state when there is one.
fn files(
    cfg: &RunConfig,
    data: &Dataset,
    disc: Option<&OnlineDisc>,
) -> Result<Vec<(&'static str, Vec<u8>)>> {
    let mut files = extras(cfg, data);
    if let Some(d) = disc {
        files.extend(d.files()?);
    }
    Ok(files)
}

fn best_cider(dir: &Path) -> Option<f64> {
    let ck = checkpoint::latest_valid(dir).ok()??;
    std::fs::read_to_string(ck.file(BEST_SCORE))
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn latest_in(dir: &Path) -> Result<PathBuf> {
    Ok(checkpoint::latest_valid(dir)?
        .with_context(|| format!("no checkpoint in {}", dir.display()))?
        .dir)
}

/// Checkpoint `dir` itself (a `ckpt-*` directory), or the newest valid one it holds. A damaged
/// checkpoint is reported as such (the checksum or size that failed), not as a missing one.
fn resolve_checkpoint(dir: &Path) -> Result<checkpoint::Checkpoint> {
    let first = match checkpoint::open(dir) {
        Ok(ck) => return Ok(ck),
        Err(e @ caprl_learner::LearnerError::Corrupt { .. }) => return Err(e.into()),
        Err(e) => e,
    };
    if let Some(ck) = checkpoint::latest_valid(dir)? {
        return Ok(ck);
    }
    if let Some(newest) = checkpoint::damage(dir)?.into_iter().next() {
        return Err(newest).with_context(|| {
            format!(
                "{} holds no checkpoint that verifies; the newest one is damaged",
                dir.display()
            )
        });
    }
    Err(first).with_context(|| {
        format!(
            "{} is not a checkpoint (expected a ckpt-* directory written by `caprl train`, or a directory holding them)",
            dir.display()
        )
    })
}

/// A trained model with the config it was trained with and its data set
/// (checked against the checkpoint's vocabulary hash). `data_dir` overrides
/// the data set directory recorded in the checkpoint.
pub struct Loaded {
    pub cfg: RunConfig,
    pub data: Dataset,
    pub model: Captioner,
    /// The value head of an mc-pg / actor-critic checkpoint.
    pub value: Option<ValueHead>,
}

/// Opens checkpoint `ck_dir` (a `ckpt-*` directory, or a directory holding them:
/// the newest valid one is used).
pub fn load_checkpoint(ck_dir: &Path, data_dir: Option<&Path>, device: &Device) -> Result<Loaded> {
    let ck = resolve_checkpoint(ck_dir)?;
    let text = std::fs::read_to_string(ck.file(CONFIG_FILE))
        .with_context(|| format!("reading {}", ck.file(CONFIG_FILE).display()))?;
    let mut cfg = RunConfig::from_toml_str(&text, &ck.file(CONFIG_FILE).display().to_string())?;
    if let Some(d) = data_dir {
        cfg.data.dir = d.display().to_string();
    }
    let hash = std::fs::read_to_string(ck.file(VOCAB_HASH_FILE))
        .with_context(|| format!("reading {}", ck.file(VOCAB_HASH_FILE).display()))?;
    let data =
        Dataset::open_expecting(Path::new(&cfg.data.dir), hash.trim()).with_context(|| {
            format!(
                "opening the data set the checkpoint was trained on ({})",
                cfg.data.dir
            )
        })?;
    let model_cfg: CaptionerConfig = setup::captioner_config(&cfg, &data)?;
    let model = Captioner::load(&ck.file("model.safetensors"), &model_cfg, device)?;
    let value = match ck.file("value.safetensors").exists() {
        true => Some(ValueHead::load(
            &ck.file("value.safetensors"),
            model_cfg.hidden,
            device,
        )?),
        false => None,
    };
    Ok(Loaded {
        cfg,
        data,
        model,
        value,
    })
}
