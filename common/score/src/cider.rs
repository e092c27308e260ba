//! CIDEr-D exactly as pycocoevalcap computes it (there named `Cider`).
//!
//! For a candidate `c` and the references `S = {s_1..s_m}` of one image
//! (Vedantam et al. 2015; the reward of paper 002 and of SCST):
//!
//! ```text
//! g_n(x)[k]   = tf_k(x) · (ln N − ln max(1, df_k))        n-grams k of order n, N = #images
//! sim_n(c, s) = Σ_k min(g_n(c)[k], g_n(s)[k]) · g_n(s)[k] / (‖g_n(c)‖ ‖g_n(s)‖)
//!               · exp(−(l(c) − l(s))² / (2σ²)),   σ = 6
//! CIDEr-D(c, S) = 10 · (1/m) Σ_s (1/4) Σ_{n=1..4} sim_n(c, s)
//! ```
//!
//! The division by the norms is skipped when either norm is 0 (the dot
//! product is then 0 too). Two details of the reference code are kept on
//! purpose, because rewards must equal the numbers researchers already have:
//!
//! - `l(x)`, the length in the Gaussian penalty, is the number of *bigrams*
//!   of `x` (pycocoevalcap's `counts2vec` adds `term_freq` when its 0-based
//!   order index `n == 1`), i.e. `max(0, len − 1)`, not the word count. It
//!   only differs from a word-count penalty when one sentence has 0 words
//!   and the other 1.
//! - `min(g(c), g(s)) · g(s)` clips the candidate's tf-idf by the
//!   reference's, and the norm of `g(c)` is the unclipped one.
//!
//! **Document frequency.** `corpus` mode ([`cider_corpus`]) counts df over
//! the reference sets of the images being scored and uses `N` = their count,
//! as pycocoevalcap does for evaluation. Precomputed mode
//! ([`CiderD::new`] with a [`DocFreq`] built once from the training
//! references) is what SCST uses: ruotianluo/cider's `CiderD(df='coco-train-idxs')`
//! loads `document_frequency` and `ref_len` from a pickle made by
//! self-critical.pytorch's `scripts/prepro_ngrams.py`, with `ref_len =
//! ln(#training images)`, and an n-gram missing from the table gets
//! `df = 0 → ln max(1, 0) = 0`. Both are reproduced here.
//!
//! **Differences between pycocoevalcap and ruotianluo/cider's `ciderD_scorer.py`:**
//! the per-image arithmetic is identical (same `counts2vec`, `sim`, clipping,
//! bigram length, σ = 6, ×10). They differ only in bookkeeping:
//! (1) ruotianluo's corpus mode iterates over the *candidate* list, so when
//! several samples of one image are scored together (as `get_self_critical_reward`
//! does) that image's references are counted once per sample in df and `N`
//! is the number of candidates, whereas pycocoevalcap keys by image id and
//! counts each image once; [`cider_corpus`] follows pycocoevalcap (one entry
//! per image). (2) ruotianluo supports the precomputed df above.
//! (3) self-critical.pytorch appends the `<eos>` id (0) to every reference
//! and to every candidate that finished (`array_to_str` keeps the
//! terminating 0) before scoring, so its df tables contain n-grams ending in
//! `<eos>`; a caller that wants bit-for-bit the same rewards appends
//! [`EOS_MARK`](super::eos::EOS_MARK) the same way both when building the
//! [`DocFreq`] and when scoring (the [`eos`](super::eos) module; the reward
//! worker's `reward.cider_eos`). Evaluation scores stay pycocoevalcap's,
//! without it.
//!
//! **Speed.** References are turned into tf-idf vectors and norms once per
//! image ([`CiderD::prepare`]) and reused for every sample of that image.
//! A candidate's n-grams are packed integer keys, counted by sorting in a
//! per-thread scratch buffer and merge-joined with the image's sorted union
//! of reference n-grams, so scoring allocates nothing once the thread's
//! buffers have grown. [`CiderD::score_batch`] runs images in parallel on
//! rayon's pool when asked.

use std::cell::RefCell;

use rayon::prelude::*;

use super::corpus::{score_corpus, DfSource, FlatCorpus, Metrics};
use super::df::DocFreq;
use super::ngrams::{count_sorted, push_ngrams, KeyMap, NgramKey, MAX_ORDER};

/// Standard deviation of the Gaussian length penalty.
pub const SIGMA: f64 = 6.0;

/// A CIDEr-D scorer with a fixed document-frequency table.
#[derive(Debug, Clone)]
pub struct CiderD {
    /// `df` per n-gram.
    df: KeyMap<u32>,
    /// `ln max(1, k)` for `k = 0..=N`, so `idf` needs no `ln` per lookup.
    ln_table: Vec<f64>,
    /// `ln N`.
    ref_len: f64,
    num_images: usize,
}

/// The references of one image turned into tf-idf vectors, once.
#[derive(Debug, Clone, Default)]
pub struct PreparedRefs {
    nrefs: usize,
    /// Sorted union of the references' n-grams, per order.
    keys: [Vec<NgramKey>; MAX_ORDER],
    /// `ln N − ln max(1, df)` of each union key.
    idf: [Vec<f64>; MAX_ORDER],
    /// tf-idf of union key `j` in reference `r`, at `j * nrefs + r`.
    weights: [Vec<f64>; MAX_ORDER],
    /// `‖g_n(s_r)‖` per reference.
    norms: Vec<[f64; MAX_ORDER]>,
    /// Bigram count per reference (the penalty's length, see module docs).
    lens: Vec<i64>,
}

#[derive(Default)]
struct Scratch {
    keys: Vec<NgramKey>,
    counts: Vec<(NgramKey, u32)>,
    acc: Vec<[f64; MAX_ORDER]>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Bigram count of a sentence of `len` words.
#[inline]
fn bigram_len(len: usize) -> i64 {
    len.saturating_sub(1) as i64
}

impl CiderD {
    /// A scorer using `df` (precomputed from training references, or built
    /// from the set being scored for corpus mode).
    pub fn new(df: DocFreq) -> Self {
        let max_df = df.df.values().copied().max().unwrap_or(0) as usize;
        let ln_table = (0..=max_df.max(df.num_images))
            .map(|k| (k as f64).max(1.0).ln())
            .collect();
        Self {
            df: df.df,
            ln_table,
            ref_len: (df.num_images as f64).ln(),
            num_images: df.num_images,
        }
    }

    /// A scorer where every n-gram has idf 1 (tf-only vectors), for
    /// comparing captions with no corpus behind them.
    pub(crate) fn uniform_idf() -> Self {
        Self {
            df: KeyMap::default(),
            ln_table: vec![0.0],
            ref_len: 1.0,
            num_images: 0,
        }
    }

    /// Number of images the df table was counted over (`N`).
    pub fn num_images(&self) -> usize {
        self.num_images
    }

    #[inline]
    fn idf(&self, key: NgramKey) -> f64 {
        let df = self.df.get(&key).copied().unwrap_or(0) as usize;
        self.ref_len - self.ln_table[df]
    }

    /// Turns the references of one image into tf-idf vectors and norms.
    pub fn prepare<R: AsRef<[u32]>>(&self, refs: &[R]) -> PreparedRefs {
        let nrefs = refs.len();
        let mut out = PreparedRefs {
            nrefs,
            norms: vec![[0.0; MAX_ORDER]; nrefs],
            lens: refs.iter().map(|r| bigram_len(r.as_ref().len())).collect(),
            ..PreparedRefs::default()
        };
        let mut keys = Vec::new();
        let mut per_ref: Vec<Vec<(NgramKey, u32)>> = vec![Vec::new(); nrefs];
        for n in 0..MAX_ORDER {
            let mut union = Vec::new();
            for (r, sentence) in refs.iter().enumerate() {
                keys.clear();
                push_ngrams(sentence.as_ref(), n + 1, &mut keys);
                count_sorted(&mut keys, &mut per_ref[r]);
                union.extend(per_ref[r].iter().map(|&(k, _)| k));
            }
            union.sort_unstable();
            union.dedup();
            let idf: Vec<f64> = union.iter().map(|&k| self.idf(k)).collect();
            let mut weights = vec![0.0; union.len() * nrefs];
            for (r, counts) in per_ref.iter().enumerate() {
                let mut norm2 = 0.0;
                let mut j = 0;
                for &(k, tf) in counts {
                    while union[j] < k {
                        j += 1;
                    }
                    let w = f64::from(tf) * idf[j];
                    weights[j * nrefs + r] = w;
                    norm2 += w * w;
                }
                out.norms[r][n] = norm2.sqrt();
            }
            out.keys[n] = union;
            out.idf[n] = idf;
            out.weights[n] = weights;
        }
        out
    }

    /// CIDEr-D of `cand` against prepared references (0 when the image has
    /// no references; pycocoevalcap refuses that case).
    pub fn score(&self, refs: &PreparedRefs, cand: &[u32]) -> f64 {
        let nrefs = refs.nrefs;
        if nrefs == 0 {
            return 0.0;
        }
        SCRATCH.with(|s| {
            let mut guard = s.borrow_mut();
            let Scratch { keys, counts, acc } = &mut *guard;
            acc.clear();
            acc.resize(nrefs, [0.0; MAX_ORDER]);
            let mut cand_norm = [0.0; MAX_ORDER];
            for n in 0..MAX_ORDER {
                keys.clear();
                push_ngrams(cand, n + 1, keys);
                count_sorted(keys, counts);
                let ukeys = &refs.keys[n];
                let weights = &refs.weights[n];
                let mut j = 0;
                let mut norm2 = 0.0;
                for &(k, tf) in counts.iter() {
                    while j < ukeys.len() && ukeys[j] < k {
                        j += 1;
                    }
                    let hit = j < ukeys.len() && ukeys[j] == k;
                    let idf = if hit { refs.idf[n][j] } else { self.idf(k) };
                    let vh = f64::from(tf) * idf;
                    norm2 += vh * vh;
                    if hit {
                        let row = &weights[j * nrefs..(j + 1) * nrefs];
                        for (a, &wr) in acc.iter_mut().zip(row) {
                            a[n] += vh.min(wr) * wr;
                        }
                    }
                }
                cand_norm[n] = norm2.sqrt();
            }
            let cand_len = bigram_len(cand.len());
            let mut per_order = [0.0; MAX_ORDER];
            for ((a, &len), norms) in acc.iter().zip(&refs.lens).zip(&refs.norms) {
                let delta = (cand_len - len) as f64;
                let penalty = (-(delta * delta) / (2.0 * SIGMA * SIGMA)).exp();
                for n in 0..MAX_ORDER {
                    let mut val = a[n];
                    let norm_ref = norms[n];
                    if cand_norm[n] != 0.0 && norm_ref != 0.0 {
                        val /= cand_norm[n] * norm_ref;
                    }
                    per_order[n] += val * penalty;
                }
            }
            let mean = per_order.iter().sum::<f64>() / MAX_ORDER as f64;
            mean / nrefs as f64 * 10.0
        })
    }

    /// Scores `cands[i]` against `refs[i]`, on rayon's pool when `parallel`.
    ///
    /// # Panics
    /// If `refs` and `cands` differ in length.
    pub fn score_batch<C>(&self, refs: &[&PreparedRefs], cands: &[C], parallel: bool) -> Vec<f64>
    where
        C: AsRef<[u32]> + Sync,
    {
        assert_eq!(
            refs.len(),
            cands.len(),
            "score_batch: one prepared reference set per candidate"
        );
        if parallel {
            refs.par_iter()
                .zip(cands.par_iter())
                .with_min_len(64)
                .map(|(r, c)| self.score(r, c.as_ref()))
                .collect()
        } else {
            refs.iter()
                .zip(cands)
                .map(|(r, c)| self.score(r, c.as_ref()))
                .collect()
        }
    }
}

/// CIDEr-D in corpus mode: df from `refs` (one entry per image), the mean
/// over images and the per-image scores, as pycocoevalcap's
/// `Cider().compute_score(gts, res)`. Computed on dense n-gram ids (see
/// the `corpus` module), on one thread.
///
/// # Panics
/// If `refs` and `cands` differ in length.
pub fn cider_corpus<C: AsRef<[u32]> + Sync>(
    refs: &[Vec<Vec<u32>>],
    cands: &[C],
) -> (f64, Vec<f64>) {
    cider_corpus_parallel(refs, cands, false)
}

/// [`cider_corpus`], scoring the images on rayon's pool when `parallel`.
///
/// # Panics
/// If `refs` and `cands` differ in length.
pub fn cider_corpus_parallel<C: AsRef<[u32]> + Sync>(
    refs: &[Vec<Vec<u32>>],
    cands: &[C],
    parallel: bool,
) -> (f64, Vec<f64>) {
    assert_eq!(
        refs.len(),
        cands.len(),
        "cider_corpus: one reference set per candidate"
    );
    let corpus = FlatCorpus::from_nested(refs, cands);
    let metrics = Metrics {
        bleu: false,
        rouge: false,
    };
    let scores: Vec<f64> = score_corpus(&corpus, DfSource::Corpus, metrics, parallel)
        .into_iter()
        .map(|r| r.cider)
        .collect();
    (mean(&scores), scores)
}

pub(crate) fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        0.0
    } else {
        xs.iter().sum::<f64>() / xs.len() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_caption_scores_ten_against_single_ref() {
        let refs = vec![vec![vec![1, 2, 3, 4, 5]], vec![vec![6, 7, 8]]];
        let (_, s) = cider_corpus(&refs, &[vec![1, 2, 3, 4, 5], vec![9]]);
        assert!((s[0] - 10.0).abs() < 1e-12, "{}", s[0]);
        assert_eq!(s[1], 0.0);
    }

    #[test]
    fn empty_candidate_and_no_refs_score_zero() {
        let scorer = CiderD::new(DocFreq::from_refs(&[vec![vec![1, 2]]]));
        let p = scorer.prepare(&[vec![1u32, 2]]);
        assert_eq!(scorer.score(&p, &[]), 0.0);
        let none = scorer.prepare::<Vec<u32>>(&[]);
        assert_eq!(scorer.score(&none, &[1, 2]), 0.0);
    }
}
