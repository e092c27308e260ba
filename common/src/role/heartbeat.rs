//! Heartbeats: every role writes `hb.<role>.<id>` to the control bucket every
//! [`HEARTBEAT_EVERY`], so `caprl status` can tell who is alive and on which policy.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::watch;

use super::Problem;
use super::Role;
use crate::bus::Bus;
use crate::shutdown::Shutdown;
use crate::telemetry;
use caprl_wire::{DataFingerprint, Heartbeat, PolicyVersion};

/// Prefix of every heartbeat key.
pub const HEARTBEAT_PREFIX: &str = "hb.";

/// How often a heartbeat is written.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(2);

/// KV key of a heartbeat: `hb.<role>.<id>`, with characters a key cannot hold in `id` as `_`.
pub fn heartbeat_key(role: Role, id: &str) -> String {
    let id: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{HEARTBEAT_PREFIX}{role}.{id}")
}

/// Whose heartbeat it is and what it says besides the time.
#[derive(Debug, Clone)]
pub struct HeartbeatOf {
    pub role: Role,
    pub id: String,
    /// The data set the process opened.
    pub data: DataFingerprint,
    /// The policy version the process holds.
    pub version: watch::Receiver<u64>,
    /// What keeps it from working, if anything.
    pub problem: Problem,
}

/// Writes the heartbeat of `of` every [`HEARTBEAT_EVERY`] until `shutdown`, then deletes it.
pub fn spawn_heartbeat(
    bus: Arc<dyn Bus>,
    of: HeartbeatOf,
    mut shutdown: Shutdown,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let HeartbeatOf {
            role,
            id,
            data,
            version,
            problem,
        } = of;
        let key = heartbeat_key(role, &id);
        loop {
            let hb = Heartbeat {
                role: role.name().to_string(),
                id: id.clone(),
                policy_version: PolicyVersion(*version.borrow()),
                unix_ms: telemetry::runlog::unix_ms_now(),
                data: data.clone(),
                problem: problem.get(),
            };
            if let Ok(bytes) = caprl_wire::encode(&hb, caprl_wire::DEFAULT_MAX_MESSAGE_BYTES) {
                if let Err(e) = bus.kv_put(&key, Bytes::from(bytes)).await {
                    tracing::debug!("heartbeat {key}: {e}");
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(HEARTBEAT_EVERY) => {}
                _ = shutdown.recv() => break,
            }
        }
        let _ = bus.kv_delete(&key).await;
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_the_role_and_a_safe_id() {
        assert_eq!(heartbeat_key(Role::Actor, "a1"), "hb.actor.a1");
        assert_eq!(
            heartbeat_key(Role::RewardWorker, "host.1 x"),
            "hb.reward-worker.host_1_x"
        );
        assert_eq!(
            heartbeat_key(Role::Learner, "learner"),
            "hb.learner.learner"
        );
    }
}
