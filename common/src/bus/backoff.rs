//! Riding out a broker outage: which bus errors are worth retrying, and how
//! long to wait between tries.
//!
//! async-nats reconnects by itself; until it has, every operation fails with a
//! timeout or a JetStream error. A role that treats those as fatal dies with
//! the broker, so the role loops retry them with a capped exponential backoff
//! (100 ms, 200 ms, ... 5 s) and count each outage in
//! `caprl_bus_outages_total`.

use std::time::Duration;

use super::{BusError, Retry};
use crate::shutdown::Shutdown;

const FIRST: Duration = Duration::from_millis(100);
const CAP: Duration = Duration::from_secs(5);

impl BusError {
    /// Whether the operation may succeed if tried again later: the broker is
    /// down, restarting or overloaded. Configuration, auth, size and checksum
    /// errors are not, nor a request JetStream refused on its merits.
    pub fn is_transient(&self) -> bool {
        match self {
            BusError::JetStream { retry, .. } => *retry == Retry::CanHelp,
            BusError::Timeout { .. }
            | BusError::Connect { .. }
            | BusError::ConnectTimeout { .. } => true,
            _ => false,
        }
    }
}

/// Capped exponential backoff between retries of a failing bus operation.
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
    failures: u64,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            next: FIRST,
            failures: 0,
        }
    }
}

impl Backoff {
    /// The wait before the next try; doubles up to 5 s. The first failure
    /// after a success starts a new outage and counts it.
    pub fn next_delay(&mut self) -> Duration {
        if self.failures == 0 {
            crate::telemetry::metrics::count_bus_outage();
        }
        self.failures += 1;
        let d = self.next;
        self.next = (self.next * 2).min(CAP);
        d
    }

    /// Failures since the last success.
    pub fn failures(&self) -> u64 {
        self.failures
    }

    /// Waits out a broker outage for role `who` (e.g. "actor a1"): logs the
    /// outage once, then [`Backoff::wait`]s.
    pub async fn ride_out(&mut self, who: &str, e: &BusError, shutdown: &mut Shutdown) {
        if self.failures == 0 {
            tracing::warn!("{who}: broker unavailable ({e}); retrying with backoff");
        }
        self.wait(shutdown).await;
    }

    /// Sleeps the next delay, or until `shutdown` is requested.
    pub async fn wait(&mut self, shutdown: &mut Shutdown) {
        let delay = self.next_delay();
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = shutdown.recv() => {}
        }
    }

    /// An operation succeeded: the next failure starts from 100 ms again.
    pub fn reset(&mut self) {
        self.next = FIRST;
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_and_resets() {
        let mut b = Backoff::default();
        let waits: Vec<u64> = (0..8).map(|_| b.next_delay().as_millis() as u64).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        assert_eq!(b.failures(), 8);
        b.reset();
        assert_eq!(b.next_delay(), FIRST);
    }

    #[test]
    fn only_broker_trouble_is_transient() {
        assert!(BusError::Timeout {
            op: "pull",
            after: Duration::from_secs(1)
        }
        .is_transient());
        assert!(BusError::js("publish", async_nats::Error::from("no responders")).is_transient());
        assert!(!BusError::TooLarge { bytes: 2, max: 1 }.is_transient());
        assert!(!BusError::SnapshotMissing { version: 3 }.is_transient());
    }
}
