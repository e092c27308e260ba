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
        "simd": caprl_kernels::fastmath::simd().name(),
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

/// `path` absolute, with symbolic links resolved as far as it exists.
fn resolved(path: &Path) -> PathBuf {
    if let Ok(p) = path.canonicalize() {
        return p;
    }
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) if !parent.as_os_str().is_empty() => resolved(parent).join(name),
        (_, Some(name)) => std::env::current_dir().unwrap_or_default().join(name),
        _ => path.to_path_buf(),
    }
}

/// The run directory that the newest checkpoint in `ck_root` was written for (its config's
/// `run_dir`), if it holds one that says.
fn checkpoints_owner(ck_root: &Path) -> Option<PathBuf> {
    let newest = checkpoint::latest_valid(ck_root).ok().flatten()?;
    let text = std::fs::read_to_string(newest.file(CONFIG_FILE)).ok()?;
    let cfg = RunConfig::from_toml_str(&text, CONFIG_FILE).ok()?;
    Some(resolved(Path::new(&cfg.run_dir)))
}

/// Refuses a `checkpoint.dir` that is not this run's own: the run directory itself, inside the
/// data set, or holding another run directory's checkpoints (whose `--resume` would continue the
/// other run). Checked before anything is written or moved.
pub(super) fn check_checkpoint_dir(cfg: &RunConfig) -> Result<()> {
    if cfg.checkpoint.dir.is_empty() {
        return Ok(());
    }
    let (ck_root, run_dir) = (
        resolved(&cfg.checkpoint_dir()),
        resolved(Path::new(&cfg.run_dir)),
    );
    let data_dir = resolved(Path::new(&cfg.data.dir));
    let refuse = |why: String| {
        Err(LearnerError::Misconfigured(format!(
            "checkpoint.dir = {:?} {why}; give the run a directory of its own (or leave \
             checkpoint.dir empty for RUN_DIR/checkpoints)",
            cfg.checkpoint.dir
        )))
    };
    if ck_root == run_dir {
        return refuse("is the run directory itself".into());
    }
    if ck_root.starts_with(&data_dir) {
        return refuse(format!("lies inside the data set {}", cfg.data.dir));
    }
    match checkpoints_owner(&ck_root) {
        Some(owner) if owner != run_dir => refuse(format!(
            "holds the checkpoints of the run in {}",
            owner.display()
        )),
        _ => Ok(()),
    }
}

/// A new run in a run dir that holds an earlier one moves the earlier run's config, checkpoints,
/// best models and run log into `RUN_DIR/previous-N/` (`N` one past the highest there), so its
/// best checkpoints and log never leak into the new run and no earlier run is ever deleted; it
/// says so even with `-q`. A `checkpoint.dir` outside the run directory moves with it only when
/// its checkpoints are this run directory's ([`check_checkpoint_dir`] refused any other).
pub(super) fn set_aside_previous_run(cfg: &RunConfig) -> Result<()> {
    let run_dir = Path::new(&cfg.run_dir);
    let ck_root = cfg.checkpoint_dir();
    let mut entries = vec![
        run_dir.join(BEST_XE),
        run_dir.join(BEST_RL),
        run_dir.join(caprl_common::telemetry::runlog::RUN_LOG_FILE),
        run_dir.join(caprl_common::telemetry::runlog::CONFIG_FILE),
        run_dir.join(TB_DIR),
    ];
    let ours = resolved(&ck_root).starts_with(resolved(run_dir))
        || checkpoints_owner(&ck_root).is_some_and(|owner| owner == resolved(run_dir));
    if ours {
        entries.push(ck_root.clone());
    }
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

/// On `--resume`: the settings that differ from those of the checkpoint resumed (seed,
/// objective, learning rates, ...), said even with `-q`; the run goes on with the new ones, and
/// `RUN_DIR/config.toml` is rewritten to them (the old values stay in the checkpoints).
pub(super) fn say_changed_settings(cfg: &RunConfig, ck: &checkpoint::Checkpoint) -> Result<()> {
    let path = ck.file(CONFIG_FILE);
    let text = std::fs::read_to_string(&path).doing(|| format!("reading {}", path.display()))?;
    let before = RunConfig::from_toml_str(&text, &path.display().to_string())?;
    let flat = |c: &RunConfig| {
        caprl_common::config::flat_keys(&serde_json::to_value(c.redacted()).unwrap_or_default())
    };
    let (old, new) = (flat(&before), flat(cfg));
    let changed: Vec<String> = new
        .iter()
        .filter(|(k, v)| old.get(*k) != Some(v))
        .map(|(k, v)| {
            format!(
                "{k} {} -> {v}",
                old.get(k).map_or("(unset)", String::as_str)
            )
        })
        .collect();
    if changed.is_empty() {
        return Ok(());
    }
    caprl_common::progress::notice(&format!(
        "--resume with settings other than the checkpoint's ({}): {}; continuing with the new ones",
        ck.dir.display(),
        changed.join(", ")
    ));
    let run_config = Path::new(&cfg.run_dir).join(caprl_common::telemetry::runlog::CONFIG_FILE);
    std::fs::write(&run_config, cfg.redacted().to_toml_string())
        .doing(|| format!("writing {}", run_config.display()))
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
