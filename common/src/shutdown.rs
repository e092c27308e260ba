//! Stopping a role: one [`ShutdownTrigger`] turns every [`Shutdown`] it handed out on.
//!
//! Every loop that waits (a pull, a heartbeat, a backoff while the broker is down) takes a
//! [`Shutdown`] and selects on [`Shutdown::recv`], so a stop request ends the wait at once
//! instead of after the next timeout; none polls a bare flag.

use std::sync::Arc;

use tokio::sync::watch;

/// The side that requests the stop: a signal handler, the learner when it is done, a role that
/// failed. Cheap to clone; triggering twice is harmless.
#[derive(Debug, Clone)]
pub struct ShutdownTrigger {
    tx: Arc<watch::Sender<bool>>,
}

/// The side that watches for the stop. Cheap to clone: every task gets its own.
#[derive(Debug, Clone)]
pub struct Shutdown {
    rx: watch::Receiver<bool>,
}

impl ShutdownTrigger {
    /// A trigger and the first [`Shutdown`] it controls.
    pub fn new() -> (ShutdownTrigger, Shutdown) {
        let (tx, rx) = watch::channel(false);
        (ShutdownTrigger { tx: Arc::new(tx) }, Shutdown { rx })
    }

    /// Requests the stop: every [`Shutdown`] of this trigger reports it from now on.
    pub fn trigger(&self) {
        self.tx.send_replace(true);
    }

    /// Another [`Shutdown`] controlled by this trigger.
    pub fn subscribe(&self) -> Shutdown {
        Shutdown {
            rx: self.tx.subscribe(),
        }
    }
}

impl Shutdown {
    /// Whether the stop was requested.
    pub fn is_shutdown(&self) -> bool {
        *self.rx.borrow()
    }

    /// Returns once the stop is requested (at once if it already was). Once every trigger is
    /// gone nobody can request it any more, so this then never returns.
    pub async fn recv(&mut self) {
        if self.rx.wait_for(|stop| *stop).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn every_subscriber_sees_the_trigger() {
        let (trigger, mut first) = ShutdownTrigger::new();
        let mut second = trigger.subscribe();
        let mut cloned = first.clone();
        assert!(!first.is_shutdown());
        let waiting = tokio::spawn(async move { second.recv().await });
        trigger.trigger();
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("a waiting recv returns on trigger")
            .unwrap();
        assert!(first.is_shutdown() && cloned.is_shutdown());
        // Already triggered: no wait.
        first.recv().await;
        cloned.recv().await;
    }

    #[tokio::test]
    async fn recv_waits_while_not_triggered() {
        let (_trigger, mut s) = ShutdownTrigger::new();
        let waited = tokio::time::timeout(Duration::from_millis(50), s.recv()).await;
        assert!(waited.is_err());
    }
}
