//! Set-level diversity of the captions generated for one input, and the
//! pairwise distance of sequence-level exploration (paper 002, SLE).
//!
//! - **Div-n** (paper 002, after Shetty et al., ref. 26): distinct n-grams in the
//!   set divided by the total number of words in the set. Higher is more
//!   diverse.
//! - **mBLEU-4** (paper 002): BLEU-4 of each caption against all the others
//!   as references, averaged over the captions. Lower is more diverse. The
//!   BLEU is the pycocoevalcap sentence BLEU of [`super::bleu`].
//! - **Self-BLEU** (paper 004, defined by Texygen, Zhu et al. 2018): the same
//!   "each caption against the rest" average, but with Texygen's BLEU
//!   (NLTK `sentence_bleu`, uniform weights over 1..4-grams, smoothing
//!   `method1`: a precision with no match counts ε = 0.1 matches; the score is
//!   0 when no unigram matches; `BP = exp(1 − r/c)` for `c ≤ r`, 0 for an
//!   empty caption). It is kept separate from mBLEU-4 so numbers can be
//!   compared with the papers that report each.
//! - **Distance** `d(y, y')` of SLE's diversity term (paper 002, eq. 8 and
//!   §4.4): the paper says only "we use BLEU3 + BLEU4 to calculate d(y, y')".
//!   A distance must shrink as captions agree, so we read it as
//!   `d(y, y') = 1 − (BLEU-3(y | y') + BLEU-4(y | y')) / 2`: one minus the
//!   mean of the sentence BLEU-3 and BLEU-4 of `y` with `y'` as its only
//!   reference, which lies in [0, 1]. BLEU is not symmetric, so neither is
//!   `d`. The CIDEr option is `d = 1 − min(CIDEr-D(y | {y'}), 10) / 10`.

use super::bleu::{bleu_sentence, BleuStats};
use super::cider::{mean, CiderD};
use super::ngrams::{push_ngrams, MAX_ORDER};

/// Div-n: distinct n-grams over the set / words in the set (0 for a set
/// with no words).
pub fn div_n<C: AsRef<[u32]>>(captions: &[C], n: usize) -> f64 {
    let words: usize = captions.iter().map(|c| c.as_ref().len()).sum();
    if words == 0 || n == 0 || n > MAX_ORDER {
        return 0.0;
    }
    let mut keys = Vec::new();
    for c in captions {
        push_ngrams(c.as_ref(), n, &mut keys);
    }
    keys.sort_unstable();
    keys.dedup();
    keys.len() as f64 / words as f64
}

fn others<C: AsRef<[u32]>>(captions: &[C], i: usize) -> Vec<&[u32]> {
    captions
        .iter()
        .enumerate()
        .filter(|&(j, _)| j != i)
        .map(|(_, c)| c.as_ref())
        .collect()
}

/// mBLEU-4: mean over captions of the sentence BLEU-4 of each against the
/// others (0 for fewer than two captions).
pub fn mbleu4<C: AsRef<[u32]>>(captions: &[C]) -> f64 {
    if captions.len() < 2 {
        return 0.0;
    }
    let scores: Vec<f64> = (0..captions.len())
        .map(|i| bleu_sentence(captions[i].as_ref(), &others(captions, i))[3])
        .collect();
    mean(&scores)
}

/// Texygen/NLTK smoothed sentence BLEU-4 (see module docs).
fn texygen_bleu4(cand: &[u32], refs: &[&[u32]]) -> f64 {
    let s = BleuStats::new(cand, refs);
    if s.correct[0] == 0 {
        return 0.0;
    }
    let log_p: f64 = (0..MAX_ORDER)
        .map(|n| {
            let den = s.guess[n].max(1) as f64;
            let num = if s.correct[n] == 0 {
                0.1
            } else {
                s.correct[n] as f64
            };
            (num / den).ln() / MAX_ORDER as f64
        })
        .sum();
    let (c, r) = (s.testlen as f64, s.reflen as f64);
    let bp = if c > r { 1.0 } else { (1.0 - r / c).exp() };
    bp * log_p.exp()
}

/// Self-BLEU: mean over captions of Texygen's BLEU-4 of each against the
/// others (0 for fewer than two captions).
pub fn self_bleu<C: AsRef<[u32]>>(captions: &[C]) -> f64 {
    if captions.len() < 2 {
        return 0.0;
    }
    let scores: Vec<f64> = (0..captions.len())
        .map(|i| texygen_bleu4(captions[i].as_ref(), &others(captions, i)))
        .collect();
    mean(&scores)
}

/// Which `d(y, y')` SLE uses (see module docs); `reward.distance` in the run config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Distance {
    /// `1 − (BLEU-3 + BLEU-4)/2` of `y` against `y'` (the paper's choice).
    #[default]
    Bleu,
    /// `1 − min(CIDEr-D, 10)/10` of `y` against `y'`.
    Cider,
}

/// The `s × s` matrix `d[j][k] = d(captions[j], captions[k])`, diagonal
/// included (the SLE baseline averages all `s²` entries).
///
/// For [`Distance::Cider`], `cider` gives the document frequencies (e.g. the
/// training table); with `None` every n-gram gets idf 1 (a handful of
/// captions is no corpus to weigh n-grams by, and a set-level df would give
/// n-grams shared by all captions weight 0, making identical captions
/// maximally distant).
pub fn pairwise_distances<C: AsRef<[u32]>>(
    captions: &[C],
    kind: Distance,
    cider: Option<&CiderD>,
) -> Vec<Vec<f64>> {
    match kind {
        Distance::Bleu => captions
            .iter()
            .map(|y| {
                captions
                    .iter()
                    .map(|y2| {
                        let b = bleu_sentence(y.as_ref(), &[y2.as_ref()]);
                        (1.0 - (b[2] + b[3]) / 2.0).clamp(0.0, 1.0)
                    })
                    .collect()
            })
            .collect(),
        Distance::Cider => {
            let local;
            let scorer = match cider {
                Some(s) => s,
                None => {
                    local = CiderD::uniform_idf();
                    &local
                }
            };
            let prepared: Vec<_> = captions
                .iter()
                .map(|c| scorer.prepare(&[c.as_ref()]))
                .collect();
            captions
                .iter()
                .map(|y| {
                    prepared
                        .iter()
                        .map(|p| 1.0 - scorer.score(p, y.as_ref()).min(10.0) / 10.0)
                        .collect()
                })
                .collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn div_counts_distinct_ngrams_over_words() {
        let set = vec![vec![1, 2, 3], vec![1, 2, 4]];
        assert!((div_n(&set, 1) - 4.0 / 6.0).abs() < 1e-12);
        assert!((div_n(&set, 2) - 3.0 / 6.0).abs() < 1e-12);
        assert_eq!(div_n::<Vec<u32>>(&[vec![]], 1), 0.0);
    }

    #[test]
    fn identical_captions_are_not_diverse() {
        let set = vec![vec![1, 2, 3, 4, 5]; 3];
        assert!((mbleu4(&set) - 1.0).abs() < 1e-6);
        assert!((self_bleu(&set) - 1.0).abs() < 1e-12);
        let d = pairwise_distances(&set, Distance::Bleu, None);
        assert!(d.iter().flatten().all(|&v| v.abs() < 1e-6));
        let d = pairwise_distances(&set, Distance::Cider, None);
        assert!(d.iter().flatten().all(|&v| v.abs() < 1e-9), "{d:?}");
    }

    #[test]
    fn disjoint_captions_are_far_apart() {
        let set = vec![vec![1, 2, 3, 4], vec![5, 6, 7, 8]];
        let d = pairwise_distances(&set, Distance::Bleu, None);
        assert!((d[0][1] - 1.0).abs() < 1e-6);
        assert_eq!(self_bleu(&set), 0.0);
        assert!(mbleu4(&set) < 1e-6);
    }
}
