//! Teacher-forcing targets from data set references.

use caprl_common::data::{Item, Vocab};

/// Every reference of `item` as decoder targets: words truncated to `max_len`, then EOS.
pub fn reference_targets(item: &Item, vocab: &Vocab, max_len: usize) -> Vec<Vec<u32>> {
    item.targets(vocab, max_len)
}
