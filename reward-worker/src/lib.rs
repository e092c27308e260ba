//! caprl-reward-worker: scores rollouts with the configured reward spec.
