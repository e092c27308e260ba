//! Who is in a run: the heartbeats of the control bucket, read as live or gone, with each role's
//! data set and problem. `caprl status` prints it; the learner reads it when it waits too long
//! for results ([`Roster::blocking`]) and before it takes a run id ([`Roster::live_learners`]).

use std::time::{Duration, SystemTime};

use caprl_wire::{DataFingerprint, Heartbeat};

use super::{Role, HEARTBEAT_PREFIX};
use crate::bus::{Bus, BusResult};

/// A heartbeat older than this marks its process as gone.
pub const LIVE_WITHIN: Duration = Duration::from_secs(10);

/// One live process of the run.
#[derive(Debug, Clone)]
pub struct Member {
    pub heartbeat: Heartbeat,
    /// Since its last heartbeat.
    pub age: Duration,
}

impl Member {
    /// Why this process cannot do the run's work: the problem it reports, or a data set other
    /// than `data` (the learner's); `None` when it can.
    pub fn unable(&self, data: &DataFingerprint) -> Option<String> {
        let hb = &self.heartbeat;
        if let Some(p) = &hb.problem {
            return Some(p.clone());
        }
        (hb.data != *data).then(|| {
            format!(
                "it opened another data set (fingerprint {}) than the run's ({data})",
                hb.data
            )
        })
    }
}

/// The run's processes by their heartbeats.
#[derive(Debug, Clone, Default)]
pub struct Roster {
    /// Heartbeats younger than [`LIVE_WITHIN`].
    pub live: Vec<Member>,
    /// Heartbeats older than that: processes that died without deleting theirs.
    pub gone: usize,
}

impl Roster {
    /// Reads every heartbeat of the run; an unreadable one (another schema version) is logged
    /// and left out.
    pub async fn read(bus: &dyn Bus) -> BusResult<Roster> {
        let now = SystemTime::now();
        let mut roster = Roster::default();
        for e in bus.kv_entries(HEARTBEAT_PREFIX).await? {
            let age = now.duration_since(e.updated).unwrap_or_default();
            match caprl_wire::decode::<Heartbeat>(&e.value, caprl_wire::DEFAULT_MAX_MESSAGE_BYTES) {
                Ok(heartbeat) if age <= LIVE_WITHIN => roster.live.push(Member { heartbeat, age }),
                Ok(_) => roster.gone += 1,
                Err(err) => tracing::warn!("heartbeat {} unreadable: {err}", e.key),
            }
        }
        roster
            .live
            .sort_by(|a, b| a.heartbeat.id.cmp(&b.heartbeat.id));
        Ok(roster)
    }

    /// The live processes of `role`.
    pub fn of(&self, role: Role) -> impl Iterator<Item = &Member> {
        self.live
            .iter()
            .filter(move |m| m.heartbeat.role == role.name())
    }

    /// The live learners other than the one with id `me`.
    pub fn live_learners(&self, me: &str) -> Vec<&Member> {
        self.of(Role::Learner)
            .filter(|m| m.heartbeat.id != me)
            .collect()
    }

    /// What the learner waiting for results on data set `data` is waiting for, in words, and
    /// whether it waits in vain: `Err` when some role kind has live processes and none of them
    /// can do the run's work (each has a problem, or another data set). No live process of a
    /// kind is only said, not an error: it may still be starting.
    pub fn blocking(&self, data: &DataFingerprint) -> Result<String, String> {
        let mut said = Vec::new();
        let mut stuck = Vec::new();
        for role in [Role::Actor, Role::RewardWorker] {
            let members: Vec<&Member> = self.of(role).collect();
            if members.is_empty() {
                said.push(format!("no live {} (none has a heartbeat)", role.label()));
                continue;
            }
            let unable: Vec<String> = members
                .iter()
                .filter_map(|m| {
                    m.unable(data)
                        .map(|why| format!("{} {}: {why}", role.label(), m.heartbeat.id))
                })
                .collect();
            let able = members.len() - unable.len();
            said.push(format!(
                "{able} of {} live {}s able to work",
                members.len(),
                role.label()
            ));
            if able == 0 {
                stuck.push(format!(
                    "no {} can take the work: {}",
                    role.label(),
                    unable.join("; ")
                ));
            } else {
                said.extend(unable);
            }
        }
        match stuck.is_empty() {
            true => Ok(said.join("; ")),
            false => Err(stuck.join("; ")),
        }
    }
}
