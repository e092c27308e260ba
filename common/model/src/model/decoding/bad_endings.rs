//! self-critical.pytorch's `--remove_bad_endings`: a caption may not end on a function word
//! ("a man riding a"), so EOS is forbidden right after one.
//!
//! The reference sets the EOS log-prob to −∞ for every row whose previous token is in
//! `bad_endings` (`AttModel._sample`, and `CaptionModel.beam_search` for beams), which is what
//! [`BadEndings::mask_logits`] does (beam search gives EOS the log-prob −∞ where
//! [`BadEndings::forbids_eos_after`] says so). A caption that reaches the length limit is cut
//! there, as in the reference, and may still end on such a word.

use crate::model::tokens::EOS;
use caprl_data::Vocab;

/// The reference's list (`captioning/models/AttModel.py`; it appends `the` a second time).
pub const BAD_ENDING_WORDS: [&str; 17] = [
    "a", "an", "the", "in", "for", "at", "of", "with", "before", "after", "on", "upon", "near",
    "to", "is", "are", "am",
];

/// The token ids after which EOS is forbidden; empty (the default) forbids nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BadEndings {
    /// Sorted, without duplicates.
    ids: Vec<u32>,
}

impl BadEndings {
    /// Forbids nothing: decoding as without the option.
    pub fn none() -> Self {
        Self::default()
    }

    /// The ids of [`BAD_ENDING_WORDS`] in `vocab`; words it does not have are skipped.
    pub fn from_vocab(vocab: &Vocab) -> Self {
        Self::from_ids(
            BAD_ENDING_WORDS
                .iter()
                .map(|w| vocab.id(w))
                .filter(|&id| id != Vocab::UNK),
        )
    }

    /// These ids (any order, repeats allowed).
    pub fn from_ids(ids: impl IntoIterator<Item = u32>) -> Self {
        let mut ids: Vec<u32> = ids.into_iter().collect();
        ids.sort_unstable();
        ids.dedup();
        Self { ids }
    }

    /// The ids, ascending.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// True when nothing is forbidden.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Whether EOS may not follow `prev` (the previous token; `None` at the first step).
    pub fn forbids_eos_after(&self, prev: Option<u32>) -> bool {
        prev.is_some_and(|w| self.ids.binary_search(&w).is_ok())
    }

    /// Sets EOS's logit to −∞ when it may not follow `prev`: any softmax of the row then
    /// renormalises over the other words, the distribution a sampler actually draws from.
    pub fn mask_logits(&self, prev: Option<u32>, logits: &mut [f32]) {
        if self.forbids_eos_after(prev) {
            logits[EOS as usize] = f32::NEG_INFINITY;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vocabulary_words_on_the_list_become_ids_and_others_are_skipped() {
        let caption: Vec<String> = ["a", "dog", "on", "the", "grass", "a"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let vocab = Vocab::build(std::iter::once(caption.as_slice()), 1);
        let bad = BadEndings::from_vocab(&vocab);
        let mut want = vec![vocab.id("a"), vocab.id("on"), vocab.id("the")];
        want.sort_unstable();
        assert_eq!(bad.ids(), want.as_slice());
        assert!(bad.forbids_eos_after(Some(vocab.id("the"))));
        assert!(!bad.forbids_eos_after(Some(vocab.id("dog"))));
        assert!(!bad.forbids_eos_after(None), "the first word is free");
    }

    #[test]
    fn masking_removes_only_eos_and_only_after_a_bad_word() {
        let bad = BadEndings::from_ids([7, 5, 7]);
        assert_eq!(bad.ids(), &[5, 7]);
        let mut logits = vec![0.5f32; 9];
        bad.mask_logits(Some(6), &mut logits);
        assert_eq!(logits, vec![0.5; 9]);
        bad.mask_logits(Some(5), &mut logits);
        assert_eq!(logits[EOS as usize], f32::NEG_INFINITY);
        assert!(logits
            .iter()
            .enumerate()
            .all(|(w, &l)| w == EOS as usize || l == 0.5));
        assert!(bad.forbids_eos_after(Some(7)) && !bad.forbids_eos_after(Some(6)));
    }
}
