//! The end-of-sentence marker of self-critical.pytorch's training CIDEr-D.
//!
//! self-critical.pytorch scores captions as the strings `array_to_str` makes from id rows,
//! and that function keeps the terminating `0` (its `<eos>` id) when the row has one:
//!
//! ```text
//! array_to_str([5, 9, 0, 0]) = "5 9 0"      a sampled caption that finished
//! array_to_str([5, 9, 7, 3]) = "5 9 7 3"    one cut at max_len: no <eos>
//! ```
//!
//! References are zero-padded label rows, so they end with `0` too, and
//! `scripts/prepro_ngrams.py` appends `<eos>` to every training reference before counting
//! the document frequencies. The reward therefore sees n-grams such as `dog <eos>` that
//! credit a caption for ending where the references end, and a caption that never stopped
//! lacks them.
//!
//! Here the marker is [`EOS_MARK`], an id the [`Interner`](super::Interner) never hands out,
//! so no word of any caption (not even a literal `<eos>` in a reference) can be mistaken for
//! it. One difference is kept: self-critical.pytorch's label rows are cut at 16 words, so a
//! reference of 16 words or more has no `0` when scored (though its df entry has `<eos>`);
//! references here are never cut, so every reference gets the marker.

/// The marker appended to references and finished candidates (see the module docs).
pub const EOS_MARK: u32 = u32::MAX - 1;

/// `tokens` followed by [`EOS_MARK`] when `finished`, else `tokens` unchanged.
pub fn with_eos(tokens: &[u32], finished: bool) -> Vec<u32> {
    let mut out = Vec::with_capacity(tokens.len() + 1);
    out.extend_from_slice(tokens);
    if finished {
        out.push(EOS_MARK);
    }
    out
}

/// Every sentence of every image of `refs` with [`EOS_MARK`] appended (self-critical.pytorch's
/// references, for [`DocFreq::from_refs`](super::DocFreq::from_refs) and
/// [`CiderD::prepare`](super::CiderD::prepare)).
pub fn refs_with_eos(refs: &[Vec<Vec<u32>>]) -> Vec<Vec<Vec<u32>>> {
    refs.iter()
        .map(|image| image.iter().map(|s| with_eos(s, true)).collect())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_finished_captions_get_the_marker() {
        assert_eq!(with_eos(&[5, 9], true), vec![5, 9, EOS_MARK]);
        assert_eq!(with_eos(&[5, 9, 7, 3], false), vec![5, 9, 7, 3]);
        assert_eq!(with_eos(&[], true), vec![EOS_MARK]);
    }

    #[test]
    fn every_reference_gets_the_marker() {
        let refs = vec![vec![vec![1, 2], vec![]], vec![vec![3]]];
        assert_eq!(
            refs_with_eos(&refs),
            vec![
                vec![vec![1, 2, EOS_MARK], vec![EOS_MARK]],
                vec![vec![3, EOS_MARK]]
            ]
        );
    }
}
