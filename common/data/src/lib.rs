//! caprl-data, the data layer: caption tokenizer, vocabulary, data set formats (Karpathy-split JSON and a
//! simple custom CSV/JSON, with features in safetensors or per-image `.npy`), validation
//! with errors that name the file and the fix, the synthetic captioning task and summaries.

pub mod atomic;
pub mod audio;
mod config;
mod custom;
mod dataset;
mod error;
mod features;
mod karpathy;
pub mod npy;
mod stats;
mod synth;
mod vocab;

pub use caprl_score::tokenize::{tokenize, PUNCTUATION};
pub use config::DataConfig;
pub use dataset::{
    Dataset, Format, Item, OpenOptions, OverLength, Split, SplitName, CAPTIONS_CSV, CAPTIONS_JSON,
    FEATURES_DIR, FEATURES_IDS, FEATURES_SAFETENSORS, SUBSETS_JSON, VOCAB_JSON,
};
pub use error::DataError;
pub use features::{write_safetensors, FULL_SCAN_BYTES};
pub use stats::{stats, DatasetStats, SplitStats};
pub use synth::{
    already_generated, synth, synth_dataset, synth_profile, SynthConfig, SynthProfile,
    SynthSummary, CEILINGS_JSON,
};
pub use vocab::{check_made_for, OtherVocabulary, Vocab, SPECIALS};
