//! Scoring a whole corpus at once on dense n-gram ids (the fast path behind
//! [`cider_corpus`](super::cider_corpus) and [`score_captions`](super::score_captions)).
//!
//! Hashing every n-gram of every sentence into one large table is what made
//! corpus scoring slow: ~1M distinct n-grams for a 5,000 × 5 set, each
//! lookup a cache miss. Here every n-gram gets a dense `u32` id per order
//! instead, without any hash table:
//!
//! ```text
//! id_1(p)     = token(p)
//! id_n(p)     = rank of the pair (id_{n−1}(p), token(p + n − 1)) among all such pairs   (n = 2..4)
//! ```
//!
//! The pairs of one order are packed with their position into one `u64` and
//! sorted with an LSD radix sort (sequential passes, cache friendly); equal
//! pairs are then adjacent and get the same id. Two positions have the same
//! `id_n` exactly when their n-grams are equal. Document frequencies are an
//! array per order (`df[id]`, counted once per image with a last-seen stamp),
//! idf is `ln N − ln max(1, df)` per id, and every per-image computation
//! (CIDEr-D, BLEU's clipped counts, ROUGE-L) works on small sorted
//! `(id, count)` lists in per-thread scratch buffers, reading the same flat
//! token buffer. The formulas are those of [`cider`](super::cider),
//! [`bleu`](super::bleu) and [`rouge`](super::rouge), unchanged.

use std::cell::RefCell;

use rayon::prelude::*;

use super::bleu::BleuStats;
use super::cider::SIGMA;
use super::df::DocFreq;
use super::ngrams::{pack, MAX_ORDER};
use super::rouge::rouge_l_slices;

/// Where CIDEr-D's document frequencies come from.
#[derive(Clone, Copy)]
pub(crate) enum DfSource<'a> {
    /// Counted over the references of the corpus itself (pycocoevalcap).
    Corpus,
    /// A precomputed table (SCST's training-set df).
    Table(&'a DocFreq),
}

/// Which metrics to compute besides CIDEr-D.
#[derive(Clone, Copy)]
pub(crate) struct Metrics {
    pub bleu: bool,
    pub rouge: bool,
}

/// The scores of one image.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ImageResult {
    pub cider: f64,
    pub rouge: f64,
    pub bleu: BleuStats,
}

/// Reference and candidate sentences in one flat token buffer: the
/// references of image `j` are sentences `ref_start[j]..ref_start[j + 1]`,
/// its candidate is sentence `num_ref_sentences + j`.
#[derive(Debug, Default)]
pub(crate) struct FlatCorpus {
    tokens: Vec<u32>,
    /// Sentence `s` is `tokens[starts[s]..starts[s + 1]]`.
    starts: Vec<u32>,
    ref_start: Vec<u32>,
    cands_started: bool,
}

impl FlatCorpus {
    pub(crate) fn with_capacity(images: usize, sentences: usize, tokens: usize) -> Self {
        let mut starts = Vec::with_capacity(sentences + 1);
        starts.push(0);
        let mut ref_start = Vec::with_capacity(images + 1);
        ref_start.push(0);
        Self {
            tokens: Vec::with_capacity(tokens),
            starts,
            ref_start,
            cands_started: false,
        }
    }

    /// From nested vectors (one reference set per candidate).
    pub(crate) fn from_nested<R: AsRef<[u32]>, C: AsRef<[u32]>>(
        refs: &[Vec<R>],
        cands: &[C],
    ) -> Self {
        let sentences = refs.iter().map(Vec::len).sum::<usize>() + cands.len();
        let tokens = refs
            .iter()
            .flatten()
            .map(|s| s.as_ref().len())
            .sum::<usize>()
            + cands.iter().map(|c| c.as_ref().len()).sum::<usize>();
        let mut out = Self::with_capacity(refs.len(), sentences, tokens);
        for image in refs {
            for s in image {
                out.push_sentence(s.as_ref().iter().copied());
            }
            out.end_image_refs();
        }
        for c in cands {
            out.push_sentence(c.as_ref().iter().copied());
        }
        out
    }

    /// Appends one sentence (a reference until the first candidate is
    /// pushed after [`FlatCorpus::end_image_refs`] of the last image).
    pub(crate) fn push_sentence(&mut self, words: impl IntoIterator<Item = u32>) {
        self.tokens.extend(words);
        self.starts.push(len_u32(self.tokens.len()));
    }

    /// Closes the reference set of the current image.
    pub(crate) fn end_image_refs(&mut self) {
        debug_assert!(!self.cands_started);
        self.ref_start.push(len_u32(self.starts.len() - 1));
    }

    fn num_images(&self) -> usize {
        self.ref_start.len() - 1
    }

    fn num_ref_sentences(&self) -> usize {
        self.ref_start[self.num_images()] as usize
    }

    #[inline]
    fn range(&self, s: usize) -> std::ops::Range<usize> {
        self.starts[s] as usize..self.starts[s + 1] as usize
    }
}

fn len_u32(n: usize) -> u32 {
    u32::try_from(n).expect("corpus larger than u32::MAX tokens")
}

/// Bits needed to store values `< n`.
fn bits_for(n: u64) -> u32 {
    64 - n.saturating_sub(1).leading_zeros()
}

/// LSD radix sort of `v` by bits `lo..hi` only (stable, so the lower bits
/// keep their input order), 11 bits per pass.
fn radix_sort(v: &mut Vec<u64>, buf: &mut Vec<u64>, lo: u32, hi: u32) {
    const DIGIT: u32 = 11;
    let mut count = vec![0usize; 1 << DIGIT];
    let mut shift = lo;
    buf.clear();
    buf.resize(v.len(), 0);
    while shift < hi {
        let bits = DIGIT.min(hi - shift);
        let mask = (1u64 << bits) - 1;
        let count = &mut count[..1 << bits];
        count.fill(0);
        for &x in v.iter() {
            count[((x >> shift) & mask) as usize] += 1;
        }
        let mut sum = 0;
        for c in count.iter_mut() {
            let k = *c;
            *c = sum;
            sum += k;
        }
        for &x in v.iter() {
            let d = ((x >> shift) & mask) as usize;
            buf[count[d]] = x;
            count[d] += 1;
        }
        std::mem::swap(v, buf);
        shift += bits;
    }
}

/// Dense n-gram ids and idf per order for a [`FlatCorpus`].
struct NgramIds {
    /// `ids[n][p]`: id of the (n+1)-gram starting at token `p` (valid where
    /// it fits in its sentence). `ids[0]` is empty: unigram ids are tokens.
    ids: [Vec<u32>; MAX_ORDER],
    /// `pos_idf[n][p]`: idf of the (n+1)-gram starting at token `p`,
    /// gathered once in a tight loop so per-image work reads it in order.
    pos_idf: [Vec<f64>; MAX_ORDER],
}

/// Sort buffers reused across n-gram orders.
#[derive(Default)]
struct SortScratch {
    keys: Vec<u64>,
    buf: Vec<u64>,
    wide: Vec<(u64, u32)>,
}

/// The ids of the corpus's (n+1)-grams, one per start position (`prev`: the n-grams' ids,
/// `num_prev` of them; `vocab`: one more than the largest token), numbered in sorted order of (prefix id, last token), and a position
/// where each id first occurs. Keys that fit 64 bits with their position are radix-sorted;
/// wider ones sorted as pairs.
fn order_ids(
    corpus: &FlatCorpus,
    n: usize,
    prev: &[u32],
    num_prev: usize,
    vocab: usize,
    scratch: &mut SortScratch,
) -> (Vec<u32>, Vec<u32>) {
    let tokens = &corpus.tokens;
    let nsent = corpus.starts.len() - 1;
    let pos_bits = bits_for(tokens.len() as u64 + 1);
    let tok_bits = bits_for(vocab as u64);
    let prefix_bits = bits_for(num_prev as u64);
    let key_bits = prefix_bits + tok_bits;
    let mut cur = vec![0u32; tokens.len()];
    let mut firsts = Vec::new();
    let prefix = |p: usize| if n == 1 { tokens[p] } else { prev[p] };
    let mut next_id: u32 = 0;
    let SortScratch { keys, buf, wide } = scratch;
    if key_bits + pos_bits <= 64 {
        keys.clear();
        for s in 0..nsent {
            let r = corpus.range(s);
            if r.len() <= n {
                continue;
            }
            for p in r.start..r.end - n {
                let key = (u64::from(prefix(p)) << tok_bits) | u64::from(tokens[p + n]);
                keys.push((key << pos_bits) | p as u64);
            }
        }
        radix_sort(keys, buf, pos_bits, pos_bits + key_bits);
        let pos_mask = (1u64 << pos_bits) - 1;
        let mut last = u64::MAX;
        for &x in keys.iter() {
            let key = x >> pos_bits;
            let p = (x & pos_mask) as usize;
            if key != last {
                last = key;
                next_id += 1;
                firsts.push(p as u32);
            }
            cur[p] = next_id - 1;
        }
    } else {
        wide.clear();
        for s in 0..nsent {
            let r = corpus.range(s);
            if r.len() <= n {
                continue;
            }
            for p in r.start..r.end - n {
                let key = (u64::from(prefix(p)) << 32) | u64::from(tokens[p + n]);
                wide.push((key, p as u32));
            }
        }
        wide.sort_unstable();
        let mut last = None;
        for &(key, p) in wide.iter() {
            if last != Some(key) {
                last = Some(key);
                next_id += 1;
                firsts.push(p);
            }
            cur[p as usize] = next_id - 1;
        }
    }
    (cur, firsts)
}

impl NgramIds {
    fn build(corpus: &FlatCorpus, df_source: DfSource<'_>) -> Self {
        let tokens = &corpus.tokens;
        let vocab = tokens.iter().copied().max().map_or(0, |m| m as usize + 1);
        let mut ids: [Vec<u32>; MAX_ORDER] = Default::default();
        // A position where each id occurs (for table lookups).
        let mut first_pos: [Vec<u32>; MAX_ORDER] = Default::default();
        let mut num_ids = [0usize; MAX_ORDER];
        num_ids[0] = vocab;
        let mut scratch = SortScratch::default();
        for n in 1..MAX_ORDER {
            let prev = &ids[n - 1];
            let (cur, firsts) = order_ids(corpus, n, prev, num_ids[n - 1], vocab, &mut scratch);
            num_ids[n] = firsts.len();
            ids[n] = cur;
            first_pos[n] = firsts;
        }

        let num_images = match df_source {
            DfSource::Corpus => corpus.num_images(),
            DfSource::Table(t) => t.num_images(),
        };
        let ref_len = (num_images as f64).ln();
        let ln_table: Vec<f64> = (0..=num_images).map(|k| (k as f64).max(1.0).ln()).collect();
        let pos_idf = std::array::from_fn(|n| {
            let df: Vec<u32> = match df_source {
                DfSource::Corpus => corpus_df(corpus, n, num_ids[n], &ids[n]),
                DfSource::Table(t) => (0..num_ids[n])
                    .map(|id| {
                        let key = if n == 0 {
                            pack(&[id as u32])
                        } else {
                            let p = first_pos[n][id] as usize;
                            pack(&tokens[p..=p + n])
                        };
                        t.df.get(&key).copied().unwrap_or(0)
                    })
                    .collect(),
            };
            let idf: Vec<f64> = df
                .iter()
                .map(|&d| ref_len - ln_table[(d as usize).min(num_images)])
                .collect();
            if idf.is_empty() {
                return vec![0.0; tokens.len()];
            }
            let src = if n == 0 { &tokens[..] } else { &ids[n][..] };
            src.iter().map(|&id| idf[id as usize]).collect()
        });
        Self { ids, pos_idf }
    }

    /// The ids and idfs of the (n+1)-grams of sentence range `r`.
    #[inline]
    fn sentence_ids<'a>(
        &'a self,
        tokens: &'a [u32],
        n: usize,
        r: std::ops::Range<usize>,
    ) -> (&'a [u32], &'a [f64]) {
        if r.len() <= n {
            return (&[], &[]);
        }
        let src = if n == 0 { tokens } else { &self.ids[n] };
        let end = r.end - n;
        (&src[r.start..end], &self.pos_idf[n][r.start..end])
    }
}

/// Number of images whose references contain each (n+1)-gram id.
fn corpus_df(corpus: &FlatCorpus, n: usize, num_ids: usize, ids: &[u32]) -> Vec<u32> {
    // [last image seen + 1, df], side by side for one cache line per id.
    let mut acc = vec![[0u32; 2]; num_ids];
    let src = if n == 0 { &corpus.tokens[..] } else { ids };
    for j in 0..corpus.num_images() {
        let stamp = j as u32 + 1;
        for s in corpus.ref_start[j] as usize..corpus.ref_start[j + 1] as usize {
            let r = corpus.range(s);
            if r.len() <= n {
                continue;
            }
            for &id in &src[r.start..r.end - n] {
                let a = &mut acc[id as usize];
                if a[0] != stamp {
                    a[0] = stamp;
                    a[1] += 1;
                }
            }
        }
    }
    acc.into_iter().map(|a| a[1]).collect()
}

#[derive(Default)]
struct Scratch {
    sort: Vec<u64>,
    /// Sorted (id, count, idf) lists: candidate first, then each reference.
    counts: Vec<Count>,
    /// `bounds[i]..bounds[i + 1]` is list `i` of `counts`.
    bounds: Vec<usize>,
    max_ref: Vec<u32>,
    acc: Vec<f64>,
    ref_norm: Vec<f64>,
    row: Vec<u32>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// One distinct n-gram of a sentence.
#[derive(Clone, Copy)]
struct Count {
    id: u32,
    tf: u32,
    idf: f64,
}

/// Appends the distinct n-grams of `ids` (with their idfs `idfs`) to `out`,
/// sorted by id.
#[inline]
fn push_counts((ids, idfs): (&[u32], &[f64]), sort: &mut Vec<u64>, out: &mut Vec<Count>) {
    sort.clear();
    for (i, &id) in ids.iter().enumerate() {
        sort.push((u64::from(id) << 32) | i as u64);
    }
    sort.sort_unstable();
    let start = out.len();
    for &k in sort.iter() {
        let id = (k >> 32) as u32;
        let len = out.len();
        if len > start && out[len - 1].id == id {
            out[len - 1].tf += 1;
        } else {
            out.push(Count {
                id,
                tf: 1,
                idf: idfs[(k & 0xffff_ffff) as usize],
            });
        }
    }
}

/// Bigram count of a sentence of `len` words (CIDEr-D's length, see
/// [`cider`](super::cider)).
#[inline]
fn bigram_len(len: usize) -> i64 {
    len.saturating_sub(1) as i64
}

fn score_image(
    corpus: &FlatCorpus,
    ids: &NgramIds,
    metrics: Metrics,
    j: usize,
    s: &mut Scratch,
) -> ImageResult {
    let tokens = &corpus.tokens;
    let refs = corpus.ref_start[j] as usize..corpus.ref_start[j + 1] as usize;
    let nrefs = refs.len();
    let cand_r = corpus.range(corpus.num_ref_sentences() + j);
    let cand = &tokens[cand_r.clone()];
    let mut out = ImageResult::default();
    if metrics.bleu {
        let testlen = cand.len();
        out.bleu.testlen = testlen;
        out.bleu.reflen = refs
            .clone()
            .map(|r| corpus.range(r).len())
            .min_by_key(|&l| (l.abs_diff(testlen), l))
            .unwrap_or(0);
        for (n, g) in out.bleu.guess.iter_mut().enumerate() {
            *g = (testlen + 1).saturating_sub(n + 1);
        }
    }
    if metrics.rouge {
        out.rouge = rouge_l_slices(
            cand,
            refs.clone().map(|r| &tokens[corpus.range(r)]),
            &mut s.row,
        );
    }
    if nrefs == 0 {
        return out;
    }
    s.acc.clear();
    s.acc.resize(nrefs * MAX_ORDER, 0.0);
    s.ref_norm.clear();
    s.ref_norm.resize(nrefs * MAX_ORDER, 0.0);
    let mut cand_norm = [0.0; MAX_ORDER];
    for (n, cn) in cand_norm.iter_mut().enumerate() {
        s.counts.clear();
        s.bounds.clear();
        s.bounds.push(0);
        push_counts(
            ids.sentence_ids(tokens, n, cand_r.clone()),
            &mut s.sort,
            &mut s.counts,
        );
        s.bounds.push(s.counts.len());
        for r in refs.clone() {
            push_counts(
                ids.sentence_ids(tokens, n, corpus.range(r)),
                &mut s.sort,
                &mut s.counts,
            );
            s.bounds.push(s.counts.len());
        }
        let (cand_counts, ref_counts) = s.counts.split_at(s.bounds[1]);
        let mut norm2 = 0.0;
        for c in cand_counts {
            let v = f64::from(c.tf) * c.idf;
            norm2 += v * v;
        }
        *cn = norm2.sqrt();
        if metrics.bleu {
            s.max_ref.clear();
            s.max_ref.resize(cand_counts.len(), 0);
        }
        for r in 0..nrefs {
            let list = &ref_counts[s.bounds[r + 1] - s.bounds[1]..s.bounds[r + 2] - s.bounds[1]];
            let mut rnorm2 = 0.0;
            let mut dot = 0.0;
            let mut i = 0;
            for &Count { id: k, tf, idf } in list {
                let wr = f64::from(tf) * idf;
                rnorm2 += wr * wr;
                while i < cand_counts.len() && cand_counts[i].id < k {
                    i += 1;
                }
                if i < cand_counts.len() && cand_counts[i].id == k {
                    let wc = f64::from(cand_counts[i].tf) * idf;
                    dot += wc.min(wr) * wr;
                    if metrics.bleu {
                        s.max_ref[i] = s.max_ref[i].max(tf);
                    }
                }
            }
            s.acc[r * MAX_ORDER + n] = dot;
            s.ref_norm[r * MAX_ORDER + n] = rnorm2.sqrt();
        }
        if metrics.bleu {
            out.bleu.correct[n] = cand_counts
                .iter()
                .zip(&s.max_ref)
                .map(|(c, &m)| c.tf.min(m) as usize)
                .sum();
        }
    }
    out.cider = cider_d(corpus, refs, cand.len(), &cand_norm, s);
    out
}

/// CIDEr-D of a candidate of `cand_words` words from the per-reference, per-order clipped dot
/// products and norms in `s` (`acc`, `ref_norm`) and the candidate's norms: each order's
/// cosine, Gaussian length penalty, averaged over orders and references, times 10.
fn cider_d(
    corpus: &FlatCorpus,
    refs: std::ops::Range<usize>,
    cand_words: usize,
    cand_norm: &[f64; MAX_ORDER],
    s: &Scratch,
) -> f64 {
    let nrefs = refs.len();
    let cand_len = bigram_len(cand_words);
    let mut per_order = [0.0; MAX_ORDER];
    for (r, sent) in refs.enumerate() {
        let delta = (cand_len - bigram_len(corpus.range(sent).len())) as f64;
        let penalty = (-(delta * delta) / (2.0 * SIGMA * SIGMA)).exp();
        for n in 0..MAX_ORDER {
            let mut val = s.acc[r * MAX_ORDER + n];
            let norm_ref = s.ref_norm[r * MAX_ORDER + n];
            if cand_norm[n] != 0.0 && norm_ref != 0.0 {
                val /= cand_norm[n] * norm_ref;
            }
            per_order[n] += val * penalty;
        }
    }
    let mean = per_order.iter().sum::<f64>() / MAX_ORDER as f64;
    mean / nrefs as f64 * 10.0
}

/// Scores every image of `corpus`: CIDEr-D always, BLEU counts and
/// ROUGE-L as asked; on rayon's pool when `parallel`.
pub(crate) fn score_corpus(
    corpus: &FlatCorpus,
    df: DfSource<'_>,
    metrics: Metrics,
    parallel: bool,
) -> Vec<ImageResult> {
    let ids = NgramIds::build(corpus, df);
    let one =
        |j: usize| SCRATCH.with(|s| score_image(corpus, &ids, metrics, j, &mut s.borrow_mut()));
    let n = corpus.num_images();
    if parallel {
        let mut out = vec![ImageResult::default(); n];
        out.par_iter_mut()
            .enumerate()
            .with_min_len(64)
            .for_each(|(j, o)| *o = one(j));
        out
    } else {
        (0..n).map(one).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn radix_sort_orders_by_key_bits_and_keeps_low_bits_stable() {
        let mut v = vec![(3 << 8) | 1, (1 << 8) | 7, 3 << 8, (2 << 8) | 5];
        let mut buf = Vec::new();
        radix_sort(&mut v, &mut buf, 8, 30);
        assert_eq!(v, vec![(1 << 8) | 7, (2 << 8) | 5, (3 << 8) | 1, 3 << 8]);
    }

    #[test]
    fn equal_ngrams_get_equal_ids() {
        let corpus =
            FlatCorpus::from_nested(&[vec![vec![1u32, 2, 3, 1, 2, 3]]], &[vec![2u32, 3, 1]]);
        let ids = NgramIds::build(&corpus, DfSource::Corpus);
        assert_eq!(ids.ids[1][0], ids.ids[1][3], "bigram 1 2");
        assert_eq!(
            ids.ids[2][1], ids.ids[2][6],
            "trigram 2 3 1 in ref and cand"
        );
        assert_ne!(ids.ids[2][0], ids.ids[2][1]);
    }
}
