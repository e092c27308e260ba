//! `caprl._native`: caprl's scorers for Python. The pycocoevalcap-shaped classes and
//! every check of the caller's input live in `python/caprl/score.py`; this module only
//! turns lists of strings into scores, with the GIL released while it scores.

use std::path::PathBuf;

use caprl_score::tokenize::tokenize;
use caprl_score::{
    score_texts, BleuStats, CiderD, DocFreq, DocFreqBuilder, Extra, Idf, Interner, LocalInterner,
    PreparedRefs,
};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};
use rayon::prelude::*;

/// Document frequencies of n-grams (CIDEr-D's idf) and the number of images they were
/// counted over.
#[pyclass(frozen, name = "DocFreq", module = "caprl._native")]
struct PyDocFreq {
    /// The table, ready to score: df lookups and `ln` precomputed.
    scorer: CiderD,
    /// The words of the table's ids.
    vocab: Interner,
    ngrams: usize,
}

impl PyDocFreq {
    fn new(table: DocFreq) -> Self {
        Self {
            vocab: Interner::with_words(table.words()),
            ngrams: table.len(),
            scorer: CiderD::new(table),
        }
    }
}

#[pymethods]
impl PyDocFreq {
    /// Reads a table written by `caprl data df` (its `train-df.bin`).
    #[staticmethod]
    fn load(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        let table = py
            .detach(|| DocFreq::load(&path))
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        if table.words().is_empty() && !table.is_empty() {
            return Err(PyValueError::new_err(format!(
                "{}: the table has no vocabulary, so words cannot be mapped to its n-grams; \
                 rebuild it with `caprl data df`",
                path.display()
            )));
        }
        Ok(py.detach(|| Self::new(table)))
    }

    /// Counts the table over `refs`, one entry per reference set (a set listed twice counts
    /// twice), over `len(refs)` images.
    #[staticmethod]
    fn count(py: Python<'_>, refs: Vec<Vec<String>>) -> Self {
        py.detach(|| {
            let mut interner = Interner::new();
            let ids: Vec<Vec<Vec<u32>>> = refs
                .iter()
                .map(|set| set.iter().map(|s| interner.intern_sentence(s)).collect())
                .collect();
            Self::new(DocFreq::from_refs(&ids).with_words(interner.into_words()))
        })
    }

    /// A table from self-critical.pytorch's df pickle: `document_frequency` maps n-gram
    /// tuples of 1 to 4 words to their counts, `ref_len` is the number of images.
    #[staticmethod]
    fn from_counts(document_frequency: &Bound<'_, PyDict>, ref_len: f64) -> PyResult<Self> {
        if !(ref_len >= 1.0 && ref_len.fract() == 0.0 && ref_len <= u32::MAX as f64) {
            return Err(PyValueError::new_err(format!(
                "ref_len is {ref_len}; it must be the number of images the document \
                 frequencies were counted over (a whole number, at least 1)"
            )));
        }
        let mut table = DocFreqBuilder::with_capacity(document_frequency.len());
        for (key, value) in document_frequency.iter() {
            let ngram = key.cast::<PyTuple>().map_err(|_| {
                PyTypeError::new_err(format!(
                    "document_frequency key {key} is not a tuple of words; self-critical.pytorch's \
                     tables map n-gram tuples such as ('a', 'dog') to counts"
                ))
            })?;
            let items: Vec<Bound<'_, PyAny>> = ngram.iter().collect();
            let mut words = Vec::with_capacity(items.len());
            for item in &items {
                let not_a_str = || {
                    PyTypeError::new_err(format!(
                        "document_frequency key {key} holds a word that is not a str"
                    ))
                };
                let word = item.cast::<PyString>().map_err(|_| not_a_str())?;
                words.push(word.to_str().map_err(|_| not_a_str())?);
            }
            let count: f64 = value.extract().map_err(|_| {
                PyTypeError::new_err(format!(
                    "document_frequency[{key}] = {value} is not a number"
                ))
            })?;
            if !(count >= 0.0 && count.fract() == 0.0 && count <= ref_len) {
                return Err(PyValueError::new_err(format!(
                    "document_frequency[{key}] = {count}: a document frequency counts images, \
                     so it must be a whole number from 0 to ref_len = {ref_len}"
                )));
            }
            table
                .add(&words, count as u32)
                .map_err(|e| PyValueError::new_err(e.to_string()))?;
        }
        Ok(Self::new(table.finish(ref_len as usize)))
    }

    /// The number of images the table was counted over (CIDEr-D's `ref_len` is its log).
    #[getter]
    fn num_images(&self) -> usize {
        self.scorer.num_images()
    }

    fn __len__(&self) -> usize {
        self.ngrams
    }

    fn __repr__(&self) -> String {
        format!(
            "DocFreq({} n-grams over {} images)",
            self.ngrams,
            self.scorer.num_images()
        )
    }
}

/// Per-candidate scores: CIDEr-D, ROUGE-L when asked (else None), and BLEU when asked:
/// (corpus BLEU-1..4, per-candidate BLEU-1..4), else None.
type Scored = (
    Vec<f64>,
    Option<Vec<f64>>,
    Option<([f64; 4], Vec<[f64; 4]>)>,
);

/// pycocoevalcap's scores of `cands[i]` against `refs[i]` (whitespace-split text), CIDEr-D's
/// document frequencies counted over `refs`, each set once.
#[pyfunction]
#[pyo3(signature = (refs, cands, bleu=false, rouge=false, parallel=true))]
fn score(
    py: Python<'_>,
    refs: Vec<Vec<String>>,
    cands: Vec<String>,
    bleu: bool,
    rouge: bool,
    parallel: bool,
) -> PyResult<Scored> {
    one_set_per_candidate(refs.len(), cands.len())?;
    Ok(py.detach(|| {
        let per = score_texts(&refs, &cands, Idf::Corpus, Extra { bleu, rouge }, parallel);
        let cider = per.iter().map(|s| s.cider).collect();
        let rouge = rouge.then(|| per.iter().map(|s| s.rouge).collect());
        let bleu = bleu.then(|| {
            let mut total = BleuStats::default();
            for s in &per {
                total.add(&s.bleu);
            }
            (
                total.scores(),
                per.iter().map(|s| s.bleu.scores()).collect(),
            )
        });
        (cider, rouge, bleu)
    }))
}

/// self-critical.pytorch's CIDEr-D of `cands[i]` against reference set `sets[which[i]]`
/// (samples of one image share their set, prepared once). With `df` None, the document
/// frequencies are counted over the candidates' sets, one per candidate (ruotianluo's
/// corpus mode).
#[pyfunction]
#[pyo3(signature = (sets, which, cands, df=None, parallel=true))]
fn ciderd(
    py: Python<'_>,
    sets: Vec<Vec<String>>,
    which: Vec<usize>,
    cands: Vec<String>,
    df: Option<PyRef<'_, PyDocFreq>>,
    parallel: bool,
) -> PyResult<Vec<f64>> {
    one_set_per_candidate(which.len(), cands.len())?;
    if let Some(&bad) = which.iter().find(|&&s| s >= sets.len()) {
        return Err(PyValueError::new_err(format!(
            "reference set {bad} named, only {} given",
            sets.len()
        )));
    }
    let table = df.as_deref();
    Ok(py.detach(|| match table {
        Some(t) => {
            let mut words = LocalInterner::new(&t.vocab);
            let (set_ids, cand_ids) = intern_texts(&sets, &cands, |w| words.intern(w));
            score_prepared(&t.scorer, &set_ids, &which, &cand_ids, parallel)
        }
        None => {
            let mut words = Interner::new();
            let (set_ids, cand_ids) = intern_texts(&sets, &cands, |w| words.intern(w));
            // ruotianluo's corpus df counts a reference set once per candidate that uses it.
            let mut uses = vec![0u32; set_ids.len()];
            for &s in &which {
                uses[s] += 1;
            }
            let scorer = CiderD::new(DocFreq::from_repeated_refs(&set_ids, |s| uses[s]));
            score_prepared(&scorer, &set_ids, &which, &cand_ids, parallel)
        }
    }))
}

fn one_set_per_candidate(sets: usize, cands: usize) -> PyResult<()> {
    if sets == cands {
        return Ok(());
    }
    Err(PyValueError::new_err(format!(
        "{sets} reference sets for {cands} candidates; give one set per candidate"
    )))
}

/// The reference sets and candidates as ids, words split on whitespace (`str.split()`).
type TextIds = (Vec<Vec<Vec<u32>>>, Vec<Vec<u32>>);

fn intern_texts(
    sets: &[Vec<String>],
    cands: &[String],
    mut intern: impl FnMut(&str) -> u32,
) -> TextIds {
    let mut sentence =
        |text: &String| -> Vec<u32> { text.split_whitespace().map(&mut intern).collect() };
    let set_ids = sets
        .iter()
        .map(|set| set.iter().map(&mut sentence).collect())
        .collect();
    let cand_ids = cands.iter().map(&mut sentence).collect();
    (set_ids, cand_ids)
}

/// Fewer captions than this are scored on the calling thread even with `parallel`: at an SCST
/// batch (60–300 captions) handing the work to threads cost more than it saved (300 captions,
/// corpus df: 2.29 ms with threads, 2.18 ms without, on a 2-core AMD EPYC).
const PARALLEL_FROM: usize = 1024;

fn score_prepared(
    scorer: &CiderD,
    set_ids: &[Vec<Vec<u32>>],
    which: &[usize],
    cand_ids: &[Vec<u32>],
    parallel: bool,
) -> Vec<f64> {
    let parallel = parallel && cand_ids.len() >= PARALLEL_FROM;
    let prepared: Vec<PreparedRefs> = if parallel {
        set_ids.par_iter().map(|s| scorer.prepare(s)).collect()
    } else {
        set_ids.iter().map(|s| scorer.prepare(s)).collect()
    };
    let refs: Vec<&PreparedRefs> = which.iter().map(|&s| &prepared[s]).collect();
    scorer.score_batch(&refs, cand_ids, parallel)
}

/// pycocoevalcap's PTB tokenisation and punctuation removal, words joined by spaces.
#[pyfunction]
fn ptb_tokenize(py: Python<'_>, captions: Vec<String>) -> Vec<String> {
    py.detach(|| captions.iter().map(|c| tokenize(c).join(" ")).collect())
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyDocFreq>()?;
    m.add_function(wrap_pyfunction!(score, m)?)?;
    m.add_function(wrap_pyfunction!(ciderd, m)?)?;
    m.add_function(wrap_pyfunction!(ptb_tokenize, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
