//! The leave-one-out mean baseline: self-critical.pytorch's "new self-critical"
//! (`get_self_critical_reward` with `sc_sample_method` samples and no greedy pass) and RLOO
//! (Ahmadian et al. 2024, "Back to Basics"):
//!
//! `Aⱼ = rⱼ − (1/(s−1)) Σ_{k≠j} rₖ  =  (s/(s−1)) (rⱼ − r̄)`
//!
//! over the `s` samples of one input. The baseline does not depend on sample `j`, so the
//! estimate stays unbiased, and no greedy decode is needed. With one sample there is no other
//! sample: the advantage is 0.

/// `rⱼ − mean of the other samples` for each sample `j` of one input.
pub fn advantages(rewards: &[f32]) -> Vec<f32> {
    let s = rewards.len();
    if s < 2 {
        return vec![0.0; s];
    }
    let total: f32 = rewards.iter().sum();
    rewards
        .iter()
        .map(|r| r - (total - r) / (s as f32 - 1.0))
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn each_sample_is_compared_with_the_mean_of_the_others() {
        let a = super::advantages(&[1.0, 2.0, 3.0]);
        assert_eq!(a, vec![1.0 - 2.5, 2.0 - 2.0, 3.0 - 1.5]);
    }

    #[test]
    fn a_single_sample_has_no_advantage() {
        assert_eq!(super::advantages(&[0.7]), vec![0.0]);
    }
}
