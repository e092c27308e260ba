//! Scoring caption text held in memory: one reference set per candidate,
//! words split on whitespace. The one path from strings to scores, used by
//! [`score_captions`](super::score_captions) (files) and by the `caprl` Python module.

use super::bleu::BleuStats;
use super::corpus::{score_corpus, DfSource, FlatCorpus, Metrics};
use super::df::DocFreq;
use super::intern::Interner;

/// Where CIDEr-D's document frequencies come from.
#[derive(Debug, Clone, Copy)]
pub enum Idf<'a> {
    /// Counted over the reference sets being scored, each once, as
    /// pycocoevalcap's `Cider` does for evaluation.
    Corpus,
    /// A precomputed table: the training set's (SCST's `coco-train-idxs`), or
    /// one counted over another list of reference sets.
    Table(&'a DocFreq),
}

/// The metrics besides CIDEr-D (always computed) to compute.
#[derive(Debug, Clone, Copy, Default)]
pub struct Extra {
    /// BLEU-1..4 counts per image.
    pub bleu: bool,
    /// ROUGE-L per image.
    pub rouge: bool,
}

/// The scores of one candidate.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TextScores {
    /// CIDEr-D.
    pub cider: f64,
    /// ROUGE-L (0 unless asked for).
    pub rouge: f64,
    /// BLEU counts (empty unless asked for); [`BleuStats::add`] them for
    /// the corpus score.
    pub bleu: BleuStats,
}

/// Scores `cands[i]` against `refs[i]` for every `i`, on rayon's pool when
/// `parallel`. Candidates and references are split on whitespace; a
/// candidate with no references scores 0 (callers that must refuse it, as
/// pycocoevalcap does, check first).
///
/// # Panics
/// If `refs` and `cands` differ in length.
pub fn score_texts<R, S, C>(
    refs: &[R],
    cands: &[C],
    idf: Idf<'_>,
    extra: Extra,
    parallel: bool,
) -> Vec<TextScores>
where
    R: AsRef<[S]>,
    S: AsRef<str>,
    C: AsRef<str>,
{
    assert_eq!(
        refs.len(),
        cands.len(),
        "score_texts: one reference set per candidate"
    );
    let mut interner = match idf {
        Idf::Table(d) => Interner::with_words(d.words()),
        Idf::Corpus => Interner::new(),
    };
    let nref: usize = refs.iter().map(|r| r.as_ref().len()).sum();
    let mut corpus = FlatCorpus::with_capacity(cands.len(), nref + cands.len(), 12 * nref);
    for image in refs {
        for r in image.as_ref() {
            corpus.push_sentence(r.as_ref().split_whitespace().map(|w| interner.intern(w)));
        }
        corpus.end_image_refs();
    }
    for c in cands {
        corpus.push_sentence(c.as_ref().split_whitespace().map(|w| interner.intern(w)));
    }
    let source = match idf {
        Idf::Table(d) => DfSource::Table(d),
        Idf::Corpus => DfSource::Corpus,
    };
    let metrics = Metrics {
        bleu: extra.bleu,
        rouge: extra.rouge,
    };
    score_corpus(&corpus, source, metrics, parallel)
        .into_iter()
        .map(|r| TextScores {
            cider: r.cider,
            rouge: r.rouge,
            bleu: r.bleu,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_counted_over_the_same_sets_scores_as_corpus_mode() {
        let refs = [
            vec!["a man rides a horse", "a person on a horse"],
            vec!["two dogs play", "dogs in the grass"],
        ];
        let cands = ["a man on a horse", "two dogs in grass"];
        let corpus = score_texts(&refs, &cands, Idf::Corpus, Extra::default(), false);
        let mut interner = Interner::new();
        let ids: Vec<Vec<Vec<u32>>> = refs
            .iter()
            .map(|r| r.iter().map(|s| interner.intern_sentence(s)).collect())
            .collect();
        let table = DocFreq::from_refs(&ids).with_words(interner.into_words());
        let with_table = score_texts(&refs, &cands, Idf::Table(&table), Extra::default(), true);
        for (a, b) in corpus.iter().zip(&with_table) {
            assert!((a.cider - b.cider).abs() < 1e-12, "{a:?} vs {b:?}");
            assert!(a.cider > 0.0);
        }
    }
}
