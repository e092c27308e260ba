//! The one codec: every message on the bus is an envelope
//!
//! ```text
//! offset  size  field
//! 0       4     magic "CPRL"
//! 4       2     schema version, big-endian (currently 3)
//! 6       1     message kind (see MessageKind)
//! 7       4     payload length in bytes, big-endian
//! 11      n     payload: bincode 2 (serde, standard config)
//! ```
//!
//! Decoding checks the header before touching the payload, refuses messages
//! over the size limit before allocating, and decodes the payload with a
//! bincode allocation limit, so hostile bytes yield a [`WireError`], never a
//! panic or a huge allocation.

use std::fmt;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::error::WireError;
use super::messages::{Heartbeat, Rollout, RolloutTask, ScoredRollout};

/// The four bytes every caprl message starts with.
pub const MAGIC: [u8; 4] = *b"CPRL";
/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: u16 = 3;
/// Bytes before the payload: magic, version, kind, length.
pub const HEADER_LEN: usize = 11;
/// Default per-message limit, the default of `nats.max_message_bytes` (8 MiB).
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 8 * 1024 * 1024;
/// No limit above this is honoured: NATS itself refuses larger payloads (64 MiB).
pub const HARD_MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;
/// The smallest per-message limit accepted (a scored rollout of a few captions needs more).
pub const MIN_MAX_MESSAGE_BYTES: usize = 1024;
/// The range of `nats.max_message_bytes` in words: what config errors and the configuration
/// reference print.
pub const MAX_MESSAGE_BYTES_ALLOWED: &str =
    "1024..=67108864 (64 MiB, the largest payload NATS accepts)";

/// `limit`, written, when it is outside [`MIN_MAX_MESSAGE_BYTES`]`..=`[`HARD_MAX_MESSAGE_BYTES`]:
/// the one range of a per-message limit, checked by the config at load and by the bus.
pub fn message_limit_violation(limit: u64) -> Option<String> {
    crate::check::outside(
        limit,
        MIN_MAX_MESSAGE_BYTES as u64..=HARD_MAX_MESSAGE_BYTES as u64,
    )
}

/// The kind byte of the envelope; one per message type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum MessageKind {
    RolloutTask = 1,
    Rollout = 2,
    ScoredRollout = 3,
    // 4 was a snapshot meta that never travelled as a message (the bus keeps its own,
    // `bus::SnapshotMeta`): retired, not reused.
    Heartbeat = 5,
}

impl MessageKind {
    /// Every kind, in byte order.
    pub const ALL: [MessageKind; 4] = [
        MessageKind::RolloutTask,
        MessageKind::Rollout,
        MessageKind::ScoredRollout,
        MessageKind::Heartbeat,
    ];

    /// The byte written in the envelope.
    pub fn byte(self) -> u8 {
        self as u8
    }
}

impl TryFrom<u8> for MessageKind {
    type Error = WireError;

    fn try_from(b: u8) -> Result<Self, Self::Error> {
        MessageKind::ALL
            .into_iter()
            .find(|k| k.byte() == b)
            .ok_or(WireError::UnknownKind(b))
    }
}

impl fmt::Display for MessageKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A type that travels in an envelope under its own kind byte.
pub trait Message: Serialize + DeserializeOwned {
    const KIND: MessageKind;
}

impl Message for RolloutTask {
    const KIND: MessageKind = MessageKind::RolloutTask;
}
impl Message for Rollout {
    const KIND: MessageKind = MessageKind::Rollout;
}
impl Message for ScoredRollout {
    const KIND: MessageKind = MessageKind::ScoredRollout;
}
impl Message for Heartbeat {
    const KIND: MessageKind = MessageKind::Heartbeat;
}

fn effective_limit(limit: usize) -> usize {
    limit.min(HARD_MAX_MESSAGE_BYTES)
}

/// Encodes `msg` into an envelope of at most `limit` bytes (capped at
/// [`HARD_MAX_MESSAGE_BYTES`]).
pub fn encode<M: Message>(msg: &M, limit: usize) -> Result<Vec<u8>, WireError> {
    let limit = effective_limit(limit);
    let payload = bincode::serde::encode_to_vec(msg, bincode::config::standard())
        .map_err(|e| WireError::Payload(e.to_string()))?;
    let len = HEADER_LEN + payload.len();
    if len > limit {
        return Err(WireError::Oversize { len, limit });
    }
    let payload_len =
        u32::try_from(payload.len()).map_err(|_| WireError::Oversize { len, limit })?;
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&SCHEMA_VERSION.to_be_bytes());
    out.push(M::KIND.byte());
    out.extend_from_slice(&payload_len.to_be_bytes());
    out.extend_from_slice(&payload);
    Ok(out)
}

/// The parsed fixed-size header.
struct Header {
    kind: MessageKind,
    payload_len: usize,
}

fn read_header(bytes: &[u8]) -> Result<Header, WireError> {
    let prefix = &bytes[..bytes.len().min(MAGIC.len())];
    if prefix != &MAGIC[..prefix.len()] {
        return Err(WireError::BadMagic);
    }
    if bytes.len() < HEADER_LEN {
        return Err(WireError::Truncated {
            needed: HEADER_LEN,
            got: bytes.len(),
        });
    }
    let version = u16::from_be_bytes([bytes[4], bytes[5]]);
    if version != SCHEMA_VERSION {
        return Err(WireError::UnknownVersion {
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    let kind = MessageKind::try_from(bytes[6])?;
    let payload_len = u32::from_be_bytes([bytes[7], bytes[8], bytes[9], bytes[10]]) as usize;
    Ok(Header { kind, payload_len })
}

/// The kind of the message in `bytes`, from its header alone (magic, version
/// and kind are checked; the payload is not).
pub fn peek_kind(bytes: &[u8]) -> Result<MessageKind, WireError> {
    read_header(bytes).map(|h| h.kind)
}

/// Decodes an envelope holding an `M`, refusing anything over `limit` bytes
/// (capped at [`HARD_MAX_MESSAGE_BYTES`]).
pub fn decode<M: Message>(bytes: &[u8], limit: usize) -> Result<M, WireError> {
    let limit = effective_limit(limit);
    let header = read_header(bytes)?;
    if header.kind != M::KIND {
        return Err(WireError::WrongKind {
            expected: M::KIND,
            found: header.kind,
        });
    }
    let len = HEADER_LEN.saturating_add(header.payload_len);
    if len > limit {
        return Err(WireError::Oversize { len, limit });
    }
    if bytes.len() < len {
        return Err(WireError::Truncated {
            needed: len,
            got: bytes.len(),
        });
    }
    if bytes.len() > len {
        return Err(WireError::TrailingBytes);
    }
    let payload = &bytes[HEADER_LEN..];
    let (msg, used) = decode_payload::<M>(payload)?;
    if used != payload.len() {
        return Err(WireError::TrailingBytes);
    }
    Ok(msg)
}

/// Decodes with a bincode allocation limit scaled to the payload.
///
/// bincode counts every primitive at its in-memory size (at most 8 bytes for
/// the types we send) however few bytes its varint took, so `8 × payload`
/// bounds what a valid payload can claim; a forged length prefix asking for
/// more is refused before anything is allocated.
fn decode_payload<M: Message>(payload: &[u8]) -> Result<(M, usize), WireError> {
    const KIB: usize = 1024;
    const MIB: usize = 1024 * KIB;
    fn with_limit<M: Message, const L: usize>(payload: &[u8]) -> Result<(M, usize), WireError> {
        let config = bincode::config::standard().with_limit::<L>();
        bincode::serde::decode_from_slice(payload, config)
            .map_err(|e| WireError::Payload(e.to_string()))
    }
    match payload.len().saturating_mul(8) {
        n if n <= 64 * KIB => with_limit::<M, { 64 * KIB }>(payload),
        n if n <= MIB => with_limit::<M, MIB>(payload),
        n if n <= 16 * MIB => with_limit::<M, { 16 * MIB }>(payload),
        n if n <= 128 * MIB => with_limit::<M, { 128 * MIB }>(payload),
        _ => with_limit::<M, { 8 * HARD_MAX_MESSAGE_BYTES }>(payload),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_limit_range_is_the_one_its_words_state() {
        let (lo, hi) = (MIN_MAX_MESSAGE_BYTES, HARD_MAX_MESSAGE_BYTES);
        assert!(MAX_MESSAGE_BYTES_ALLOWED.starts_with(&format!("{lo}..={hi} ")));
        assert_eq!(message_limit_violation(lo as u64), None);
        assert_eq!(message_limit_violation(hi as u64), None);
        assert_eq!(message_limit_violation(lo as u64 - 1), Some("1023".into()));
        assert!(message_limit_violation(hi as u64 + 1).is_some());
        assert!((lo..=hi).contains(&DEFAULT_MAX_MESSAGE_BYTES));
    }
}
