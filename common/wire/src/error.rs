//! Why a message could not be encoded or decoded.

use super::envelope::MessageKind;

/// Every way bytes can fail to be a message. Decoding returns one of these,
/// never panics; the caller logs it, counts it, and does not ack the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("bad magic: not a caprl message (expected the bytes \"CPRL\")")]
    BadMagic,
    #[error("unknown schema version {found}; this build speaks version {supported}")]
    UnknownVersion { found: u16, supported: u16 },
    #[error("unknown message kind byte {0}")]
    UnknownKind(u8),
    #[error("wrong message kind: expected {expected:?}, found {found:?}")]
    WrongKind {
        expected: MessageKind,
        found: MessageKind,
    },
    #[error("truncated message: needed {needed} bytes, got {got}")]
    Truncated { needed: usize, got: usize },
    #[error("message of {len} bytes exceeds the limit of {limit} bytes (nats.max_message_bytes)")]
    Oversize { len: usize, limit: usize },
    #[error("payload does not decode: {0}")]
    Payload(String),
    #[error("trailing bytes after the payload")]
    TrailingBytes,
}
