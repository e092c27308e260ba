//! `[data]` of the run config: where the data set is and how its vocabulary is built, with
//! the section's rules. `data.max_len` is the model's to bound (its longest caption), so its
//! rule is the run config's.

use serde::{Deserialize, Serialize};

use crate::{Format, OpenOptions};
use caprl_wire::check::{outside, Check};

/// `[data]`: where the data set is and how captions are tokenized.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DataConfig {
    /// Data set directory.
    pub dir: String,
    pub format: Format,
    /// Words seen fewer times than this become `<unk>`; >= 1.
    pub min_count: u32,
    /// Maximum caption tokens, excluding BOS/EOS; 1..=64.
    pub max_len: u32,
}

impl Default for DataConfig {
    fn default() -> Self {
        DataConfig {
            dir: "data/synth".to_string(),
            format: Format::Auto,
            min_count: 1,
            max_len: 16,
        }
    }
}

impl DataConfig {
    #[rustfmt::skip]
    pub const CHECKS: &[Check<DataConfig>] = &[
        Check { key: "data.dir", allowed: "a non-empty path", violation: |c| c.dir.is_empty().then(|| "\"\"".into()) },
        Check { key: "data.min_count", allowed: ">= 1", violation: |c| outside(c.min_count, 1..) },
    ];

    /// How to open the set: `format` and `min_count` are held against what the directory
    /// holds (a Karpathy set opened as `custom`, or a vocabulary built with another min
    /// count, is refused).
    pub fn open_options(&self) -> OpenOptions {
        OpenOptions {
            format: self.format,
            min_count: Some(self.min_count as usize),
            vocab_hash: None,
        }
    }
}
