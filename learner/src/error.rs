//! Errors of the learner, each saying what to do about it.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum LearnerError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("checkpoint {path} is damaged: {reason}; delete it or resume from an older one")]
    Corrupt { path: PathBuf, reason: String },
    #[error("tensor computation failed: {0}")]
    Candle(#[from] candle_core::Error),
    #[error(transparent)]
    Data(#[from] caprl_data::DataError),
    #[error(transparent)]
    Model(#[from] caprl_model::model::ModelError),
    #[error(transparent)]
    Optim(#[from] caprl_model::optim::OptimError),
    /// A run config that does not load (e.g. the one a checkpoint carries).
    #[error(transparent)]
    Config(#[from] caprl_common::config::ConfigError),
    /// The text–image encoder of the CLIP rewards.
    #[error(transparent)]
    Clip(#[from] caprl_clip::ClipError),
    /// METEOR's jar (`caprl eval --meteor`).
    #[error(transparent)]
    Meteor(#[from] caprl_score::MeteorError),
    #[error(transparent)]
    Telemetry(#[from] caprl_common::telemetry::TelemetryError),
    /// A file operation whose path the surrounding [`LearnerError::While`] names.
    #[error(transparent)]
    Fs(#[from] std::io::Error),
    /// What the run was doing when `source` failed ("opening the data set the checkpoint was
    /// trained on ...", "--start-from ..."); the source keeps its kind.
    #[error("{doing}")]
    While {
        doing: String,
        #[source]
        source: Box<LearnerError>,
    },
    /// A bus operation failed for good (a transient one is retried until shutdown first).
    #[error("bus: {0}")]
    Bus(#[from] caprl_common::bus::BusError),
    /// The learner was told to stop, or a role it runs with failed, while it waited.
    #[error("stopped while waiting for {0} (shutdown requested or a role failed)")]
    Stopped(&'static str),
    /// The config, the command line or the data set ask for something that cannot work; the
    /// message says what to change.
    #[error("{0}")]
    Misconfigured(String),
    /// The learner waits for results that no live role can deliver (each says why).
    #[error("the run cannot go on: {0}")]
    Stalled(String),
    /// Another learner holds the run directory's lock.
    #[error(
        "another learner is training into {} (it holds {}): stop it first, or give this one \
         another run_dir",
        run_dir.display(),
        lock.display()
    )]
    RunDirInUse { run_dir: PathBuf, lock: PathBuf },
    /// A directory that should hold a checkpoint holds none that loads.
    #[error("no checkpoint in {}", .0.display())]
    NoCheckpoint(PathBuf),
    /// A policy snapshot that does not serialise.
    #[error(transparent)]
    Snapshot(#[from] caprl_common::snapshot::SnapshotError),
    /// A message for the bus that does not encode (over the size limit, for one).
    #[error(transparent)]
    Wire(#[from] caprl_wire::WireError),
    /// Bytes this learner writes (a snapshot, its state) that do not serialise.
    #[error("cannot serialise {what}: {source}")]
    Serialise {
        what: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A broken invariant inside the learner: a fault of caprl, not of the run; please report it.
    #[error("internal error: {0} (a fault of caprl; please report it)")]
    Internal(&'static str),
}

impl LearnerError {
    /// Whether trying again later may succeed: a bus error while the broker is down.
    pub fn is_transient(&self) -> bool {
        match self {
            LearnerError::Bus(e) => e.is_transient(),
            LearnerError::While { source, .. } => source.is_transient(),
            _ => false,
        }
    }
}

/// Says what the run was doing when an error happened, keeping the error's kind as the source
/// (the learner's counterpart of `anyhow::Context`, for a library error type).
pub trait Doing<T> {
    fn doing(self, what: impl FnOnce() -> String) -> Result<T, LearnerError>;
}

impl<T, E: Into<LearnerError>> Doing<T> for Result<T, E> {
    fn doing(self, what: impl FnOnce() -> String) -> Result<T, LearnerError> {
        self.map_err(|e| LearnerError::While {
            doing: what(),
            source: Box::new(e.into()),
        })
    }
}
