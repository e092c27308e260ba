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
    /// Inputs handed to the model do not match its configuration: a task carrying them can never
    /// succeed.
    #[error("model input: {0}")]
    Input(String),
    /// A fault inside the model code (a poisoned lock, a missing layer): not the input's fault, so
    /// whatever hit it is retried, never dropped.
    #[error("internal model fault: {0}; this is a bug in caprl")]
    Internal(String),
    /// A weights file could not be read or written.
    #[error("weights file {path}: {reason}")]
    Weights { path: PathBuf, reason: String },
}

impl ModelError {
    /// Whether the inputs themselves are wrong, so retrying the same work cannot succeed.
    pub fn is_bad_input(&self) -> bool {
        matches!(self, ModelError::Input(_))
    }
}

/// Result alias for the model module.
pub type Result<T> = std::result::Result<T, ModelError>;
