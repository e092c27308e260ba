//! The policy snapshot the learner broadcasts, written and read only here: the captioner's
//! tensors (in the snapshot dtype) and any tensors that ride along (with a `disc` reward, the
//! discriminator's `disc.*`, read by reward workers through `caprl-clip`), sorted by name, and
//! one metadata entry, the [`Stamp`], naming the vocabulary they were trained on. A snapshot of
//! another vocabulary is refused with both hashes named (its ids would mean other words)
//! ([`check_stamp`]), and every tensor is checked by name and shape against the reader's
//! `[model]` config on load.
//!
//! One metadata key, so the same weights always give the same bytes. A snapshot without a
//! stamp (written by hand, or by a learner from before stamps) is read unchecked.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use caprl_model::model::params::{self, Poisoned};
use caprl_model::model::{Captioner, CaptionerConfig, DType, Device, ModelError, Tensor};

/// The metadata key of the [`Stamp`].
const STAMP_KEY: &str = "caprl.snapshot";

/// What a snapshot was made for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    /// The hash of the vocabulary the policy's token ids index (`Vocab::hash`).
    pub vocab_hash: String,
}

/// Why a snapshot could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("the snapshot was {0}: every role must use the same data set (data.dir)")]
    OtherVocabulary(#[from] caprl_data::OtherVocabulary),
    #[error("the snapshot's stamp is unreadable ({0})")]
    BadStamp(String),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error("tensor error: {0}")]
    Candle(#[from] candle_core::Error),
    #[error(transparent)]
    Poisoned(#[from] Poisoned),
    #[error("cannot serialise the snapshot: {0}")]
    Serialise(#[from] safetensors::SafeTensorError),
}

/// The snapshot of `model` (its tensors in `dtype`) and the named tensors `riders` (kept in
/// their own dtype), stamped with `vocab_hash` when given.
pub fn encode(
    model: &Captioner,
    riders: Vec<(String, Tensor)>,
    dtype: DType,
    vocab_hash: Option<&str>,
) -> Result<Vec<u8>, SnapshotError> {
    // A hand-off point: the bytes leave the device only after every queued update.
    model.device().synchronize()?;
    let mut named = params::named_tensors(model.varmap())?
        .into_iter()
        .map(|(k, t)| Ok((k, t.to_dtype(dtype)?)))
        .collect::<Result<Vec<_>, candle_core::Error>>()?;
    named.extend(riders);
    let metadata = match vocab_hash {
        Some(hash) => {
            let stamp = Stamp {
                vocab_hash: hash.to_string(),
            };
            let json = serde_json::to_string(&stamp)
                .map_err(|e| SnapshotError::BadStamp(e.to_string()))?;
            Some(HashMap::from([(STAMP_KEY.to_string(), json)]))
        }
        None => None,
    };
    Ok(params::to_sorted_safetensors(named, metadata)?)
}

/// The policy of snapshot `bytes` as a captioner shaped by `cfg`, after checking that it was
/// trained on vocabulary `vocab_hash`.
pub fn load_policy(
    bytes: &[u8],
    cfg: &CaptionerConfig,
    device: &Device,
    vocab_hash: &str,
) -> Result<Captioner, SnapshotError> {
    check_stamp(bytes, vocab_hash)?;
    Ok(Captioner::from_safetensors(bytes, cfg, device)?)
}

/// The stamp of snapshot `bytes`, if it has one.
pub fn stamp(bytes: &[u8]) -> Result<Option<Stamp>, SnapshotError> {
    let (_, meta) = safetensors::SafeTensors::read_metadata(bytes)?;
    match meta.metadata().as_ref().and_then(|m| m.get(STAMP_KEY)) {
        Some(json) => serde_json::from_str(json)
            .map(Some)
            .map_err(|e| SnapshotError::BadStamp(e.to_string())),
        None => Ok(None),
    }
}

/// Refuses snapshot `bytes` when its stamp names another vocabulary than `vocab_hash` (an
/// unstamped snapshot passes); every reader of a snapshot calls this first.
pub fn check_stamp(bytes: &[u8], vocab_hash: &str) -> Result<(), SnapshotError> {
    match stamp(bytes)? {
        Some(s) => Ok(caprl_data::check_made_for(&s.vocab_hash, vocab_hash)?),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use caprl_model::model::ModelKind;

    fn model() -> (Captioner, CaptionerConfig) {
        let mut cfg = CaptionerConfig::new(ModelKind::Fc, 9, 4, None);
        cfg.model.embed = 4;
        cfg.model.hidden = 6;
        (Captioner::new(&cfg, &Device::Cpu, 1).unwrap(), cfg)
    }

    #[test]
    fn a_snapshot_loads_for_its_vocabulary_only_and_the_same_weights_give_the_same_bytes() {
        let (m, cfg) = model();
        let rider = || {
            let t = Tensor::arange(0f32, 6., &Device::Cpu).unwrap();
            vec![("disc.w".to_string(), t)]
        };
        let bytes = encode(&m, rider(), DType::F32, Some("v1")).unwrap();
        assert_eq!(bytes, encode(&m, rider(), DType::F32, Some("v1")).unwrap());
        assert_eq!(stamp(&bytes).unwrap().unwrap().vocab_hash, "v1");
        let back = load_policy(&bytes, &cfg, &Device::Cpu, "v1").unwrap();
        assert_eq!(back.to_safetensors().unwrap(), m.to_safetensors().unwrap());
        assert!(check_stamp(&bytes, "v1").is_ok());
        let err = match load_policy(&bytes, &cfg, &Device::Cpu, "v2") {
            Ok(_) => panic!("a snapshot of vocabulary v1 loaded for v2"),
            Err(e) => e.to_string(),
        };
        assert!(
            err.contains("v1") && err.contains("v2") && err.contains("data.dir"),
            "{err}"
        );
        assert!(check_stamp(&bytes, "v2").is_err());
        // Unstamped bytes (a model's own safetensors) are read unchecked.
        let plain = m.to_safetensors().unwrap();
        assert_eq!(stamp(&plain).unwrap(), None);
        assert!(load_policy(&plain, &cfg, &Device::Cpu, "v2").is_ok());
    }
}
