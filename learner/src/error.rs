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
    #[error("{0}")]
    Invalid(String),
}
