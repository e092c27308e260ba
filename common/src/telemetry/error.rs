//! The one error type of the telemetry module; every message says what to fix.

use std::net::SocketAddr;
use std::path::PathBuf;

/// What can go wrong while exporting metrics, writing or reading a run log,
/// or drawing a report.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// A file or directory operation failed.
    #[error("could not {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// `RunLog::create` found a run log already there.
    #[error(
        "{path} already exists; to resume a run open it with RunLog::open_append \
         (e.g. `caprl train --resume`), otherwise choose a new run_dir"
    )]
    RunLogExists { path: PathBuf },
    /// `RunLog::open_append` or `read_run_log` found no run log.
    #[error("{path} does not exist; start a run with RunLog::create first")]
    RunLogMissing { path: PathBuf },
    /// A report was asked for a directory that holds no run log.
    #[error(
        "{dir} has no run.jsonl; pass a run directory written by `caprl train` or `caprl run` \
         (the `run_dir` of its config)"
    )]
    NotARunDir { dir: PathBuf },
    /// The config handed to `RunLog::create` is not valid TOML.
    #[error(
        "the run config is not valid TOML, so it cannot be recorded in the run log header: {0}"
    )]
    ConfigNotToml(#[from] toml::de::Error),
    /// The header value handed to `RunLog::create` is not a JSON object.
    #[error("the run log header must be a JSON object (or null), got: {got}")]
    HeaderNotObject { got: String },
    /// A line in the middle of a run log does not parse.
    #[error("{path}:{line}: {reason}; the run log is corrupt at this line (only a truncated last line is tolerated)")]
    MalformedLine {
        path: PathBuf,
        line: usize,
        reason: String,
    },
    /// A run log does not start with a header line.
    #[error(
        "{path}:1: expected the header line `{{\"type\":\"header\", ...}}` first, found {found}"
    )]
    MissingHeader { path: PathBuf, found: String },
    /// A record could not be encoded as JSON.
    #[error("could not encode a run log record as JSON: {0}")]
    Encode(#[from] serde_json::Error),
    /// The metrics HTTP listener could not bind.
    #[error(
        "could not listen for metrics on {addr}: {source}; pick a free port with --metrics-addr"
    )]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// The Prometheus recorder could not be built or installed.
    #[error("could not install the Prometheus metrics recorder: {0}")]
    Recorder(String),
    /// A plot could not be drawn.
    #[error("could not draw the plot `{plot}`: {reason}")]
    Plot { plot: String, reason: String },
    /// The report's smoothing weight is outside [0, 1).
    #[error(
        "smoothing must be in [0, 1) (0 = raw curves, 0.6 = TensorBoard's default), got {got}"
    )]
    BadSmoothing { got: f64 },
    /// A report was asked for no run directories.
    #[error("no run directories given; pass at least one directory written by `caprl train` or `caprl run`")]
    NoRuns,
}

impl TelemetryError {
    /// An I/O failure doing `action` on `path`.
    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            action,
            path: path.into(),
            source,
        }
    }
}

/// Result alias of the telemetry module.
pub type Result<T> = std::result::Result<T, TelemetryError>;
