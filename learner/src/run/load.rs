//! Opening checkpoints: one to evaluate or caption with ([`load_checkpoint`]), one to start RL
//! from (`--start-from`), or the directory a user named (a `ckpt-*` dir or one holding them).

use std::path::{Path, PathBuf};

use crate::error::Doing;
use caprl_common::config::RunConfig;
use caprl_data::Dataset;
use caprl_model::model::{Captioner, CaptionerConfig, Device, ValueHead};

use super::layout::{InputShape, CONFIG_FILE, INPUTS_FILE, VOCAB_HASH_FILE};
use super::Result;
use crate::checkpoint;
use crate::trainer::{Phase, Trainer, VALUE_WEIGHTS, WEIGHTS};
use crate::LearnerError;

/// Checkpoint `dir` itself (a `ckpt-*` directory), or the newest valid one it holds. A damaged
/// checkpoint is reported as such (the checksum or size that failed), not as a missing one.
pub(super) fn resolve_checkpoint(dir: &Path) -> Result<checkpoint::Checkpoint> {
    let first = match checkpoint::open(dir) {
        Ok(ck) => return Ok(ck),
        Err(e @ LearnerError::Corrupt { .. }) => return Err(e),
        Err(e) => e,
    };
    if let Some(ck) = checkpoint::latest_valid(dir)? {
        return Ok(ck);
    }
    if let Some(newest) = checkpoint::damage(dir)?.into_iter().next() {
        return Err(newest).doing(|| {
            format!(
                "{} holds no checkpoint that verifies; the newest one is damaged",
                dir.display()
            )
        });
    }
    Err(first).doing(|| {
        format!(
            "{} is not a checkpoint (expected a ckpt-* directory written by `caprl train`, or a directory holding them)",
            dir.display()
        )
    })
}

/// Refuses `data` when its features have another shape than those checkpoint `ck` was trained
/// on, naming the features file (checkpoints written before the shape was recorded pass).
fn check_inputs(ck: &checkpoint::Checkpoint, data: &Dataset) -> Result<()> {
    let Ok(text) = std::fs::read(ck.file(INPUTS_FILE)) else {
        return Ok(());
    };
    let trained: InputShape = serde_json::from_slice(&text).map_err(|e| LearnerError::Corrupt {
        path: ck.file(INPUTS_FILE),
        reason: e.to_string(),
    })?;
    let here = InputShape::of(data);
    if here == trained {
        return Ok(());
    }
    let describe = |s: InputShape| match s.att {
        Some((r, d)) => format!("fc {} values per input, att {r} x {d}", s.fc),
        None => format!("fc {} values per input, no att", s.fc),
    };
    Err(LearnerError::Data(caprl_data::DataError::Invalid {
        path: data.features_path().to_path_buf(),
        message: format!(
            "the features have {}, but the model in {} was trained on {}; use the features it \
             was trained on (or features of the same shape)",
            describe(here),
            ck.dir.display(),
            describe(trained)
        ),
    }))
}

/// A trained model with the config it was trained with and its data set
/// (checked against the checkpoint's vocabulary hash). `data_dir` overrides
/// the data set directory recorded in the checkpoint.
pub struct Loaded {
    /// The checkpoint directory the path resolved to, with its phase and step.
    pub checkpoint: PathBuf,
    pub phase: Phase,
    pub step: u64,
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
        .doing(|| format!("reading {}", ck.file(CONFIG_FILE).display()))?;
    let mut cfg = RunConfig::from_toml_str(&text, &ck.file(CONFIG_FILE).display().to_string())?;
    if let Some(d) = data_dir {
        cfg.data.dir = d.display().to_string();
    }
    let hash = std::fs::read_to_string(ck.file(VOCAB_HASH_FILE))
        .doing(|| format!("reading {}", ck.file(VOCAB_HASH_FILE).display()))?;
    let data =
        Dataset::open_expecting(Path::new(&cfg.data.dir), hash.trim()).doing(
            || match data_dir {
                Some(_) => format!("opening the data set given with --data ({})", cfg.data.dir),
                None => format!(
                    "opening the data set the checkpoint was trained on ({}; --data names another)",
                    cfg.data.dir
                ),
            },
        )?;
    check_inputs(&ck, &data)?;
    let model_cfg =
        CaptionerConfig::for_dataset(&cfg.model, &data, cfg.data.max_len as usize, cfg.dtype)?;
    let model = Captioner::load(&ck.file(WEIGHTS), &model_cfg, device)?;
    refuse_non_finite(&model, &ck.file(WEIGHTS))?;
    let value = match ck.file(VALUE_WEIGHTS).exists() {
        true => Some(ValueHead::load(
            &ck.file(VALUE_WEIGHTS),
            model_cfg.model.state_dim(),
            device,
        )?),
        false => None,
    };
    let (phase, step) = Trainer::phase_of(&ck)?;
    Ok(Loaded {
        checkpoint: ck.dir.clone(),
        phase,
        step,
        cfg,
        data,
        model,
        value,
    })
}

/// Refuses weights with a NaN or an infinity: such a model captions nothing and scores zero,
/// which would otherwise pass for a result (a checkpoint written by a run that diverged, or a
/// file edited and re-signed by hand).
fn refuse_non_finite(model: &Captioner, path: &Path) -> Result<()> {
    let vars = model
        .varmap()
        .data()
        .lock()
        .map_err(|_| LearnerError::Corrupt {
            path: path.to_path_buf(),
            reason: "its parameters could not be read".into(),
        })?;
    let mut names: Vec<&String> = vars.keys().collect();
    names.sort();
    for name in names {
        let values = vars[name]
            .as_tensor()
            .flatten_all()?
            .to_dtype(candle_core::DType::F32)?;
        let bad = values
            .to_vec1::<f32>()?
            .iter()
            .filter(|x| !x.is_finite())
            .count();
        if bad > 0 {
            return Err(LearnerError::Corrupt {
                path: path.to_path_buf(),
                reason: format!("parameter `{name}` holds {bad} NaN or infinite values"),
            });
        }
    }
    Ok(())
}

/// The weights of checkpoint `dir` (a `ckpt-*` dir or a dir holding them, e.g. `RUN/best-xe`)
/// as the start of an RL run, checked against the data set's vocabulary.
pub(super) fn start_model(
    dir: &Path,
    data: &Dataset,
    model_cfg: &CaptionerConfig,
    device: &Device,
) -> Result<Captioner> {
    let ck = resolve_checkpoint(dir).doing(|| "--start-from".to_string())?;
    let hash = std::fs::read_to_string(ck.file(VOCAB_HASH_FILE))
        .doing(|| format!("reading {}", ck.file(VOCAB_HASH_FILE).display()))?;
    caprl_data::check_made_for(&hash, data.vocab.hash()).map_err(|e| {
        LearnerError::Misconfigured(format!(
            "--start-from {}: the checkpoint was {e}; use the data set it was trained on",
            ck.dir.display()
        ))
    })?;
    check_inputs(&ck, data)?;
    tracing::info!("starting RL from {}", ck.dir.display());
    Captioner::load(&ck.file(WEIGHTS), model_cfg, device).doing(|| {
        format!(
            "--start-from {}: its weights do not fit the configured model (set [model] as it was trained)",
            ck.dir.display()
        )
    })
}
