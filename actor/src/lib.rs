//! caprl-actor: turns rollout tasks into sampled captions with the current
//! policy snapshot ([`rollout`]); [`run`] is the actor role on a bus.

mod rollout;
mod service;
mod settings;
mod snapshot;

pub use rollout::rollout;
pub use service::{
    run, run_with_rollout, ActorConfig, ActorError, ActorStats, RolloutFn, INTERNAL_FAULT_RETRY,
};
