//! The serve loop of a role that pulls work: pull a batch, decode each message or `term` it
//! (counted by reason), count redeliveries, hand the message to the role's [`Work`], ride out
//! broker outages with [`Backoff`], write heartbeats, and stop on [`Shutdown`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::{heartbeat_key, spawn_heartbeat, HeartbeatOf, Problem, Role};
use crate::bus::{Backoff, Bus, BusError, Delivery, Queue};
use crate::shutdown::Shutdown;
use crate::telemetry;
use crate::telemetry::stages::{self, Stage};
use caprl_wire::{DataFingerprint, TaskId, WireError};

/// How long one pull waits for messages before the loop looks at its state again.
const PULL_WAIT: Duration = Duration::from_millis(300);

/// A role's work on the messages of one queue; [`serve`] is the loop around it.
pub trait Work: Send {
    /// What the queue carries.
    type Message: caprl_wire::Message + Send;
    /// Why the work stopped the role; a transient bus error in it is ridden out instead.
    type Error: From<BusError> + Send;

    /// Called before every pull; `false` skips this pull (the work is not ready, e.g. an actor
    /// without a policy yet, and has waited a little itself). Ready by default.
    fn prepare(
        &mut self,
        bus: &dyn Bus,
        shutdown: &mut Shutdown,
    ) -> impl Future<Output = bool> + Send {
        let _ = (bus, shutdown);
        async { true }
    }

    /// Does the work for one decoded message and settles its `delivery` (ack, nak or term).
    fn handle(
        &mut self,
        bus: &dyn Bus,
        delivery: Delivery,
        message: Self::Message,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// The bus error inside `e`, if it is one: a transient one is ridden out, not fatal.
    fn bus_error(e: &Self::Error) -> Option<&BusError>;

    /// The task a message belongs to, for the log line of a redelivery.
    fn task_id(message: &Self::Message) -> TaskId;
}

/// Who serves what: the role and its id, the queue, and how to pull it.
#[derive(Debug, Clone)]
pub struct ServeSpec {
    pub role: Role,
    pub id: String,
    pub queue: Queue,
    /// Messages per pull.
    pub batch: usize,
    /// `nats.max_message_bytes`.
    pub max_message_bytes: usize,
    /// The data set the role opened, for its heartbeat.
    pub data: DataFingerprint,
    /// What keeps the role from working, for its heartbeat; its work sets and clears it.
    pub problem: Problem,
}

/// What the loop itself counted; the work counts the rest.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Served {
    /// Messages termed because they did not decode.
    pub rejected: u64,
    pub redeliveries: u64,
}

/// Serves `spec.queue` with `work` until `shutdown`, writing a heartbeat that carries the policy
/// version `version` holds. Returns what the loop counted, or the work's first error that is not
/// a transient bus error.
pub async fn serve<W: Work>(
    spec: &ServeSpec,
    work: &mut W,
    bus: Arc<dyn Bus>,
    version: watch::Receiver<u64>,
    mut shutdown: Shutdown,
) -> Result<Served, W::Error> {
    let heartbeat = spawn_heartbeat(
        Arc::clone(&bus),
        HeartbeatOf {
            role: spec.role,
            id: spec.id.clone(),
            data: spec.data.clone(),
            version,
            problem: spec.problem.clone(),
        },
        shutdown.clone(),
    );
    let who = format!("{} {}", spec.role.label(), spec.id);
    let mut served = Served::default();
    let mut backoff = Backoff::default();
    let result = loop {
        if shutdown.is_shutdown() {
            break Ok(());
        }
        if !work.prepare(bus.as_ref(), &mut shutdown).await {
            continue;
        }
        let waiting = Stage::queue_wait(spec.role.name()).map(stages::Timer::start);
        let deliveries = tokio::select! {
            d = bus.pull(spec.queue, spec.batch, PULL_WAIT) => d,
            _ = shutdown.recv() => continue,
        };
        drop(waiting);
        let deliveries = match deliveries {
            Ok(d) => d,
            Err(e) if e.is_transient() => {
                backoff.ride_out(&who, &e, &mut shutdown).await;
                continue;
            }
            Err(e) => break Err(e.into()),
        };
        let mut failed = None;
        // Work that outlasts ack_wait (a long decode, a slow Python reward) is not handed to a
        // second worker while this one is alive: neither the message in hand nor the ones
        // pulled with it that wait their turn behind it. A guard is dropped when its message is
        // handled; those left when the loop breaks come back after one ack_wait.
        let mut alive: std::collections::VecDeque<_> =
            deliveries.iter().map(Delivery::keep_alive).collect();
        for delivery in deliveries {
            let _alive = alive.pop_front();
            let r = match decode::<W>(spec, &who, delivery, &mut served).await {
                Ok(Some((delivery, message))) => work.handle(bus.as_ref(), delivery, message).await,
                Ok(None) => Ok(()),
                Err(e) => Err(e.into()),
            };
            match r {
                Ok(()) => backoff.reset(),
                // The message comes back after ack_wait; a duplicate result is de-duplicated
                // downstream.
                Err(e) if W::bus_error(&e).is_some_and(BusError::is_transient) => {
                    if let Some(e) = W::bus_error(&e) {
                        backoff.ride_out(&who, e, &mut shutdown).await;
                    }
                    break;
                }
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        if let Some(e) = failed {
            break Err(e);
        }
    };
    if result.is_ok() {
        // Shutdown: the heartbeat deletes its key and ends.
        let _ = heartbeat.await;
    } else {
        // The role stops on its own: its heartbeat, which ends only with a shutdown, goes too,
        // so the role returns its error instead of waiting for a shutdown that may not come.
        heartbeat.abort();
        let _ = bus.kv_delete(&heartbeat_key(spec.role, &spec.id)).await;
    }
    result.map(|()| served)
}

/// Decodes one delivery, or terms it (logged and counted) when it does not decode.
async fn decode<W: Work>(
    spec: &ServeSpec,
    who: &str,
    delivery: Delivery,
    served: &mut Served,
) -> Result<Option<(Delivery, W::Message)>, BusError> {
    let message: W::Message = match caprl_wire::decode(delivery.payload(), spec.max_message_bytes) {
        Ok(m) => m,
        Err(e) => {
            tracing::warn!("{who}: rejecting a message on `{}`: {e}", spec.queue);
            telemetry::metrics::count_rejected(reject_reason(&e));
            served.rejected += 1;
            delivery.term().await?;
            return Ok(None);
        }
    };
    if delivery.is_redelivery() {
        // Named, so that a redelivery can be traced to the role that died holding it.
        tracing::info!(
            "{who}: {} redelivered (delivery {})",
            W::task_id(&message),
            delivery.delivery_count()
        );
        telemetry::metrics::count_redelivery(spec.queue.name());
        served.redeliveries += 1;
    }
    Ok(Some((delivery, message)))
}

/// Counter label (`caprl_rejected_messages_total{reason}`) of a message that does not decode.
pub fn reject_reason(e: &WireError) -> &'static str {
    match e {
        WireError::BadMagic => "bad_magic",
        WireError::UnknownVersion { .. } => "unknown_version",
        WireError::UnknownKind(_) | WireError::WrongKind { .. } => "wrong_kind",
        WireError::Truncated { .. } => "truncated",
        WireError::Oversize { .. } => "oversize",
        WireError::Payload(_) | WireError::TrailingBytes => "bad_payload",
    }
}
