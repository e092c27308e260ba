//! What the three roles share: their names, the heartbeat each writes, and the serve loop of
//! the two that pull work (actor and reward worker).
//!
//! - [`Role`]: a role's name in heartbeats, metrics and logs.
//! - [`spawn_heartbeat`]: the one writer of `hb.<role>.<id>` in the control bucket, carrying
//!   the role's data set and its [`Problem`], if any.
//! - [`Roster`]: the heartbeats read back, for `caprl status` and the learner.
//! - [`serve`]: pull, decode or term, count redeliveries, ride out broker outages, stop on
//!   [`crate::shutdown::Shutdown`]; a role plugs in its per-message [`Work`].

mod heartbeat;
mod problem;
mod roster;
mod serve;

pub use heartbeat::{
    heartbeat_key, spawn_heartbeat, HeartbeatOf, HEARTBEAT_EVERY, HEARTBEAT_PREFIX,
};
pub use problem::Problem;
pub use roster::{Member, Roster, LIVE_WITHIN};
pub use serve::{reject_reason, serve, ServeSpec, Served, Work};

use std::fmt;

/// One of the three roles of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    Learner,
    Actor,
    RewardWorker,
}

impl Role {
    /// Every role, in the order `caprl status` lists them.
    pub const ALL: [Role; 3] = [Role::Learner, Role::Actor, Role::RewardWorker];

    /// The name in heartbeat keys, metrics labels and the `caprl` subcommand.
    pub fn name(self) -> &'static str {
        match self {
            Role::Learner => "learner",
            Role::Actor => "actor",
            Role::RewardWorker => "reward-worker",
        }
    }

    /// The name in log lines ("reward worker w1: ...").
    pub fn label(self) -> &'static str {
        match self {
            Role::Learner => "learner",
            Role::Actor => "actor",
            Role::RewardWorker => "reward worker",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
