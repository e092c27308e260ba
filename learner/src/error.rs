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
    Data(#[from] caprl_common::data::DataError),
    #[error(transparent)]
    Model(#[from] caprl_common::model::ModelError),
    #[error(transparent)]
    Optim(#[from] caprl_common::optim::OptimError),
    /// A bus operation failed for good (a transient one is retried until shutdown first).
    #[error("bus: {0}")]
    Bus(#[from] caprl_common::bus::BusError),
    /// The learner was told to stop, or a role it runs with failed, while it waited.
    #[error("stopped while waiting for {0} (shutdown requested or a role failed)")]
    Stopped(&'static str),
    #[error("{0}")]
    Invalid(String),
}

impl LearnerError {
    /// Whether trying again later may succeed: a bus error while the broker is down.
    pub fn is_transient(&self) -> bool {
        matches!(self, LearnerError::Bus(e) if e.is_transient())
    }
}
