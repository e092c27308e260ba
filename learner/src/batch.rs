//! Teacher-forcing targets from data set references.

use caprl_common::data::{Item, Vocab};
use caprl_common::model::EOS;

/// Every reference of `item` as decoder targets: words truncated to `max_len`, then EOS.
pub fn reference_targets(item: &Item, vocab: &Vocab, max_len: usize) -> Vec<Vec<u32>> {
    item.refs
        .iter()
        .map(|words| {
            let mut ids = vocab.encode(words);
            ids.truncate(max_len);
            ids.push(EOS);
            ids
        })
        .collect()
}
