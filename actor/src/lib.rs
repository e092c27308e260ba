//! caprl-actor: turns rollout tasks into sampled captions with the current
//! policy snapshot ([`rollout`]); [`run`] is the actor role on a bus.

mod rollout;
mod service;

pub use rollout::rollout;
pub use service::{
    heartbeat_key, reject_reason, run, spawn_heartbeat, ActorConfig, ActorError, ActorStats,
};
