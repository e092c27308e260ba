//! Which failures of an async-nats call a retry can help, read from the error's kind.
//!
//! A broker that is down, restarting or electing a stream leader fails every call with a
//! time-out, a lost connection, "no responders" or a JetStream "temporarily unavailable":
//! those pass, so the roles wait them out. A request the server refuses on its merits (a
//! sealed stream, an invalid name, a payload over a limit, a bad configuration) fails the
//! same way on every try, so it is reported at once instead of being retried for ever.

use std::error::Error as StdError;
use std::fmt::{Debug, Display};

use async_nats::jetstream::{self, ErrorCode};

use super::BusError;

/// Whether trying a failed bus operation again can help.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// The broker was unreachable, restarting or overloaded: a later try may succeed.
    CanHelp,
    /// The server refused the request itself: every try fails the same way.
    Futile,
}

impl Retry {
    /// What an error message adds: nothing when a retry may help (the roles retry), and why
    /// not when it cannot.
    pub(super) fn note(self) -> &'static str {
        match self {
            Retry::CanHelp => "",
            Retry::Futile => " for good (the server refused the request; retrying cannot help)",
        }
    }

    fn when(can_help: bool) -> Retry {
        if can_help {
            Retry::CanHelp
        } else {
            Retry::Futile
        }
    }
}

/// An async-nats failure that can tell whether a retry may help.
pub(crate) trait NatsFailure: Into<Box<dyn StdError + Send + Sync>> {
    fn retry(&self) -> Retry;
}

impl BusError {
    /// The failure of bus operation `op`, keeping async-nats's error as the source.
    pub(crate) fn js(op: &'static str, err: impl NatsFailure) -> Self {
        BusError::JetStream {
            op,
            retry: err.retry(),
            source: err.into(),
        }
    }
}

impl<K: RetryKind + Clone + Debug + Display + PartialEq + Send + Sync + 'static> NatsFailure
    for async_nats::error::Error<K>
{
    fn retry(&self) -> Retry {
        Retry::when(self.kind().retry_can_help() && sources_allow_retry(self))
    }
}

/// The untyped errors async-nats returns from acks and pulled batches.
impl NatsFailure for async_nats::Error {
    fn retry(&self) -> Retry {
        Retry::when(sources_allow_retry(self.as_ref()))
    }
}

impl NatsFailure for std::io::Error {
    fn retry(&self) -> Retry {
        use std::io::ErrorKind;
        Retry::when(!matches!(
            self.kind(),
            ErrorKind::InvalidData | ErrorKind::InvalidInput
        ))
    }
}

/// Walks `err` and its sources: a JetStream API error answers by its code, a JSON error (a
/// reply that does not parse) never passes; anything else (I/O, time-outs) may.
fn sources_allow_retry(err: &(dyn StdError + 'static)) -> bool {
    let mut next = Some(err);
    while let Some(e) = next {
        if let Some(api) = e.downcast_ref::<jetstream::Error>() {
            return api_retry_can_help(api);
        }
        if e.is::<serde_json::Error>() {
            return false;
        }
        next = e.source();
    }
    true
}

/// A JetStream API error passes when the server or cluster was unavailable (503, no
/// leader, no quorum, a stream still being placed); every other code refuses the request.
fn api_retry_can_help(err: &jetstream::Error) -> bool {
    const PASSING: [ErrorCode; 9] = [
        ErrorCode::CLUSTER_NOT_AVAILABLE,
        ErrorCode::CLUSTER_NOT_ACTIVE,
        ErrorCode::CLUSTER_NOT_LEADER,
        ErrorCode::CLUSTER_INCOMPLETE,
        ErrorCode::CLUSTER_NO_PEERS,
        ErrorCode::CLUSTER_NOT_ASSIGNED,
        ErrorCode::RAFT_GENERAL,
        ErrorCode::STREAM_ASSIGNMENT,
        ErrorCode::JETSTREAM_NOT_ENABLED,
    ];
    matches!(err.code(), 408 | 503) || PASSING.contains(&err.error_code())
}

/// The kind enum of an `async_nats::error::Error<Kind>`.
pub(crate) trait RetryKind {
    fn retry_can_help(&self) -> bool;
}

/// `Kind { futile: [variants a retry cannot help], api: [variants that carry a JetStream
/// API error] }`; every other variant (time-outs, lost requests, "other") may pass.
macro_rules! retry_by_kind {
    ($($kind:ty { futile: [$($futile:ident),*], api: [$($api:ident),*] })*) => {$(
        impl RetryKind for $kind {
            fn retry_can_help(&self) -> bool {
                #[allow(dead_code)]
                type K = $kind;
                #[allow(unreachable_patterns)]
                match self {
                    $(K::$futile => false,)*
                    $(K::$api(e) => api_retry_can_help(e),)*
                    _ => true,
                }
            }
        }
    )*};
}

use async_nats::jetstream::{consumer::pull, context, kv, object_store, stream};

retry_by_kind! {
    context::PublishErrorKind {
        futile: [WrongLastMessageId, WrongLastSequence, MaxPayloadExceeded], api: []
    }
    context::ConsumerInfoErrorKind { futile: [InvalidName], api: [JetStream] }
    context::CreateStreamErrorKind {
        futile: [EmptyStreamName, InvalidStreamName, DomainAndExternalSet], api: [JetStream]
    }
    context::GetStreamErrorKind { futile: [EmptyName, InvalidStreamName], api: [JetStream] }
    context::KeyValueErrorKind { futile: [InvalidStoreName], api: [] }
    context::CreateKeyValueErrorKind {
        futile: [InvalidStoreName, TooLongHistory, LimitMarkersNotSupported], api: []
    }
    context::ObjectStoreErrorKind { futile: [InvalidBucketName], api: [] }
    context::RequestErrorKind { futile: [InvalidSubject], api: [] }
    stream::PurgeErrorKind { futile: [], api: [JetStream] }
    stream::ConsumerErrorKind { futile: [InvalidConsumerType, InvalidName], api: [JetStream] }
    stream::ConsumerUpdateErrorKind {
        futile: [InvalidConsumerType, InvalidName, DoesNotExist], api: [JetStream]
    }
    pull::BatchErrorKind { futile: [Serialize], api: [] }
    kv::PutErrorKind { futile: [InvalidKey], api: [] }
    kv::EntryErrorKind { futile: [InvalidKey], api: [] }
    kv::UpdateErrorKind { futile: [InvalidKey, WrongLastRevision], api: [] }
    kv::WatchErrorKind { futile: [InvalidKey], api: [] }
    kv::WatcherErrorKind { futile: [], api: [] }
    object_store::PutErrorKind { futile: [InvalidName], api: [] }
    object_store::GetErrorKind { futile: [InvalidName], api: [] }
    object_store::DeleteErrorKind { futile: [InvalidName], api: [] }
    async_nats::client::FlushErrorKind { futile: [], api: [] }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: usize, err_code: u64) -> jetstream::Error {
        serde_json::from_value(serde_json::json!({
            "code": code, "err_code": err_code, "description": "test"
        }))
        .unwrap()
    }

    #[test]
    fn only_an_unavailable_server_or_cluster_passes() {
        assert!(
            api_retry_can_help(&api(503, 10008)),
            "cluster not available"
        );
        assert!(api_retry_can_help(&api(500, 10009)), "no leader");
        assert!(
            !api_retry_can_help(&api(400, 10052)),
            "invalid stream config"
        );
        assert!(!api_retry_can_help(&api(400, 10109)), "sealed stream");
    }

    #[test]
    fn a_kind_names_what_a_retry_cannot_help() {
        use context::PublishErrorKind as P;
        let publish = |k| BusError::js("publish", context::PublishError::new(k));
        assert!(publish(P::TimedOut).is_transient());
        assert!(
            publish(P::StreamNotFound).is_transient(),
            "no responders mid-restart"
        );
        assert!(!publish(P::MaxPayloadExceeded).is_transient());
        let json = serde_json::from_slice::<u8>(b"{").unwrap_err();
        let unparsed = context::PublishError::with_source(P::Other, json);
        assert!(!BusError::js("publish", unparsed).is_transient());
        let refused = context::PublishError::with_source(P::Other, api(400, 10109));
        assert!(!BusError::js("publish", refused).is_transient());
    }
}
