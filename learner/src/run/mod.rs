//! The training run of one process: XE warm start, then the configured RL objective, with
//! per-epoch validation, best-checkpoint keeping, periodic checkpoints and exact resume.
//!
//! The RL phase runs over a bus ([`crate::driver::Driver`]): the learner publishes a snapshot,
//! issues rollout tasks, and trains on the scored rollouts the actor and reward-worker roles
//! send back, whether they run as tasks of this process (in-process bus) or as other processes
//! (NATS). The objective ([`crate::objective`]) sees only the scored batch, never how it
//! arrived. Every step goes to `RUN_DIR/run.jsonl` and the Prometheus metrics.
//!
//! - `phase`: the epochs and steps of one phase, validation, best checkpoints;
//! - `rl_step`: one RL iteration over the bus: the collection (with dynamic sampling's
//!   refills), the targets and the update;
//! - `disc_setup`: the online discriminator at the start of RL;
//! - [`layout`]: the run directory and the files every checkpoint carries;
//! - `load`: opening a checkpoint to evaluate, caption or start RL from;
//! - `setup`: model shape, schedule and optimizer settings from the config.

mod disc_setup;
pub mod layout;
mod load;
mod phase;
mod rl_step;
pub(crate) mod setup;

use std::path::{Path, PathBuf};

use caprl_common::config::RunConfig;
use caprl_common::telemetry::ResumeRecord;
use caprl_data::Dataset;
use caprl_model::model::{Captioner, CaptionerConfig, Device};

pub use load::{load_checkpoint, Loaded};
pub use setup::schedule;

use crate::checkpoint;
use crate::driver::Driver;
use crate::error::{Doing, LearnerError};
use crate::objective::{uses_disc, CheckedConfig, Objective};
use crate::trainer::{Phase, Trainer, WEIGHTS};
use disc_setup::online_disc;
use layout::{
    check_checkpoint_dir, open_run_log, say_changed_settings, set_aside_previous_run, BEST_XE,
};
pub use layout::{lock_run_dir, RunDirLock};
use load::{resolve_checkpoint, start_model};
use phase::run_phase;

/// What every step of the run returns.
type Result<T> = std::result::Result<T, LearnerError>;

/// What every part of the run loop reads.
#[derive(Clone, Copy)]
struct Run<'a> {
    cfg: &'a RunConfig,
    data: &'a Dataset,
    objective: &'a Objective,
}

/// What a finished training run leaves behind.
pub struct Outcome {
    /// Best checkpoint of each phase that ran, by validation CIDEr-D.
    pub best_xe: Option<PathBuf>,
    pub best_rl: Option<PathBuf>,
}

/// Trains per `cfg` (checked by its objective and rewards): `xe_epochs` of XE (skipped when 0), then `rl_epochs` of
/// the configured objective (skipped for `objective = xe`). With `resume`,
/// continues from the newest valid checkpoint in the checkpoint dir.
///
/// The RL phase gets its rollouts through `driver` (the CLI's `roles` builds one for the
/// in-process and the NATS wirings); the driver marks the learner ready once the first
/// snapshot is published. `_lock` ([`lock_run_dir`]) proves that no other learner trains into
/// the run directory.
pub fn train(
    cfg: &CheckedConfig,
    data: &Dataset,
    device: &Device,
    resume: bool,
    start_from: Option<&Path>,
    driver: &mut Driver,
    _lock: &RunDirLock,
) -> Result<Outcome> {
    let objective = Objective::from_config(cfg);
    driver.set_data(
        data.vocab.hash(),
        caprl_wire::DataFingerprint(data.fingerprint().to_string()),
    );
    driver.set_rewards(cfg.reward.spec.terms().iter().map(|(n, _)| n.to_string()));
    warn_over_length(cfg, data);
    if objective.has_rl_phase() && cfg.train.rl_epochs > 0 {
        driver.check_messages_fit(
            cfg.data.max_len as usize,
            data.vocab.len(),
            &reward_components(cfg),
        )?;
    }
    let run = Run {
        cfg,
        data,
        objective: &objective,
    };
    let model_cfg =
        CaptionerConfig::for_dataset(&cfg.model, data, cfg.data.max_len as usize, cfg.dtype)?;
    let adam = cfg.optim.adam();
    check_checkpoint_dir(cfg)?;
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
            say_changed_settings(cfg, &ck)?;
            Trainer::restore(&ck, &model_cfg, device, adam, cfg.seed)?
        }
        None => {
            if resume {
                refuse_all_damaged(&ck_root)?;
                caprl_common::progress::notice(&format!(
                    "--resume found no checkpoint in {}: starting a NEW run from scratch",
                    ck_root.display()
                ));
            }
            new_trainer(cfg, data, (&model_cfg, device), start_from)?
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
    let wants_rl = objective.has_rl_phase();

    if trainer.state.phase == Phase::Xe && cfg.train.xe_epochs > 0 {
        outcome.best_xe = Some(run_phase(
            &run,
            &mut trainer,
            Phase::Xe,
            None,
            None,
            &mut log,
        )?);
    }
    if wants_rl && cfg.train.rl_epochs > 0 {
        enter_rl(
            &run,
            &mut trainer,
            outcome.best_xe.as_deref(),
            (&model_cfg, device),
        )?;
        let mut disc = match uses_disc(cfg) {
            true => Some(online_disc(cfg, data, &trainer, resumed_from.as_deref())?),
            false => None,
        };
        if !resume {
            driver.purge()?;
        }
        trainer.state.version_offset =
            driver.continue_versions(trainer.state.policy_version, trainer.state.version_offset)?;
        outcome.best_rl = Some(run_phase(
            &run,
            &mut trainer,
            Phase::Rl,
            Some(driver),
            disc.as_mut(),
            &mut log,
        )?);
    }
    Ok(outcome)
}

/// `--resume` where checkpoints exist but none loads: starting over would drop the run (and
/// move it aside as "an earlier run"), so it stops with what is wrong with each.
fn refuse_all_damaged(ck_root: &Path) -> Result<()> {
    let damage = checkpoint::damage(ck_root)?;
    if damage.is_empty() {
        return Ok(());
    }
    let reasons: Vec<String> = damage.iter().map(ToString::to_string).collect();
    Err(LearnerError::Misconfigured(format!(
        "--resume: every checkpoint in {} is damaged ({}); restore one, or move them away to \
         start a new run",
        ck_root.display(),
        reasons.join("; ")
    )))
}

/// The names of the reward components each sequence's reward carries: the spec's terms, and
/// the diversity term of the objectives that explore.
fn reward_components(cfg: &RunConfig) -> Vec<String> {
    let mut names: Vec<String> = cfg
        .reward
        .spec
        .terms()
        .iter()
        .map(|(name, _)| name.as_str().to_string())
        .collect();
    names.push(caprl_common::config::DIVERSITY.to_string());
    names
}

/// Warns when training captions are longer than `data.max_len` (they are cut to it).
fn warn_over_length(cfg: &RunConfig, data: &Dataset) {
    if let Some(o) = data.train.over_length(cfg.data.max_len as usize) {
        tracing::warn!(
            "{} training captions are longer than data.max_len = {} words and are cut to it \
             (the longest: {} words, image {}); raise data.max_len to train on them whole",
            o.count,
            cfg.data.max_len,
            o.longest,
            o.id
        );
    }
}

/// A new run's trainer: a fresh model, or the one `start_from` names (then in the RL phase).
/// A bad `start_from` is refused before an earlier run is moved aside.
fn new_trainer(
    cfg: &RunConfig,
    data: &Dataset,
    (model_cfg, device): (&CaptionerConfig, &Device),
    start_from: Option<&Path>,
) -> Result<Trainer> {
    let adam = cfg.optim.adam();
    let model = match start_from {
        Some(dir) => start_model(dir, data, model_cfg, device)?,
        None => Captioner::new(model_cfg, device, cfg.seed)?,
    };
    set_aside_previous_run(cfg)?;
    let mut trainer = Trainer::new(model, adam, cfg.seed)?;
    if start_from.is_some() {
        trainer.enter_phase(Phase::Rl, adam)?;
    }
    Ok(trainer)
}

/// Readies `trainer` for the RL phase: the best XE weights when it comes from XE (RL starts
/// from them, as in the source papers' schedules, and goes on counting steps and policy versions
/// from where XE stopped), the value head its objective needs, and the XE model as the KL
/// reference when `train.kl_coef > 0`.
fn enter_rl(
    run: &Run,
    trainer: &mut Trainer,
    best_xe: Option<&Path>,
    (model_cfg, device): (&CaptionerConfig, &Device),
) -> Result<()> {
    let cfg = run.cfg;
    let adam = cfg.optim.adam();
    if trainer.state.phase == Phase::Xe {
        if let Some(best) = best_xe {
            let ck = checkpoint::open(best)?;
            trainer.adopt_weights(&ck, model_cfg, device, adam)?;
        }
        trainer.enter_phase(Phase::Rl, adam)?;
    }
    if run.objective.uses_value_head() {
        trainer.ensure_critic(adam)?;
    }
    if cfg.train.kl_coef > 0.0 {
        let xe_dir = best_xe
            .map(Path::to_path_buf)
            .unwrap_or_else(|| Path::new(&cfg.run_dir).join(BEST_XE));
        let ck = resolve_checkpoint(&xe_dir).doing(|| {
            format!(
                "train.kl_coef > 0 needs the XE model RL started from, and {} holds none \
                 (train XE first, or pass --start-from)",
                xe_dir.display()
            )
        })?;
        trainer.set_reference(Captioner::load(&ck.file(WEIGHTS), model_cfg, device)?);
    }
    Ok(())
}
