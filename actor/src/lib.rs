//! caprl-actor: turns rollout tasks into sampled captions with the current
//! policy snapshot ([`rollout`]).

mod rollout;

pub use rollout::rollout;
