//! What the bus reads of the run config, and its rules: `[nats]` (how a role reaches the
//! server) and the bus's own settings ([`BusOptions`]: `[runtime]`'s `run_id`, `ack_wait_secs`
//! and `snapshot_dir`, `[nats]`'s message limit and replicas). Loading a config and connecting
//! run the same rules ([`NatsConfig::CHECKS`], [`BusOptions::CHECKS`]).

use std::path::PathBuf;
use std::time::Duration;

use caprl_wire::check::{first_violation, outside, Check, Violation};
use serde::{Deserialize, Serialize};

use super::{BusError, BusResult, Queue};
use crate::config::{Dtype, RuntimeConfig};

/// Upper bound of every `*_secs` option.
pub const MAX_SECS: u64 = 7 * 24 * 3600;
/// [`MAX_SECS`] as the config checks print it.
pub const MAX_SECS_ALLOWED: &str = "1..=604800 (seconds: up to a week)";
const _: () = assert!(MAX_SECS == 604_800, "MAX_SECS_ALLOWED names 604800");

const RUN_ID_ALLOWED: &str =
    "a non-empty name of [a-z0-9-] (it becomes part of NATS subjects and bucket names)";

fn run_id_violation(id: &str) -> Option<String> {
    let ok = !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    (!ok).then(|| format!("{id:?}"))
}

/// Whether a `[nats]` string is set (empty or blank means not).
pub(super) fn set(value: &str) -> bool {
    !value.trim().is_empty()
}

/// A directory setting: "" means none.
fn dir_if_set(dir: &str) -> Option<PathBuf> {
    (!dir.is_empty()).then(|| PathBuf::from(dir))
}

fn non_empty_or_env(value: &str, var: &str) -> Option<String> {
    if !value.is_empty() {
        return Some(value.to_string());
    }
    std::env::var(var).ok().filter(|v| !v.is_empty())
}

/// A broken rule as the bus reports it.
impl From<Violation> for BusError {
    fn from(v: Violation) -> BusError {
        BusError::Config {
            key: v.key,
            problem: format!("{} is not allowed; expected {}", v.value, v.allowed),
        }
    }
}

/// Bus settings of a run, filled from the `[runtime]` and `[nats]` config sections.
#[derive(Debug, Clone, PartialEq)]
pub struct BusOptions {
    /// Namespaces every subject and bucket: `[a-z0-9-]+`.
    pub run_id: String,
    /// Seconds a delivery may stay un-acked before it is delivered again, >= 1.
    pub ack_wait_secs: u64,
    /// Largest accepted message payload in bytes.
    pub max_message_bytes: usize,
    /// Deadline for a single broker request (publish, ack, info, KV) in seconds, >= 1.
    pub request_timeout_secs: u64,
    /// Deadline for storing or fetching a whole snapshot in seconds, >= 1.
    pub snapshot_timeout_secs: u64,
    /// JetStream replicas of streams and buckets (1 on a single server).
    pub replicas: usize,
    /// Where the learner writes policy snapshots as files (`runtime.snapshot_dir`); `None`: the
    /// run's object store. Readers follow the description's `file`, whatever theirs says.
    pub snapshot_dir: Option<PathBuf>,
    /// How the object store keeps the learner's versions: whole or as deltas.
    pub snapshot_deltas: SnapshotDeltas,
    /// Whether snapshot files (`snapshot_dir`) are kept as the object store keeps versions, in
    /// chains of deltas (`runtime.snapshot_file_deltas`), instead of whole.
    pub snapshot_file_deltas: bool,
    /// A directory this host's readers share the versions they fetch from the object store in
    /// (`runtime.snapshot_cache_dir`): one fetch per version per host. `None`: each reader
    /// fetches its own.
    pub snapshot_cache_dir: Option<PathBuf>,
}

/// How the object store keeps policy versions: whole every `full_every` published versions,
/// as deltas of values `width` bytes wide in between (`runtime.snapshot_full_every`, the width
/// of `runtime.snapshot_dtype`); `full_every = 1` stores every version whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotDeltas {
    pub full_every: u64,
    pub width: usize,
}

impl SnapshotDeltas {
    /// Every version whole.
    pub const OFF: SnapshotDeltas = SnapshotDeltas {
        full_every: 1,
        width: 4,
    };
}

impl Default for BusOptions {
    fn default() -> Self {
        BusOptions {
            run_id: "default".to_string(),
            ack_wait_secs: 30,
            max_message_bytes: caprl_wire::DEFAULT_MAX_MESSAGE_BYTES,
            request_timeout_secs: 10,
            snapshot_timeout_secs: 300,
            replicas: 1,
            snapshot_dir: None,
            snapshot_deltas: SnapshotDeltas::OFF,
            snapshot_file_deltas: false,
            snapshot_cache_dir: None,
        }
    }
}

impl BusOptions {
    /// Options for run `run_id` with defaults elsewhere.
    pub fn for_run(run_id: &str) -> BusOptions {
        BusOptions {
            run_id: run_id.to_string(),
            ..BusOptions::default()
        }
    }

    /// The run's bus settings: `[runtime]`'s `run_id`, `ack_wait_secs`, `snapshot_dir`,
    /// `snapshot_file_deltas`, `snapshot_cache_dir`, `snapshot_full_every` and
    /// `snapshot_dtype`'s width, and
    /// `[nats]`'s `max_message_bytes` and `replicas`.
    pub fn of(runtime: &RuntimeConfig, nats: &NatsConfig) -> BusOptions {
        BusOptions {
            run_id: runtime.run_id.clone(),
            ack_wait_secs: runtime.ack_wait_secs,
            max_message_bytes: usize::try_from(nats.max_message_bytes).unwrap_or(usize::MAX),
            replicas: usize::try_from(nats.replicas).unwrap_or(usize::MAX),
            snapshot_dir: dir_if_set(&runtime.snapshot_dir),
            snapshot_file_deltas: runtime.snapshot_file_deltas,
            snapshot_cache_dir: dir_if_set(&runtime.snapshot_cache_dir),
            snapshot_deltas: SnapshotDeltas {
                full_every: runtime.snapshot_full_every,
                width: if runtime.snapshot_dtype == Dtype::F32 {
                    4
                } else {
                    2
                },
            },
            ..BusOptions::default()
        }
    }

    #[rustfmt::skip]
    pub const CHECKS: &[Check<BusOptions>] = &[
        Check { key: "runtime.run_id", allowed: RUN_ID_ALLOWED, violation: |o| run_id_violation(&o.run_id) },
        Check { key: "runtime.ack_wait_secs", allowed: MAX_SECS_ALLOWED, violation: |o| outside(o.ack_wait_secs, 1..=MAX_SECS) },
        Check { key: "bus.request_timeout_secs", allowed: MAX_SECS_ALLOWED, violation: |o| outside(o.request_timeout_secs, 1..=MAX_SECS) },
        Check { key: "bus.snapshot_timeout_secs", allowed: MAX_SECS_ALLOWED, violation: |o| outside(o.snapshot_timeout_secs, 1..=MAX_SECS) },
        Check { key: "nats.max_message_bytes", allowed: caprl_wire::MAX_MESSAGE_BYTES_ALLOWED, violation: |o| caprl_wire::message_limit_violation(o.max_message_bytes as u64) },
        Check { key: "runtime.snapshot_full_every", allowed: "1..=1000", violation: |o| outside(o.snapshot_deltas.full_every, 1..=1000) },
        Check { key: "nats.replicas", allowed: "1..=5 (1 on a single server, 3 on a 3-node JetStream cluster)", violation: |o| outside(o.replicas, 1..=5) },
    ];

    /// Checks every field ([`BusOptions::CHECKS`]); called by both implementations before use.
    pub fn validate(&self) -> BusResult<()> {
        first_violation(Self::CHECKS, self).map_or(Ok(()), |v| Err(v.into()))
    }

    pub(crate) fn ack_wait(&self) -> Duration {
        Duration::from_secs(self.ack_wait_secs)
    }

    pub(crate) fn request_timeout(&self) -> Duration {
        Duration::from_secs(self.request_timeout_secs)
    }

    pub(crate) fn snapshot_timeout(&self) -> Duration {
        Duration::from_secs(self.snapshot_timeout_secs)
    }

    /// Subject of `queue`: `caprl.<run>.<queue>`.
    pub fn subject(&self, queue: Queue) -> String {
        format!("caprl.{}.{}", self.run_id, queue.name())
    }

    /// JetStream stream name of `queue`: `caprl-<run>-<queue>`.
    pub fn stream_name(&self, queue: Queue) -> String {
        format!("caprl-{}-{}", self.run_id, queue.name())
    }

    /// KV bucket for `latest` and heartbeats: `caprl-<run>-control`.
    pub fn control_bucket(&self) -> String {
        format!("caprl-{}-control", self.run_id)
    }

    /// Object store bucket for snapshots: `caprl-<run>-snapshots`.
    pub fn snapshot_bucket(&self) -> String {
        format!("caprl-{}-snapshots", self.run_id)
    }
}

/// `[nats]`: connection, credentials and TLS. Empty strings mean "not set".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NatsConfig {
    pub url: String,
    pub user: String,
    /// Falls back to env `CAPRL_NATS_PASSWORD`; see [`NatsConfig::resolved_password`].
    pub password: String,
    /// Falls back to env `CAPRL_NATS_TOKEN`; see [`NatsConfig::resolved_token`].
    pub token: String,
    pub nkey_seed: String,
    pub creds_file: String,
    pub tls_ca: String,
    pub tls_cert: String,
    pub tls_key: String,
    /// Largest encoded message accepted or produced; its range is the wire's
    /// (`caprl_wire::MAX_MESSAGE_BYTES_ALLOWED`).
    pub max_message_bytes: u64,
    /// >= 1.
    pub connect_timeout_secs: u64,
    /// JetStream replicas of the run's streams, KV and object store: 1 on a single server, 3
    /// on a 3-node JetStream cluster (survives losing one node); 1..=5.
    pub replicas: u32,
}

impl Default for NatsConfig {
    fn default() -> Self {
        NatsConfig {
            url: "nats://127.0.0.1:4222".to_string(),
            user: String::new(),
            password: String::new(),
            token: String::new(),
            nkey_seed: String::new(),
            creds_file: String::new(),
            tls_ca: String::new(),
            tls_cert: String::new(),
            tls_key: String::new(),
            max_message_bytes: caprl_wire::DEFAULT_MAX_MESSAGE_BYTES as u64,
            connect_timeout_secs: 5,
            replicas: 1,
        }
    }
}

impl NatsConfig {
    #[rustfmt::skip]
    pub const CHECKS: &[Check<NatsConfig>] = &[
        Check { key: "nats.url", allowed: "a non-empty server URL, e.g. nats://127.0.0.1:4222", violation: |c| c.url.is_empty().then(|| "\"\"".into()) },
        Check { key: "nats.connect_timeout_secs", allowed: MAX_SECS_ALLOWED, violation: |c| outside(c.connect_timeout_secs, 1..=MAX_SECS) },
        Check {
            key: "nats",
            allowed: "at most one of user/password, token, nkey_seed and creds_file",
            violation: |c| {
                let methods = [set(&c.user) || set(&c.password), set(&c.token), set(&c.nkey_seed), set(&c.creds_file)];
                (methods.iter().filter(|m| **m).count() > 1).then(|| "more than one way to authenticate".to_string())
            },
        },
        Check {
            key: "nats.user",
            allowed: "set whenever nats.password is (a password authenticates a user)",
            violation: |c| (set(&c.password) && !set(&c.user)).then(|| "\"\"".into()),
        },
        Check {
            key: "nats.tls_key",
            allowed: "set together with nats.tls_cert (client TLS needs both)",
            violation: |c| (set(&c.tls_cert) != set(&c.tls_key)).then(|| format!("{:?}", c.tls_key)),
        },
    ];

    /// The settings a role connects with: `url` (`--nats-url`) instead of `url` when given,
    /// the password and token resolved ([`NatsConfig::resolved_password`],
    /// [`NatsConfig::resolved_token`]).
    pub fn resolved(&self, url: Option<&str>) -> NatsConfig {
        NatsConfig {
            url: url.map_or_else(|| self.url.clone(), str::to_string),
            password: self.resolved_password().unwrap_or_default(),
            token: self.resolved_token().unwrap_or_default(),
            ..self.clone()
        }
    }

    /// `password`, or env `CAPRL_NATS_PASSWORD` when the key is empty.
    pub fn resolved_password(&self) -> Option<String> {
        non_empty_or_env(&self.password, "CAPRL_NATS_PASSWORD")
    }

    /// `token`, or env `CAPRL_NATS_TOKEN` when the key is empty.
    pub fn resolved_token(&self) -> Option<String> {
        non_empty_or_env(&self.token, "CAPRL_NATS_TOKEN")
    }

    /// The defaults with server `url` (tests, benchmarks and `--nats-url`).
    pub fn to_url(url: &str) -> NatsConfig {
        NatsConfig {
            url: url.to_string(),
            ..NatsConfig::default()
        }
    }
}
