//! Everything that can be wrong with a run config, phrased so the user knows
//! what to fix.

use std::path::PathBuf;

/// A config that could not be read, parsed, overridden or validated.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// Malformed TOML, a wrong type or an unknown key in a config file.
    #[error("{file}:{line}:{column}: {message}\n  {line} | {source_line}")]
    Parse {
        file: String,
        line: usize,
        column: usize,
        message: String,
        source_line: String,
    },

    #[error("--set `{arg}`: expected KEY=VALUE or SECTION.KEY=VALUE, e.g. model.hidden=512")]
    BadSetArg { arg: String },

    #[error("unknown config key `{key}`; allowed: {allowed}")]
    UnknownKey { key: String, allowed: String },

    /// A `--set` value that does not fit the key's type.
    #[error("--set {key}={value}: {message}")]
    BadOverride {
        key: String,
        value: String,
        message: String,
    },

    /// A value of the right type outside its allowed range or set.
    #[error("{key} = {value} is not allowed; expected {allowed}")]
    OutOfRange {
        key: String,
        value: String,
        allowed: String,
    },

    #[error(transparent)]
    BadDevice(#[from] caprl_model::model::BadDevice),

    #[error("unknown reward `{name}` in reward.spec; allowed: {allowed}")]
    UnknownReward { name: String, allowed: String },

    #[error("reward.spec: weight `{weight}` of {name} must be a finite number >= 0")]
    BadRewardWeight { name: String, weight: String },

    #[error("reward.spec `{spec}`: {reason}")]
    BadRewardSpec { spec: String, reason: String },

    /// `--config` or `--set` given to a command that would not read them.
    #[error("caprl {command} {reads}, so {option} would change nothing: {hint}")]
    NotRead {
        command: String,
        reads: &'static str,
        option: &'static str,
        hint: &'static str,
    },
}

/// The first rule a section broke ([`caprl_wire::check::first_violation`]), as the error that
/// names its key, its value and what is allowed.
impl From<caprl_wire::check::Violation> for ConfigError {
    fn from(v: caprl_wire::check::Violation) -> ConfigError {
        ConfigError::OutOfRange {
            key: v.key.to_string(),
            value: v.value,
            allowed: v.allowed.to_string(),
        }
    }
}
