//! Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-like training: a critical perspective"):
//! GRPO without its two biases,
//!
//! `Aⱼ = rⱼ − mean(r)`
//!
//! over the `s` samples of one input: no division by the group's standard deviation (which
//! up-weights inputs whose samples all score alike), and no per-sequence length normalisation
//! (which favours short correct and long wrong answers): the token terms of all sequences are
//! summed and divided by one constant, sequences × longest caption
//! ([`crate::pg::LossNorm::Constant`]). REINFORCE++'s group baseline is the same advantage.

/// `rⱼ − mean(r)` for each sample `j` of one input.
pub fn advantages(rewards: &[f32]) -> Vec<f32> {
    let mean = rewards.iter().sum::<f32>() / rewards.len().max(1) as f32;
    rewards.iter().map(|r| r - mean).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn advantages_are_centred_but_not_scaled() {
        assert_eq!(super::advantages(&[1.0, 2.0, 6.0]), vec![-2.0, -1.0, 3.0]);
    }
}
