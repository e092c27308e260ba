//! caprl-actor: watches the policy snapshot and turns rollout tasks into sampled captions.
