//! The one error type of the data layer. Every message names the file it is about and says
//! what to change.

use std::path::{Path, PathBuf};

/// Why a data set, vocabulary or feature file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("{path}:{line}:{column}: malformed JSON: {message}")]
    Json {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },

    #[error("{path}:{line}: malformed CSV: {message}")]
    Csv {
        path: PathBuf,
        line: u64,
        message: String,
    },

    /// The file parses but does not hold what the format asks for.
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },

    #[error("{path}: the {split} split has no images; a data set needs images in train, val and test (Karpathy `restval` counts as train)")]
    EmptySplit { path: PathBuf, split: String },

    #[error(
        "{path}: image {id} has no captions; give it at least one non-empty caption or remove it"
    )]
    NoCaptions { path: PathBuf, id: String },

    #[error("{path}: {missing} captioned image(s) have no feature row, e.g. {examples}; add their features or remove their captions")]
    MissingFeatures {
        path: PathBuf,
        missing: usize,
        examples: String,
    },

    #[error("{path}: {message}")]
    FeatureShape { path: PathBuf, message: String },

    #[error("{path}: tensor `{tensor}` row {row} (image {id}) contains NaN or infinity; recompute the features of that image")]
    NonFinite {
        path: PathBuf,
        tensor: String,
        row: usize,
        id: String,
    },

    #[error("{path}: unreadable safetensors file ({message}); the file is truncated or not safetensors, write it again")]
    Safetensors { path: PathBuf, message: String },

    #[error("{path}: unreadable .npy/.npz ({message})")]
    Npy { path: PathBuf, message: String },

    #[error("{path}: vocabulary hash {found} does not match the expected {expected}; the model was trained with another vocabulary: use that data set's vocab.json or retrain")]
    VocabHash {
        path: PathBuf,
        expected: String,
        found: String,
    },

    #[error("{path}: feature row {row} requested but the store has {rows} rows")]
    RowOutOfRange {
        path: PathBuf,
        row: usize,
        rows: usize,
    },

    /// An audio file that cannot be decoded or an audio setting that cannot be used.
    #[error("{path}: {message}")]
    Audio { path: PathBuf, message: String },

    #[error(
        "{path}: already exists and is not empty; choose another output directory or remove it"
    )]
    OutputExists { path: PathBuf },
}

impl DataError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        DataError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    pub(crate) fn json(path: &Path, err: &serde_json::Error) -> Self {
        DataError::Json {
            path: path.to_path_buf(),
            line: err.line(),
            column: err.column(),
            message: err.to_string(),
        }
    }

    pub(crate) fn invalid(path: &Path, message: impl Into<String>) -> Self {
        DataError::Invalid {
            path: path.to_path_buf(),
            message: message.into(),
        }
    }

    pub(crate) fn shape(path: &Path, message: impl Into<String>) -> Self {
        DataError::FeatureShape {
            path: path.to_path_buf(),
            message: message.into(),
        }
    }

    pub(crate) fn npy(path: &Path, message: impl Into<String>) -> Self {
        DataError::Npy {
            path: path.to_path_buf(),
            message: message.into(),
        }
    }
}

/// The first few items of a list, for error messages ("1, 2, 3 and 7 more").
pub(crate) fn examples(items: &[String], shown: usize) -> String {
    let head = items
        .iter()
        .take(shown)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > shown {
        format!("{head} and {} more", items.len() - shown)
    } else {
        head
    }
}
