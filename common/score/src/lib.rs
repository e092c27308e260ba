//! Text metrics for rewards and evaluation, equal to the reference
//! implementations (pycocoevalcap; the CIDEr-D scorer of
//! self-critical.pytorch) within 1e-6, and fast enough that reward workers
//! are never the bottleneck.
//!
//! Everything works on interned token ids ([`Interner`]); text is split on
//! whitespace only. pycocoevalcap first runs the Java PTB tokenizer
//! (lower-casing, splitting punctuation off words and dropping it, `n't`
//! and `'s` split off); callers that need the published numbers from raw
//! text must tokenise the same way first ([`tokenize`], the same rules in
//! Rust); on already-tokenised text the results are the same.
//!
//! - [`cider`] — CIDEr-D, corpus or precomputed df ([`DocFreq`]).
//! - [`eos`] — the `<eos>` marker of self-critical.pytorch's training CIDEr-D.
//! - [`bleu`] — BLEU-1..4, sentence and corpus.
//! - [`rouge`] — ROUGE-L.
//! - [`eval`] — score a REFS file against a CANDS file (`caprl score`).
//! - [`meteor`] — METEOR 1.5 through the jar pycocoevalcap ships (needs Java).
//! - [`diversity`] — Div-n, mBLEU-4, Self-BLEU, SLE's pairwise distance.
//! - [`tokenize`] — pycocoevalcap's PTB tokenisation and punctuation removal.
//! - [`bench_set`] — the captions the scoring benchmarks time.
//!
//! This crate needs no model, bus or data set: the `caprl` Python module
//! (`python/`) is built on it alone.

pub mod bench_set;
pub mod bleu;
pub mod cider;
mod corpus;
pub mod df;
pub mod diversity;
pub mod eos;
pub mod eval;
pub mod intern;
pub mod meteor;
pub mod ngrams;
pub mod rouge;
mod texts;
pub mod tokenize;

pub use bleu::{bleu_corpus, bleu_sentence, BleuStats};
pub use cider::{cider_corpus, cider_corpus_parallel, CiderD, PreparedRefs, SIGMA};
pub use df::{DfError, DocFreq, DocFreqBuilder};
pub use diversity::{div_n, mbleu4, pairwise_distances, self_bleu, Distance};
pub use eos::{refs_with_eos, with_eos, EOS_MARK};
pub use eval::{load_cands, load_refs, score_captions, EvalError, ImageScores, Report, Scores};
pub use intern::{Interner, LocalInterner};
pub use meteor::{locate_jar, meteor_corpus, Meteor, MeteorError};
pub use rouge::{rouge_l, rouge_l_corpus};
pub use texts::{score_texts, Extra, Idf, TextScores};
