//! Actor-critic training (seed 001, Ren et al., "Deep Reinforcement Learning-based Image
//! Captioning with Embedding Reward"): a value network `v_θ(s_t)` is regressed on the return
//! `r` of the whole caption (the reward arrives only at the end, undiscounted), and the policy
//! follows `∇L = −Σₜ (r − v_θ(s_t)) ∇log p(w_t | s_t)`.
//!
//! The value head and its loss are in [`crate::critic`]; lookahead inference
//! (`λ·log π + (1 − λ)·v`) is `Captioner::beam_lookahead`; the embedding reward is the reward
//! workers' `embed`.

/// The critic's per-token targets of one sequence: its return at every step.
pub fn return_targets(len: usize, reward: f32) -> Vec<f32> {
    vec![reward; len]
}
