//! The run directory: what a run leaves where, and the files every checkpoint carries.
//!
//! ```text
//! RUN_DIR/run.jsonl          the run log (and RUN_DIR/tb/, its TensorBoard mirror)
//! RUN_DIR/best-xe/ckpt-*     the best XE checkpoint by val CIDEr-D (val_cider.txt)
//! RUN_DIR/best-rl/ckpt-*     the best RL checkpoint (the latest, with the CLIP rewards)
//! [checkpoint] dir/ckpt-*    periodic checkpoints (default RUN_DIR/checkpoints)
//! RUN_DIR/previous-N/        earlier runs in the same directory, set aside (1 the oldest)
//! RUN_DIR/learner.lock       held (flock) by the learner training into RUN_DIR
//! ```

use std::path::{Path, PathBuf};

use super::Result;
use crate::error::{Doing, LearnerError};
use caprl_common::config::RunConfig;
use caprl_common::telemetry::stages::{self, Stage};
use caprl_common::telemetry::{tensorboard::TB_DIR, RunLog};
use caprl_data::Dataset;

use crate::checkpoint;
use crate::disc_online::OnlineDisc;
use crate::trainer::Trainer;

/// The best XE checkpoint's directory in the run dir.
pub const BEST_XE: &str = "best-xe";
/// The best RL checkpoint's directory in the run dir.
pub const BEST_RL: &str = "best-rl";
/// Where a new run moves an earlier run's files.
const PREVIOUS: &str = "previous";
/// The validation CIDEr-D of a best checkpoint.
const BEST_SCORE: &str = "val_cider.txt";
/// The run config in every checkpoint.
pub const CONFIG_FILE: &str = "config.toml";
/// The vocabulary hash in every checkpoint.
pub const VOCAB_HASH_FILE: &str = "vocab_hash.txt";
/// The shape of the input features the checkpoint was trained on ([`InputShape`]).
pub const INPUTS_FILE: &str = "inputs.json";

/// The input features' shape a model was trained on: `fc` values per input and, for region or
/// frame features, `att`'s `[R, D]`. Checked against a data set before its weights load, so
/// that a features file of another width is named as the cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct InputShape {
    pub fc: usize,
    pub att: Option<(usize, usize)>,
}

impl InputShape {
    /// The shape of `data`'s features.
    pub fn of(data: &Dataset) -> InputShape {
        InputShape {
            fc: data.fc_dim(),
            att: data.att_shape(),
        }
    }
}

/// The lock a learner holds on its run directory.
const LOCK_FILE: &str = "learner.lock";

/// An exclusive lock on the run directory, held as long as this value lives (the kernel drops
/// it when the process dies, however it dies).
pub struct RunDirLock {
    _file: std::fs::File,
}

/// Takes the run directory's learner lock, or says that another learner trains into it: two
/// learners on one run directory would overwrite each other's checkpoints and run log (a
/// learner started twice by mistake, or restarted while the old one still runs).
pub fn lock_run_dir(cfg: &RunConfig) -> Result<RunDirLock> {
    let run_dir = Path::new(&cfg.run_dir);
    std::fs::create_dir_all(run_dir).doing(|| format!("creating {}", run_dir.display()))?;
    let path = run_dir.join(LOCK_FILE);
    let file = std::fs::File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .doing(|| format!("opening {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(RunDirLock { _file: file }),
        Err(std::fs::TryLockError::WouldBlock) => Err(LearnerError::RunDirInUse {
            run_dir: run_dir.to_path_buf(),
            lock: path,
        }),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(e).doing(|| format!("locking {}", path.display()))
        }
    }
}

/// The run log: created for a new run, appended to on resume (created when
/// the resumed run has none yet); mirrored to TensorBoard from `step` on.
pub(super) fn open_run_log(cfg: &RunConfig, resume: bool, step: u64) -> Result<Option<RunLog>> {
    let dir = Path::new(&cfg.run_dir);
    let toml = cfg.redacted().to_toml_string();
    let header = serde_json::json!({
        "run_id": cfg.runtime.run_id,
        "seed": cfg.seed,
        "device": cfg.device.to_string(),
        // The CPU kernels' vector level: the figures and the rounding of a run depend on it.
        "simd": caprl_model::fastmath::simd().name(),
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

/// A new run in a run dir that holds an earlier one moves the earlier run's checkpoints, best
/// models and run log into `RUN_DIR/previous-N/` (`N` one past the highest there), so its best
/// checkpoints and log never leak into the new run and no earlier run is ever deleted; it says
/// so even with `-q`.
pub(super) fn set_aside_previous_run(cfg: &RunConfig) -> Result<()> {
    let run_dir = Path::new(&cfg.run_dir);
    let ck_root = cfg.checkpoint_dir();
    let entries = [
        run_dir.join(BEST_XE),
        run_dir.join(BEST_RL),
        run_dir.join(caprl_common::telemetry::runlog::RUN_LOG_FILE),
        run_dir.join(TB_DIR),
        ck_root.clone(),
    ];
    if !entries.iter().any(|p| p.exists()) {
        return Ok(());
    }
    let previous = run_dir.join(format!("{PREVIOUS}-{}", next_previous(run_dir)?));
    std::fs::create_dir_all(&previous).doing(|| format!("creating {}", previous.display()))?;
    for path in entries.iter().filter(|p| p.exists()) {
        let name = path.file_name().unwrap_or_default();
        std::fs::rename(path, previous.join(name))
            .doing(|| format!("moving {} aside to {}", path.display(), previous.display()))?;
    }
    caprl_common::progress::notice(&format!(
        "{} held an earlier run: moved its checkpoints and run log to {} (pass --resume to \
         continue a run instead)",
        run_dir.display(),
        previous.display()
    ));
    Ok(())
}

/// One past the highest `N` of the `previous-N` directories in `run_dir` (1 when there are
/// none; `previous/` of older versions counts as 0 and stays where it is).
fn next_previous(run_dir: &Path) -> Result<u64> {
    let entries = match std::fs::read_dir(run_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(1),
        Err(e) => return Err(e).doing(|| format!("listing {}", run_dir.display())),
    };
    let highest = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name();
            name.to_str()?
                .strip_prefix(PREVIOUS)?
                .strip_prefix('-')?
                .parse::<u64>()
                .ok()
        })
        .max()
        .unwrap_or(0);
    Ok(highest + 1)
}

/// A periodic checkpoint in `checkpoint.dir`, keeping the newest `checkpoint.keep`.
pub(super) fn save_checkpoint(
    cfg: &RunConfig,
    data: &Dataset,
    trainer: &mut Trainer,
    disc: Option<&OnlineDisc>,
) -> Result<()> {
    let _writing = stages::Timer::start(Stage::Checkpoint);
    let files = files(cfg, data, disc)?;
    trainer.save(&cfg.checkpoint_dir(), cfg.checkpoint.keep as usize, &files)?;
    Ok(())
}

pub(super) fn save_best(
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
        .doing(|| format!("writing the best checkpoint to {}", dir.display()))?;
    Ok(())
}

/// Files every checkpoint carries besides weights and optimizer state: the run
/// config (so `eval` and `caption` can rebuild the model; NATS secrets
/// redacted, a checkpoint gets copied around) and the vocabulary hash.
fn extras(cfg: &RunConfig, data: &Dataset) -> Vec<(&'static str, Vec<u8>)> {
    vec![
        (CONFIG_FILE, cfg.redacted().to_toml_string().into_bytes()),
        (VOCAB_HASH_FILE, data.vocab.hash().as_bytes().to_vec()),
        (
            INPUTS_FILE,
            serde_json::to_vec(&InputShape::of(data)).unwrap_or_default(),
        ),
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

pub(super) fn best_cider(dir: &Path) -> Option<f64> {
    let ck = checkpoint::latest_valid(dir).ok()??;
    std::fs::read_to_string(ck.file(BEST_SCORE))
        .ok()?
        .trim()
        .parse()
        .ok()
}

pub(super) fn latest_in(dir: &Path) -> Result<PathBuf> {
    match checkpoint::latest_valid(dir)? {
        Some(ck) => Ok(ck.dir),
        None => Err(LearnerError::NoCheckpoint(dir.to_path_buf())),
    }
}
