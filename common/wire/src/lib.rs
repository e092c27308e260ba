//! caprl-wire: the message types every role exchanges and the one versioned codec, plus
//! [`check`], the rules a config section's owner writes once.
//!
//! - `ids`: `TaskId`, `PolicyVersion`, `DataFingerprint`.
//! - `messages`: what actors, reward workers and the learner send, and the [`Sampling`]
//!   parameters a task carries.
//! - `envelope`: `encode` / `decode` / `peek_kind` with magic, schema
//!   version, kind byte and size limit; errors are [`WireError`].
//!
//! The size limit passed to `encode`/`decode` is normally
//! `config.nats.max_message_bytes`.

pub mod check;
mod envelope;
mod error;
mod ids;
mod messages;

pub use envelope::{
    decode, encode, message_limit_violation, peek_kind, Message, MessageKind,
    DEFAULT_MAX_MESSAGE_BYTES, HARD_MAX_MESSAGE_BYTES, HEADER_LEN, MAGIC,
    MAX_MESSAGE_BYTES_ALLOWED, MIN_MAX_MESSAGE_BYTES, SCHEMA_VERSION,
};
pub use error::WireError;
pub use ids::{DataFingerprint, PolicyVersion, TaskId};
pub use messages::{
    DecodeKind, Heartbeat, RewardVector, Rollout, RolloutTask, Sampling, ScoredRollout, Sequence,
};
