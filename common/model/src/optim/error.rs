//! The optimizer's error type.

use std::path::PathBuf;

/// What went wrong in the optimizer; each message says what to fix.
#[derive(Debug, thiserror::Error)]
pub enum OptimError {
    #[error("tensor error: {0}")]
    Candle(#[from] candle_core::Error),
    /// A hyper-parameter is out of range.
    #[error("optim.{key} = {value}: {expected}")]
    Param {
        key: &'static str,
        value: String,
        expected: &'static str,
    },
    /// An optimizer state file is unreadable or does not match the model.
    #[error("optimizer state {path}: {reason}")]
    State { path: PathBuf, reason: String },
    #[error(transparent)]
    Poisoned(#[from] crate::model::params::Poisoned),
}

pub(crate) type Result<T> = std::result::Result<T, OptimError>;
