//! The ceilings of a generated task, computed once at generation and stored beside the data
//! (`ceilings.json`; `caprl data stats` prints them):
//!
//! - **human**: each reference scored against the other four, averaged over the five, as the
//!   COCO human baseline (so with four references, where models are scored against five);
//! - **oracle**: per image the best of the captions written from the true facts
//!   ([`super::annotators::oracle_candidates`]) by CIDEr-D, and the BLEU-4 of those captions.
//!
//! Both on the test split, scored as `caprl eval` scores (pycocoevalcap's CIDEr-D and BLEU-4,
//! document frequencies from the scored images' references, no `<eos>`), on all test images
//! and on each subset.

use std::collections::BTreeMap;

use caprl_score::{bleu_corpus, cider_corpus, Interner};
use serde::Serialize;

use crate::tokenize;

/// CIDEr-D and BLEU-4 of one ceiling.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Scores {
    pub cider_d: f64,
    pub bleu4: f64,
}

/// One group of images: its ceilings.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Ceiling {
    pub images: usize,
    pub human: Scores,
    pub oracle: Scores,
}

/// `ceilings.json`.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Ceilings {
    pub split: &'static str,
    pub scoring: &'static str,
    pub all: Ceiling,
    /// The same per subset (`seen`, `unseen`).
    pub subsets: BTreeMap<String, Ceiling>,
}

/// One scored image: its references and the oracle's candidates, as raw text.
pub(crate) struct Scored<'a> {
    pub refs: &'a [String],
    pub oracle: &'a [String],
}

pub(crate) fn ceiling(images: &[Scored]) -> Ceiling {
    let mut interner = Interner::new();
    let mut ids =
        |text: &str| -> Vec<u32> { tokenize(text).iter().map(|w| interner.intern(w)).collect() };
    let refs: Vec<Vec<Vec<u32>>> = images
        .iter()
        .map(|im| im.refs.iter().map(|r| ids(r)).collect())
        .collect();
    let candidates: Vec<Vec<Vec<u32>>> = images
        .iter()
        .map(|im| im.oracle.iter().map(|c| ids(c)).collect())
        .collect();
    Ceiling {
        images: images.len(),
        human: human(&refs),
        oracle: oracle(&refs, &candidates),
    }
}

fn human(refs: &[Vec<Vec<u32>>]) -> Scores {
    let k = refs.iter().map(Vec::len).min().unwrap_or(0);
    let (mut cider, mut bleu) = (0.0, 0.0);
    for held in 0..k {
        let cands: Vec<&[u32]> = refs.iter().map(|r| r[held].as_slice()).collect();
        let others: Vec<Vec<Vec<u32>>> = refs
            .iter()
            .map(|r| {
                let mut r = r.clone();
                r.remove(held);
                r
            })
            .collect();
        cider += cider_corpus(&others, &cands).0;
        bleu += bleu_corpus(&others, &cands).0[3];
    }
    let k = k.max(1) as f64;
    Scores {
        cider_d: cider / k,
        bleu4: bleu / k,
    }
}

fn oracle(refs: &[Vec<Vec<u32>>], candidates: &[Vec<Vec<u32>>]) -> Scores {
    // CIDEr-D's document frequencies come from the references alone, so each candidate's
    // score is the one it gets in the corpus: score every candidate, keep the best per image.
    let most = candidates.iter().map(Vec::len).max().unwrap_or(0);
    let mut best: Vec<(f64, &[u32])> = vec![(f64::NEG_INFINITY, &[]); refs.len()];
    for j in 0..most {
        // An image with fewer candidates repeats its first, so every pass scores the whole set.
        let cands: Vec<&[u32]> = candidates
            .iter()
            .map(|c| c.get(j).unwrap_or(&c[0]).as_slice())
            .collect();
        update(&mut best, refs, &cands);
    }
    let chosen: Vec<&[u32]> = best.iter().map(|b| b.1).collect();
    Scores {
        cider_d: cider_corpus(refs, &chosen).0,
        bleu4: bleu_corpus(refs, &chosen).0[3],
    }
}

fn update<'a>(best: &mut [(f64, &'a [u32])], refs: &[Vec<Vec<u32>>], cands: &[&'a [u32]]) {
    let (_, scores) = cider_corpus(refs, cands);
    for ((b, s), c) in best.iter_mut().zip(scores).zip(cands) {
        if s > b.0 {
            *b = (s, c);
        }
    }
}
