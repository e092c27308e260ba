//! ROUGE-L with pycocoevalcap's conventions (`Rouge.calc_score`).
//!
//! With `P = max_s LCS(c, s)/|c|` and `R = max_s LCS(c, s)/|s|`, each maximum
//! taken separately over the references `s` (not the F-score of the best
//! reference), and `β = 1.2`:
//!
//! ```text
//! ROUGE-L = (1 + β²) P R / (R + β² P)   if P ≠ 0 and R ≠ 0, else 0
//! ```
//!
//! The reference splits on `" "`, so an empty sentence is one empty token:
//! its length is 1 and it matches only another empty sentence. That is
//! reproduced (an empty candidate against an empty reference scores 1).
//! The corpus score is the mean of the per-image scores.

/// β of the F-measure (recall weighted 1.2× precision).
pub const BETA: f64 = 1.2;

/// The empty-token stand-in for an empty sentence (id reserved by the
/// n-gram packing, so it never equals a real token).
const EMPTY: [u32; 1] = [u32::MAX];

fn as_split(tokens: &[u32]) -> &[u32] {
    if tokens.is_empty() {
        &EMPTY
    } else {
        tokens
    }
}

/// Length of the longest common subsequence, with one DP row reused.
fn lcs(a: &[u32], b: &[u32], row: &mut Vec<u32>) -> u32 {
    let (long, short) = if a.len() < b.len() { (b, a) } else { (a, b) };
    row.clear();
    row.resize(short.len() + 1, 0);
    for &x in long {
        let mut diag = 0;
        for (j, &y) in short.iter().enumerate() {
            let up = row[j + 1];
            row[j + 1] = if x == y { diag + 1 } else { up.max(row[j]) };
            diag = up;
        }
    }
    row[short.len()]
}

/// ROUGE-L of one candidate against its references (0 with no references).
pub fn rouge_l<R: AsRef<[u32]>>(cand: &[u32], refs: &[R]) -> f64 {
    rouge_l_slices(cand, refs.iter().map(AsRef::as_ref), &mut Vec::new())
}

/// [`rouge_l`] over any sequence of references, reusing the DP row `row`.
pub(crate) fn rouge_l_slices<'a>(
    cand: &[u32],
    refs: impl IntoIterator<Item = &'a [u32]>,
    row: &mut Vec<u32>,
) -> f64 {
    let cand = as_split(cand);
    let (mut p_max, mut r_max) = (0.0f64, 0.0f64);
    for r in refs {
        let r = as_split(r);
        let l = f64::from(lcs(r, cand, row));
        p_max = p_max.max(l / cand.len() as f64);
        r_max = r_max.max(l / r.len() as f64);
    }
    if p_max != 0.0 && r_max != 0.0 {
        let b2 = BETA * BETA;
        ((1.0 + b2) * p_max * r_max) / (r_max + b2 * p_max)
    } else {
        0.0
    }
}

/// Mean ROUGE-L and the per-image scores, as pycocoevalcap's
/// `Rouge().compute_score(gts, res)`.
///
/// # Panics
/// If `refs` and `cands` differ in length.
pub fn rouge_l_corpus<C: AsRef<[u32]>>(refs: &[Vec<Vec<u32>>], cands: &[C]) -> (f64, Vec<f64>) {
    assert_eq!(
        refs.len(),
        cands.len(),
        "rouge_l_corpus: one reference set per candidate"
    );
    let scores: Vec<f64> = refs
        .iter()
        .zip(cands)
        .map(|(r, c)| rouge_l(c.as_ref(), r))
        .collect();
    (super::cider::mean(&scores), scores)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lcs_counts_subsequence() {
        let mut row = Vec::new();
        assert_eq!(lcs(&[1, 2, 3, 4], &[1, 3, 4, 9], &mut row), 3);
        assert_eq!(lcs(&[], &[1], &mut row), 0);
    }

    #[test]
    fn precision_and_recall_are_maximised_separately() {
        // P = max(1/1, 1/1) = 1, R = max(1/2, 1/4) = 0.5
        let s = rouge_l(&[1], &[vec![1, 2], vec![1, 3, 4, 5]]);
        let b2 = BETA * BETA;
        assert!((s - (1.0 + b2) * 0.5 / (0.5 + b2)).abs() < 1e-12);
        assert_eq!(rouge_l::<Vec<u32>>(&[], &[vec![]]), 1.0);
        assert_eq!(rouge_l(&[], &[vec![1]]), 0.0);
    }
}
