//! The Hamming diversity term of diverse beam search (Vijayakumar et al. 2016, eq. 5 with
//! `Δ(Y_t^g, Y_t^h)` the Hamming diversity; self-critical.pytorch's `add_diversity`).
//!
//! At step `t`, group `g` ranks each proposal `y + w` by `log π(w | y, I) − λ · h_t(w)`,
//! where `h_t(w)` counts how many of the words chosen at step `t` by groups `0..g` equal `w`
//! (every choice counts, EOS included, as the reference counts each of its beams' tokens).

/// The penalty `λ · h_t(w)` of every word `w < v`, given the words the earlier groups chose at
/// this step; `None` when it is zero everywhere (no earlier choice, or `λ = 0`).
pub(crate) fn hamming_penalty(chosen: &[u32], lambda: f64, v: usize) -> Option<Vec<f64>> {
    if chosen.is_empty() || lambda == 0.0 {
        return None;
    }
    let mut penalty = vec![0.0; v];
    for &w in chosen {
        penalty[w as usize] += lambda;
    }
    Some(penalty)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_earlier_choice_of_a_word_costs_lambda() {
        let p = hamming_penalty(&[3, 1, 3], 0.5, 5).unwrap();
        assert_eq!(p, vec![0.0, 0.5, 0.0, 1.0, 0.0]);
    }

    #[test]
    fn the_first_group_and_lambda_zero_are_unpenalised() {
        assert_eq!(hamming_penalty(&[], 0.5, 5), None);
        assert_eq!(hamming_penalty(&[1, 2], 0.0, 5), None);
    }
}
