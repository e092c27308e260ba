//! Top-p (nucleus) truncation (Holtzman et al. 2020, "The Curious Case of Neural Text
//! Degeneration"; self-critical.pytorch's `sample_method = top<p>`): the smallest set `V_p` of
//! the likeliest words with `Σ_{w ∈ V_p} softmax(logit / T)_w ≥ p`. The sampler then draws from
//! `μ(w) = softmax(logit / T)_w / Σ_{V_p} softmax(logit / T)` on `V_p`, 0 elsewhere.

use super::log_softmax::host_log_softmax;

/// The nucleus of `candidates` (every word when `None`) at probability mass `top_p ∈ (0, 1]`,
/// as ascending ids. The probabilities are those of the candidates renormalised (top-k first,
/// then top-p, as the reference orders them). Words are taken by descending logit, the lower id
/// first on ties, until their mass reaches `top_p`; the word that crosses it is kept, so the
/// nucleus is never empty.
pub(crate) fn nucleus(
    logits: &[f32],
    inv_temp: f64,
    candidates: Option<&[usize]>,
    top_p: f64,
) -> Vec<usize> {
    let ids: Vec<usize> = match candidates {
        Some(c) => c.to_vec(),
        None => (0..logits.len()).collect(),
    };
    let sub: Vec<f32> = ids.iter().map(|&i| logits[i]).collect();
    let logp = host_log_softmax(&sub, inv_temp);
    let n = ids.len();
    let by_logit = |a: &usize, b: &usize| sub[*b].total_cmp(&sub[*a]).then(a.cmp(b));
    let mut pos: Vec<usize> = (0..n).collect();
    // Only the head of the order is needed: sort the best m positions, and look further (m × 4)
    // only when their mass falls short of p.
    let mut m = n.min(16);
    loop {
        if m < n {
            pos.select_nth_unstable_by(m - 1, by_logit);
        }
        pos[..m].sort_unstable_by(by_logit);
        let mut mass = 0.0;
        for (j, &q) in pos[..m].iter().enumerate() {
            mass += logp[q].exp();
            if mass >= top_p {
                let mut kept: Vec<usize> = pos[..=j].iter().map(|&q| ids[q]).collect();
                kept.sort_unstable();
                return kept;
            }
        }
        if m == n {
            let mut all = ids;
            all.sort_unstable();
            return all;
        }
        m = (4 * m).min(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// softmax([2, 1, 0, -1]) = [0.6439, 0.2369, 0.0871, 0.0321].
    const LOGITS: [f32; 4] = [1.0, -1.0, 2.0, 0.0];

    #[test]
    fn the_nucleus_is_the_smallest_head_reaching_p() {
        let at = |p| nucleus(&LOGITS, 1.0, None, p);
        assert_eq!(at(0.5), vec![2]);
        assert_eq!(at(0.6439), vec![2]);
        assert_eq!(at(0.65), vec![0, 2]);
        assert_eq!(at(0.88), vec![0, 2]);
        assert_eq!(at(0.9), vec![0, 2, 3]);
        assert_eq!(at(0.999), vec![0, 1, 2, 3]);
        assert_eq!(at(1e-9), vec![2], "a tiny p keeps the likeliest word");
    }

    #[test]
    fn temperature_flattens_the_distribution_before_truncating() {
        // At T = 10 the probabilities are nearly equal: 0.5 needs two words.
        assert_eq!(nucleus(&LOGITS, 0.1, None, 0.5), vec![0, 2]);
    }

    #[test]
    fn candidates_are_renormalised_before_truncating() {
        // Of {1, 3}: softmax([-1, 0]) = [0.269, 0.731].
        assert_eq!(nucleus(&LOGITS, 1.0, Some(&[1, 3]), 0.7), vec![3]);
        assert_eq!(nucleus(&LOGITS, 1.0, Some(&[1, 3]), 0.75), vec![1, 3]);
    }

    #[test]
    fn ties_keep_the_lower_id_and_long_tails_are_searched_past_the_first_head() {
        let flat = vec![0.0f32; 100];
        assert_eq!(nucleus(&flat, 1.0, None, 0.015), vec![0, 1]);
        let kept = nucleus(&flat, 1.0, None, 0.495);
        assert_eq!(kept, (0..50).collect::<Vec<_>>());
    }
}
