//! SCST's greedy baseline (Rennie et al. 2017; papers 000 and 002):
//!
//! `Aⱼ = r(wˢⱼ) − r(ŵ)`, `ŵ` the greedy caption of the same input.
//!
//! The baseline is the reward the model gets at test time, so a sample is pushed up exactly
//! when it beats what greedy decoding would have said.

/// `rⱼ − r_greedy` for each sample `j` of one input.
pub fn advantages(rewards: &[f32], greedy: f32) -> Vec<f32> {
    rewards.iter().map(|r| r - greedy).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn greedy_baseline_subtracts_the_greedy_reward() {
        assert_eq!(super::advantages(&[1.0, 0.5], 0.75), vec![0.25, -0.25]);
    }
}
