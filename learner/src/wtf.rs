//! WTF-RL and weighted teacher forcing (seed 004, eq. 3):
//!
//! `∇L = −[ r(x^bs)·∇log p(x^bs) + r(x^gt)·∇log p(x^gt) ]`, `r(x) = α·r_bicont(x) + (1−α)·P_D(x)`
//!
//! over the best beam `x^bs` and a ground-truth caption `x^gt` of each image. `r` is the reward
//! spec's weighted total (`clip=0.94,disc=0.06` for α = 0.94); no baseline is subtracted, since
//! `r_bicont` already measures each caption against its strongest rivals in the batch. `wtf`
//! keeps only the ground-truth half: teacher forcing weighted by how well each reference
//! retrieves its image. [`crate::pg::loss`] turns the multipliers into the loss.

use caprl_common::wire::DecodeKind;

/// Whether a sequence of `kind` gets a gradient: ground truth always, the beam caption only
/// with the RL half (`rl = true`, objective `wtf-rl`).
pub fn trains_on(kind: DecodeKind, rl: bool) -> bool {
    match kind {
        DecodeKind::GroundTruth => true,
        DecodeKind::Beam => rl,
        _ => false,
    }
}

/// The multiplier of eq. 3 for a sequence with reward total `r`: the reward itself.
pub fn multiplier(r: f32) -> f32 {
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wtf_trains_on_ground_truth_only_and_wtf_rl_adds_the_beam() {
        assert!(trains_on(DecodeKind::GroundTruth, false));
        assert!(!trains_on(DecodeKind::Beam, false));
        assert!(trains_on(DecodeKind::Beam, true));
        assert!(!trains_on(DecodeKind::Greedy, true));
        assert!(!trains_on(DecodeKind::Sample, true));
    }
}
