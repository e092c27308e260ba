//! The one error type of the bus: every message says what went wrong and what to check.

use std::path::PathBuf;
use std::time::Duration;

use super::{BusResult, Checksum, Retry};

/// Everything a bus operation, a connect or the local server can fail with.
#[derive(Debug, thiserror::Error)]
pub enum BusError {
    /// A bus option or `[nats]` key has a value the bus cannot use.
    #[error("invalid bus option `{key}`: {problem}")]
    Config { key: &'static str, problem: String },

    /// The server at `url` refused the credentials.
    #[error(
        "NATS server {url} rejected the credentials ({detail}): check [nats] user/password, \
         token, nkey_seed or creds_file"
    )]
    AuthRejected { url: String, detail: String },

    /// Signing the server's nonce failed (bad nkey seed or creds file content).
    #[error("could not authenticate to NATS server {url} ({detail}): check [nats] nkey_seed or creds_file")]
    AuthSetup { url: String, detail: String },

    /// No connection within `[nats] connect_timeout_secs`.
    #[error("connecting to NATS server {url} timed out after {secs} s: is it running and reachable? (see [nats] url, connect_timeout_secs)")]
    ConnectTimeout { url: String, secs: u64 },

    /// TLS could not be set up (files) or the handshake failed.
    #[error("TLS to NATS server {url} failed ({detail}): check [nats] tls_ca, tls_cert, tls_key")]
    Tls { url: String, detail: String },

    /// Any other connect failure (refused, DNS, bad URL).
    #[error("cannot connect to NATS server {url} ({detail}): check [nats] url and that nats-server runs with -js")]
    Connect { url: String, detail: String },

    /// A credentials file could not be read.
    #[error("cannot read NATS credentials file {path}: {source} (see [nats] creds_file)")]
    CredsFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A read-only query for a run that nobody has created on this server.
    #[error(
        "no run `{run_id}` on NATS server {url}: no learner has created its streams (check \
         --run / runtime.run_id and --nats-url; roles waiting for a learner create nothing)"
    )]
    NoSuchRun { run_id: String, url: String },

    /// An operation did not finish in time (broker down or overloaded).
    #[error("bus operation `{op}` did not finish within {after:?}: is the NATS server up?")]
    Timeout { op: &'static str, after: Duration },

    /// JetStream answered with an error, or the request failed; `retry` says whether
    /// trying again can help (see `nats_retry.rs`).
    #[error("bus operation `{op}` failed{}: {source}", retry.note())]
    JetStream {
        op: &'static str,
        retry: Retry,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// A payload larger than the configured or server limit.
    #[error("message of {bytes} bytes exceeds the limit of {max} bytes ([nats] max_message_bytes or the server's max_payload)")]
    TooLarge { bytes: usize, max: usize },

    /// A KV key with characters NATS does not allow.
    #[error(
        "invalid KV key {key:?}: use 1..=256 of [A-Za-z0-9_=./-], not starting or ending with '.'"
    )]
    InvalidKey { key: String },

    /// A KV key the bus keeps for itself.
    #[error(
        "KV key {key:?} is reserved for the bus (the latest snapshot record); pick another key"
    )]
    ReservedKey { key: String },

    /// Snapshot bytes do not match their advertised checksum.
    #[error("snapshot v{version} is corrupt: {actual}, expected {expected} ({bytes} bytes read)")]
    ChecksumMismatch {
        version: u64,
        expected: Checksum,
        actual: Checksum,
        bytes: usize,
    },

    /// A snapshot version's delta that could not be made or applied.
    #[error("snapshot v{version}: {source}")]
    Delta {
        version: u64,
        #[source]
        source: crate::snapshot_delta::DeltaError,
    },

    /// No snapshot object for this version (deleted or never written).
    #[error("snapshot v{version} is not in the snapshot store (deleted, or never published)")]
    SnapshotMissing { version: u64 },

    /// A snapshot file under `runtime.snapshot_dir` that could not be written, read or removed.
    #[error(
        "cannot {action} policy snapshot file {}: {source}; runtime.snapshot_dir must be a \
         directory every role can reach (the learner's host, or a volume all of them mount), or \
         empty to send snapshots through NATS's object store",
        path.display()
    )]
    SnapshotFile {
        path: PathBuf,
        action: &'static str,
        #[source]
        source: std::io::Error,
    },

    /// A snapshot description that does not serialise (a fault of this build, not the broker's).
    #[error("cannot encode the description of snapshot v{version}: {source}")]
    EncodeMeta {
        version: u64,
        #[source]
        source: serde_json::Error,
    },

    /// A stored `latest` record that is not a snapshot description.
    #[error("KV key `latest` holds an unreadable snapshot record: {detail}")]
    BadLatest { detail: String },

    /// `nats-server` is not installed.
    #[error("`{binary}` not found: install NATS server (`apt-get install -y nats-server`) or set its path")]
    ServerMissing { binary: String },

    /// The local server could not be started.
    #[error("could not start `{binary}`: {detail}")]
    ServerStart { binary: String, detail: String },

    /// The local server did not accept connections in time, or exited.
    #[error("nats-server on port {port} not ready after {waited:?}: {detail}")]
    ServerNotReady {
        port: u16,
        waited: Duration,
        detail: String,
    },
}

/// `work`, or [`BusError::Timeout`] naming `op` when it takes longer than `after`.
pub(super) async fn deadline<T>(
    op: &'static str,
    after: Duration,
    work: impl std::future::Future<Output = T>,
) -> BusResult<T> {
    tokio::time::timeout(after, work)
        .await
        .map_err(|_| BusError::Timeout { op, after })
}
