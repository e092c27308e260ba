//! GRPO's group-normalised advantage (Shao et al. 2024, DeepSeekMath eq. 3 with outcome
//! rewards):
//!
//! `Aⱼ = (rⱼ − mean(r)) / (std(r) + ε)`
//!
//! over the `s` samples of one input, `std` the sample standard deviation (divisor `s − 1`,
//! as `torch.std` in TRL and OpenRLHF) and `ε = 1e-4` (TRL's). Each sequence's loss is then
//! averaged over its own tokens before averaging over sequences ([`crate::pg::LossNorm::Sequences`]).
//! A group whose rewards are all equal has advantages 0.

/// Added to the standard deviation so that near-equal rewards do not blow up.
pub const EPS: f32 = 1e-4;

/// `(rⱼ − mean) / (std + ε)` for each sample `j` of one input.
pub fn advantages(rewards: &[f32]) -> Vec<f32> {
    let s = rewards.len();
    if s < 2 {
        return vec![0.0; s];
    }
    let mean = rewards.iter().sum::<f32>() / s as f32;
    let var = rewards.iter().map(|r| (r - mean).powi(2)).sum::<f32>() / (s as f32 - 1.0);
    let scale = 1.0 / (var.sqrt() + EPS);
    rewards.iter().map(|r| (r - mean) * scale).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advantages_are_centred_and_scaled_by_the_group_std() {
        // mean 2, sample std 1.
        let a = advantages(&[1.0, 2.0, 3.0]);
        let want = [-1.0 / (1.0 + EPS), 0.0, 1.0 / (1.0 + EPS)];
        for (x, w) in a.iter().zip(want) {
            assert!((x - w).abs() < 1e-6, "{a:?}");
        }
    }

    #[test]
    fn equal_rewards_give_zero_advantages() {
        assert_eq!(advantages(&[0.5, 0.5, 0.5]), vec![0.0; 3]);
    }
}
