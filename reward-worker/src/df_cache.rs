//! The training document frequencies, computed once per data set and kept beside it.
//!
//! Counting the n-grams of every training reference set took 5.7 s of a Karpathy-size reward
//! worker's 11 s start; reading the table back takes a fraction of it. The file is named after a
//! hash of exactly what the table depends on (the vocabulary, every training image's references
//! in order, the `<eos>` rule), so a table of other references is never picked up: a changed
//! data set has another name, and its table is computed again. A damaged file is reported,
//! computed again and replaced; a data folder that cannot be written only costs the next start
//! the counting.

use std::path::{Path, PathBuf};

use caprl_data::{Dataset, Item};
use caprl_score::DocFreq;
use sha2::{Digest, Sha256};

use crate::Rewarder;

/// [`Rewarder::training_df`] of `items`, read from `data`'s folder when this exact table is
/// there, else computed and written there for the next start.
pub fn cached_training_df(data: &Dataset, items: &[Item], eos: bool) -> DocFreq {
    let path = cache_path(data, items, eos);
    if path.exists() {
        match DocFreq::load(&path) {
            Ok(df) => {
                tracing::info!("document frequencies read from {}", path.display());
                return df;
            }
            Err(e) => tracing::warn!("{e}; counting the document frequencies again"),
        }
    }
    let df = Rewarder::training_df(data, items, eos);
    match df.save(&path) {
        Ok(()) => tracing::info!("document frequencies kept in {}", path.display()),
        Err(e) => tracing::info!("document frequencies not kept ({e}); the next start counts them"),
    }
    df
}

/// `DIR/train-df-{eos|plain}-<hash>.bin`, the hash over the vocabulary and `items`' references.
pub fn cache_path(data: &Dataset, items: &[Item], eos: bool) -> PathBuf {
    let mut h = Sha256::new();
    h.update(data.vocab.hash().as_bytes());
    h.update([u8::from(eos)]);
    for item in items {
        h.update((item.refs.len() as u64).to_le_bytes());
        for r in &item.refs {
            h.update((r.len() as u64).to_le_bytes());
            for word in r {
                h.update(word.as_bytes());
                h.update([0]);
            }
        }
    }
    let key = hex::encode(&h.finalize()[..8]);
    let rule = if eos { "eos" } else { "plain" };
    Path::new(data.dir()).join(format!("train-df-{rule}-{key}.bin"))
}
