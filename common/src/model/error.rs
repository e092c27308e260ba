//! The model's error type.

use std::path::PathBuf;

/// What went wrong in the model; each message says what to fix.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// A tensor operation failed (shape mismatch, device error, ...).
    #[error("tensor error: {0}")]
    Candle(#[from] candle_core::Error),
    /// The device string could not be used.
    #[error("device `{given}`: {reason}")]
    Device { given: String, reason: String },
    /// The model configuration is invalid.
    #[error("model config: `{key}` = {value}: {expected}")]
    Config {
        key: &'static str,
        value: String,
        expected: String,
    },
    /// Inputs handed to the model do not match its configuration.
    #[error("model input: {0}")]
    Input(String),
    /// A weights file could not be read or written.
    #[error("weights file {path}: {reason}")]
    Weights { path: PathBuf, reason: String },
}

/// Result alias for the model module.
pub type Result<T> = std::result::Result<T, ModelError>;
