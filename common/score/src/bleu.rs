//! BLEU-1..4 with pycocoevalcap's conventions (`BleuScorer`, option `closest`).
//!
//! For a candidate `c` with `guess_n = max(0, |c| − n + 1)` n-grams, of which
//! `correct_n` match after clipping each n-gram count by its largest count in
//! any one reference, and `r` the reference length closest to `|c|` (ties go
//! to the shorter one):
//!
//! ```text
//! BLEU-N = (Π_{n=1..N} (correct_n + 1e-15) / (guess_n + 1e-9))^(1/N) · BP
//! BP     = exp(1 − 1/ratio) if ratio < 1 else 1,   ratio = (|c| + 1e-15) / (r + 1e-9)
//! ```
//!
//! The sentence scores are pycocoevalcap's per-image `bleu_list`; the corpus
//! score applies the same formula to `correct`, `guess`, `|c|` and `r` summed
//! over all images (not the mean of the sentence scores). The tiny constants
//! keep an empty candidate at 0 instead of dividing by zero.

use super::ngrams::{count_sorted, push_ngrams, NgramKey, MAX_ORDER};

const TINY: f64 = 1e-15;
const SMALL: f64 = 1e-9;

/// Match counts of one candidate against its references.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BleuStats {
    /// Candidate length in words.
    pub testlen: usize,
    /// Closest reference length.
    pub reflen: usize,
    /// Candidate n-grams per order.
    pub guess: [usize; MAX_ORDER],
    /// Clipped matching n-grams per order.
    pub correct: [usize; MAX_ORDER],
}

impl BleuStats {
    /// Counts `cand` against `refs` (an empty `refs` matches nothing and
    /// has reference length 0).
    pub fn new<R: AsRef<[u32]>>(cand: &[u32], refs: &[R]) -> Self {
        let testlen = cand.len();
        let reflen = refs
            .iter()
            .map(|r| r.as_ref().len())
            .min_by_key(|&l| (l.abs_diff(testlen), l))
            .unwrap_or(0);
        let mut stats = Self {
            testlen,
            reflen,
            ..Self::default()
        };
        let mut keys = Vec::new();
        let mut cand_counts = Vec::new();
        let mut ref_counts = Vec::new();
        let mut all_refs: Vec<(NgramKey, u32)> = Vec::new();
        for n in 0..MAX_ORDER {
            stats.guess[n] = (testlen + 1).saturating_sub(n + 1);
            keys.clear();
            push_ngrams(cand, n + 1, &mut keys);
            count_sorted(&mut keys, &mut cand_counts);
            if cand_counts.is_empty() {
                continue;
            }
            // Max count of each n-gram over the references, sorted by key.
            all_refs.clear();
            for r in refs {
                keys.clear();
                push_ngrams(r.as_ref(), n + 1, &mut keys);
                count_sorted(&mut keys, &mut ref_counts);
                all_refs.extend_from_slice(&ref_counts);
            }
            all_refs.sort_unstable();
            let mut j = 0;
            let mut correct = 0usize;
            for &(k, c) in &cand_counts {
                while j < all_refs.len() && all_refs[j].0 < k {
                    j += 1;
                }
                let mut max_ref = 0;
                while j < all_refs.len() && all_refs[j].0 == k {
                    max_ref = max_ref.max(all_refs[j].1);
                    j += 1;
                }
                correct += c.min(max_ref) as usize;
            }
            stats.correct[n] = correct;
        }
        stats
    }

    /// Adds another sentence's counts (for the corpus score).
    pub fn add(&mut self, other: &Self) {
        self.testlen += other.testlen;
        self.reflen += other.reflen;
        for n in 0..MAX_ORDER {
            self.guess[n] += other.guess[n];
            self.correct[n] += other.correct[n];
        }
    }

    /// BLEU-1..4 from these counts (pycocoevalcap's formula, see module docs).
    pub fn scores(&self) -> [f64; MAX_ORDER] {
        let mut out = [0.0; MAX_ORDER];
        let mut prod = 1.0;
        for (n, o) in out.iter_mut().enumerate() {
            prod *= (self.correct[n] as f64 + TINY) / (self.guess[n] as f64 + SMALL);
            *o = prod.powf(1.0 / (n as f64 + 1.0));
        }
        let ratio = (self.testlen as f64 + TINY) / (self.reflen as f64 + SMALL);
        if ratio < 1.0 {
            let bp = (1.0 - 1.0 / ratio).exp();
            for v in &mut out {
                *v *= bp;
            }
        }
        out
    }
}

/// BLEU-1..4 of one candidate against its references (pycocoevalcap's
/// per-image `bleu_list` entries).
pub fn bleu_sentence<R: AsRef<[u32]>>(cand: &[u32], refs: &[R]) -> [f64; MAX_ORDER] {
    BleuStats::new(cand, refs).scores()
}

/// Corpus BLEU-1..4 and the per-image scores, as pycocoevalcap's
/// `Bleu(4).compute_score(gts, res)`.
///
/// # Panics
/// If `refs` and `cands` differ in length.
pub fn bleu_corpus<C: AsRef<[u32]>>(
    refs: &[Vec<Vec<u32>>],
    cands: &[C],
) -> ([f64; MAX_ORDER], Vec<[f64; MAX_ORDER]>) {
    assert_eq!(
        refs.len(),
        cands.len(),
        "bleu_corpus: one reference set per candidate"
    );
    let mut total = BleuStats::default();
    let per_image = refs
        .iter()
        .zip(cands)
        .map(|(r, c)| {
            let s = BleuStats::new(c.as_ref(), r);
            total.add(&s);
            s.scores()
        })
        .collect();
    (total.scores(), per_image)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_match_scores_one() {
        let b = bleu_sentence(&[1, 2, 3, 4], &[vec![1, 2, 3, 4]]);
        for v in b {
            assert!((v - 1.0).abs() < 1e-8);
        }
    }

    #[test]
    fn clipping_and_closest_length() {
        let s = BleuStats::new(&[1, 1, 1], &[vec![1, 2], vec![1, 1, 5, 6]]);
        assert_eq!(s.correct[0], 2);
        assert_eq!(s.reflen, 2, "ties go to the shorter reference");
        assert_eq!(s.guess, [3, 2, 1, 0]);
    }

    #[test]
    fn empty_candidate_scores_zero() {
        let b = bleu_sentence(&[], &[vec![1, 2]]);
        assert!(b.iter().all(|&v| v == 0.0));
    }
}
