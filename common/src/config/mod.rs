//! The one typed run configuration: a TOML file, `--set` overrides on top,
//! validated up front.
//!
//! ```no_run
//! # use caprl_common::config::RunConfig;
//! let sets = vec!["model.hidden=1024".to_string()];
//! let config = RunConfig::load(Some(std::path::Path::new("run.toml")), &sets)?;
//! println!("{}", config.to_toml_string());
//! # Ok::<(), caprl_common::config::ConfigError>(())
//! ```

mod error;
mod overrides;
mod reward_spec;
mod runtime_section;
mod schema;

use std::path::{Path, PathBuf};

use serde::Deserialize;
use sha2::{Digest, Sha256};
use toml::Table;

use crate::bus::BusOptions;
use caprl_wire::check::{allowed_by, first_violation_of, ruled, Rules};
use caprl_wire::Sampling;

pub use caprl_data::DataConfig;
pub use caprl_model::model::DeviceSpec;
pub use error::ConfigError;
pub use reward_spec::{RewardName, RewardSpec, DIVERSITY};
pub use schema::{
    Baseline, CheckpointConfig, ClipConfig, DecodeConfig, DfSource, Dtype, IsLevel, KlEstimator,
    KlIn, Mode, ModelConfig, ModelKind, NatsConfig, ObjectiveName, OffPolicyCorrection,
    OptimConfig, PpoProximal, PpoRatio, RewardConfig, RnnKind, RunConfig, RuntimeConfig,
    ScheduleKind, StaleRollouts, TrainConfig, WtfBaseline,
};

/// The commented default config file; parses to exactly `RunConfig::default()`.
pub const DEFAULT_TOML: &str = include_str!("default.toml");

/// One key of [`DEFAULT_TOML`] as the file writes it: the reference page of the docs and the
/// tests that hold the comments to the rules read the file through [`default_keys`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefaultKey {
    /// The section (`""` for the top-level keys).
    pub section: &'static str,
    pub key: &'static str,
    /// The default, as written (strings quoted).
    pub value: &'static str,
    /// The comment after the value (`""` when there is none).
    pub comment: &'static str,
}

/// Every key of [`DEFAULT_TOML`], in the file's order.
pub fn default_keys() -> Vec<DefaultKey> {
    let mut section = "";
    let mut keys = Vec::new();
    for line in DEFAULT_TOML.lines() {
        let line = line.trim();
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name;
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let Some((key, rest)) = line.split_once(" = ") else {
            continue;
        };
        let (value, comment) = rest.split_once(" #").unwrap_or((rest, ""));
        keys.push(DefaultKey {
            section,
            key: key.trim(),
            value: value.trim(),
            comment: comment.trim(),
        });
    }
    keys
}

const REDACTED: &str = "<redacted>";

impl RunConfig {
    /// Reads `path` (or starts from the defaults when `None`), applies the
    /// `--set` overrides in order, and validates the result.
    pub fn load(path: Option<&Path>, sets: &[String]) -> Result<RunConfig, ConfigError> {
        let tree = match path {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
                    path: path.to_path_buf(),
                    source,
                })?;
                let tree = parse_tree(&text, &path.display().to_string())?;
                if tree.is_empty() {
                    // Legal, but a wrong path or an unsaved editor buffer looks the same.
                    tracing::warn!(
                        "{} sets no key (it is empty or only comments): every key takes its \
                         default (`caprl config default` prints them)",
                        path.display()
                    );
                }
                tree
            }
            None => Table::new(),
        };
        with_overrides(tree, sets)
    }

    /// This config with `--set` overrides applied on top, validated: a checkpoint's own config
    /// changed for one command (`caprl eval --set decode.beam_groups=3`).
    pub fn with_sets(&self, sets: &[String]) -> Result<RunConfig, ConfigError> {
        if sets.is_empty() {
            return Ok(self.clone());
        }
        with_overrides(parse_tree(&self.to_toml_string(), "<config>")?, sets)
    }

    /// Parses and validates a whole config from TOML text; `origin` names the
    /// text in error messages (a file name, or e.g. `<checkpoint>`).
    pub fn from_toml_str(text: &str, origin: &str) -> Result<RunConfig, ConfigError> {
        let config = parse_config(text, origin)?;
        config.check()?;
        Ok(config)
    }

    /// The canonical TOML form: every key, in schema order. Equal configs give
    /// equal strings.
    pub fn to_toml_string(&self) -> String {
        // Only u64 values above i64::MAX fail to serialize, and validation
        // refuses those; the fallback keeps this total without panicking.
        toml::to_string(self)
            .unwrap_or_else(|e| format!("# not representable as TOML: {e}\n# {self:?}\n"))
    }

    /// Hex SHA-256 of [`RunConfig::to_toml_string`]; identifies the run's config
    /// in snapshots and the run log.
    pub fn hash(&self) -> String {
        hex::encode(Sha256::digest(self.to_toml_string().as_bytes()))
    }

    /// `checkpoint.dir`, or `<run_dir>/checkpoints` when it is empty.
    pub fn checkpoint_dir(&self) -> PathBuf {
        if self.checkpoint.dir.is_empty() {
            Path::new(&self.run_dir).join("checkpoints")
        } else {
            PathBuf::from(&self.checkpoint.dir)
        }
    }

    /// A copy with the NATS secrets (password, token, nkey seed) replaced, for
    /// printing and logging.
    pub fn redacted(&self) -> RunConfig {
        let mut c = self.clone();
        for secret in [
            &mut c.nats.password,
            &mut c.nats.token,
            &mut c.nats.nkey_seed,
        ] {
            if !secret.is_empty() {
                *secret = REDACTED.to_string();
            }
        }
        c
    }
}

/// Every section's rules, each written by the section's owner: the top-level keys'
/// ([`RunConfig::CHECKS`]), `[data]`'s, the model's, the optimizer's, beam search's, the
/// sampling's every task carries, and the bus's (`[nats]`, and the bus keys of `[runtime]`).
/// The rules of what only the learner's side reads (`[train]`, `[checkpoint]`, `[clip]` and
/// the rest of `[runtime]`) are its own, run when it checks the loaded config
/// (`caprl_learner::objective::CheckedConfig`).
impl RunConfig {
    /// Every section's rules the loader runs, with the part of the config each is about.
    fn rules(&self) -> Vec<Box<dyn Rules + '_>> {
        vec![
            ruled(RunConfig::CHECKS, self),
            ruled(DataConfig::CHECKS, &self.data),
            ruled(ModelConfig::CHECKS, &self.model),
            ruled(OptimConfig::CHECKS, &self.optim),
            ruled(DecodeConfig::CHECKS, &self.decode),
            ruled(Sampling::CHECKS, self.decode.sampling()),
            ruled(NatsConfig::CHECKS, &self.nats),
            ruled(
                BusOptions::CHECKS,
                BusOptions::of(&self.runtime, &self.nats),
            ),
        ]
    }

    /// The first rule the config breaks, as the error that names its key.
    fn check(&self) -> Result<(), ConfigError> {
        first_violation_of(&self.rules()).map_or(Ok(()), |v| Err(v.into()))
    }
}

/// What every rule the loader runs about `key` (`section.key`) allows, joined by "; ";
/// `None` when none is about it.
pub fn allowed_for(key: &str) -> Option<String> {
    allowed_by(&RunConfig::default().rules(), key)
}

/// A unit enum value as the config file spells it (`dr-grpo`, `wtf-rl`), for messages.
pub fn spelled(value: &impl serde::Serialize) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// A config as JSON (a run log's header, or a [`RunConfig`] serialised) flattened to
/// `section.key` -> the value's text (strings bare, the rest as JSON): what the report's
/// "keys the runs differ in" table and `--resume`'s "settings that changed" compare.
pub fn flat_keys(value: &serde_json::Value) -> std::collections::BTreeMap<String, String> {
    fn walk(
        prefix: &str,
        value: &serde_json::Value,
        out: &mut std::collections::BTreeMap<String, String>,
    ) {
        match value {
            serde_json::Value::Object(map) => {
                for (k, v) in map {
                    let key = match prefix.is_empty() {
                        true => k.clone(),
                        false => format!("{prefix}.{k}"),
                    };
                    walk(&key, v, out);
                }
            }
            serde_json::Value::String(s) => {
                out.insert(prefix.to_string(), s.clone());
            }
            other => {
                out.insert(prefix.to_string(), other.to_string());
            }
        }
    }
    let mut out = std::collections::BTreeMap::new();
    walk("", value, &mut out);
    out
}

/// Applies `sets` to `tree`, deserializes and validates the result.
fn with_overrides(mut tree: Table, sets: &[String]) -> Result<RunConfig, ConfigError> {
    overrides::apply(&mut tree, sets)?;
    let config =
        RunConfig::deserialize(toml::Value::Table(tree)).map_err(|e| ConfigError::BadOverride {
            key: "--set".to_string(),
            value: sets.join(" "),
            message: e.message().to_string(),
        })?;
    config.check()?;
    Ok(config)
}

/// Deserializes `text` straight into the schema so that syntax errors, wrong
/// types and unknown keys carry the file's line and column.
fn parse_config(text: &str, origin: &str) -> Result<RunConfig, ConfigError> {
    toml::from_str::<RunConfig>(text).map_err(|e| located(&e, text, origin))
}

/// Checks the file against the schema, then returns its raw tree for the
/// overrides to edit.
fn parse_tree(text: &str, origin: &str) -> Result<Table, ConfigError> {
    parse_config(text, origin)?;
    toml::from_str::<Table>(text).map_err(|e| located(&e, text, origin))
}

fn located(e: &toml::de::Error, text: &str, origin: &str) -> ConfigError {
    let (line, column, source_line) = match e.span() {
        Some(span) => line_column(text, span.start),
        None => (0, 0, String::new()),
    };
    ConfigError::Parse {
        file: origin.to_string(),
        line,
        column,
        message: e.message().trim_end().replace('\n', "; "),
        source_line,
    }
}

/// 1-based line and column (in characters) of byte `offset`, and that line.
fn line_column(text: &str, offset: usize) -> (usize, usize, String) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line = before.matches('\n').count() + 1;
    let column = before[line_start..].chars().count() + 1;
    let source_line = text[line_start..].lines().next().unwrap_or("").to_string();
    (line, column, source_line)
}
