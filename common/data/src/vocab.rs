//! Word vocabulary: ids for the special tokens, then words by descending training count.

use std::collections::HashMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::atomic::write_json_atomic;
use super::error::DataError;

/// Words ↔ ids. Ids: `PAD = 0`, `BOS = 1`, `EOS = 2`, `UNK = 3`, then words by descending
/// count in the training references (ties broken by the word, so the order is stable).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vocab {
    words: Vec<String>,
    counts: Vec<u64>,
    index: HashMap<String, u32>,
    min_count: usize,
    hash: String,
}

/// The on-disk form, `vocab.json`.
#[derive(Serialize, Deserialize)]
struct VocabFile {
    words: Vec<String>,
    counts: Vec<u64>,
    min_count: usize,
    hash: String,
}

/// The spellings of the special tokens (ids 0..4).
pub const SPECIALS: [&str; 4] = ["<pad>", "<bos>", "<eos>", "<unk>"];

/// Token ids made for one vocabulary read with another: both hashes ([`Vocab::hash`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("made for another vocabulary ({found}) than this data set's ({expected})")]
pub struct OtherVocabulary {
    pub found: String,
    pub expected: String,
}

/// The one comparison of vocabularies: weights, snapshots or files made for the vocabulary
/// with hash `found` are refused where the vocabulary is `expected`, since their token ids
/// would mean other words. Each reader adds what to do about it.
pub fn check_made_for(found: &str, expected: &str) -> Result<(), OtherVocabulary> {
    match found.trim() == expected {
        true => Ok(()),
        false => Err(OtherVocabulary {
            found: found.trim().to_string(),
            expected: expected.to_string(),
        }),
    }
}

impl Vocab {
    pub const PAD: u32 = 0;
    pub const BOS: u32 = 1;
    pub const EOS: u32 = 2;
    pub const UNK: u32 = 3;

    /// Count words over tokenized captions; keep those seen at least `min_count` times
    /// (`min_count` 0 is treated as 1).
    pub fn build<'a>(captions: impl Iterator<Item = &'a [String]>, min_count: usize) -> Vocab {
        let min_count = min_count.max(1);
        let mut counts: HashMap<&str, u64> = HashMap::new();
        for caption in captions {
            for w in caption {
                *counts.entry(w.as_str()).or_insert(0) += 1;
            }
        }
        let mut kept: Vec<(&str, u64)> = counts
            .into_iter()
            .filter(|(w, c)| *c >= min_count as u64 && !SPECIALS.contains(w) && !w.is_empty())
            .collect();
        kept.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        let mut words: Vec<String> = SPECIALS.iter().map(|s| s.to_string()).collect();
        let mut word_counts = vec![0u64; SPECIALS.len()];
        for (w, c) in kept {
            words.push(w.to_string());
            word_counts.push(c);
        }
        Self::from_parts(words, word_counts, min_count)
    }

    fn from_parts(words: Vec<String>, counts: Vec<u64>, min_count: usize) -> Vocab {
        let index = words
            .iter()
            .enumerate()
            .map(|(i, w)| (w.clone(), i as u32))
            .collect();
        let hash = hash_words(&words);
        Vocab {
            words,
            counts,
            index,
            min_count,
            hash,
        }
    }

    /// Number of ids, special tokens included.
    pub fn len(&self) -> usize {
        self.words.len()
    }

    /// True when only the special tokens are present.
    pub fn is_empty(&self) -> bool {
        self.words.len() <= SPECIALS.len()
    }

    /// The word of `id`; `<unk>` for an id outside the vocabulary.
    pub fn word(&self, id: u32) -> &str {
        self.words
            .get(id as usize)
            .map(String::as_str)
            .unwrap_or(SPECIALS[Self::UNK as usize])
    }

    /// The id of `word`, [`Vocab::UNK`] when unknown.
    pub fn id(&self, word: &str) -> u32 {
        self.index.get(word).copied().unwrap_or(Self::UNK)
    }

    /// Word ids, no BOS/EOS added.
    pub fn encode(&self, words: &[String]) -> Vec<u32> {
        words.iter().map(|w| self.id(w)).collect()
    }

    /// Words of `ids`, stopping at the first EOS and skipping PAD and BOS.
    pub fn decode(&self, ids: &[u32]) -> Vec<String> {
        ids.iter()
            .take_while(|&&id| id != Self::EOS)
            .filter(|&&id| id != Self::PAD && id != Self::BOS)
            .map(|&id| self.word(id).to_string())
            .collect()
    }

    /// All words, index = id.
    pub fn words(&self) -> &[String] {
        &self.words
    }

    /// Training counts, index = id (0 for the special tokens).
    pub fn counts(&self) -> &[u64] {
        &self.counts
    }

    /// The `min_count` the vocabulary was built with.
    pub fn min_count(&self) -> usize {
        self.min_count
    }

    /// First 16 hex chars of sha256 over the words joined by `\n` (special tokens included).
    /// Snapshots carry it so a model is never decoded with another vocabulary.
    pub fn hash(&self) -> &str {
        &self.hash
    }

    /// Fail with [`DataError::VocabHash`] unless the hash is `expected`; `path` names the
    /// vocabulary file in the message.
    pub fn check_hash(&self, expected: &str, path: &Path) -> Result<(), DataError> {
        check_made_for(&self.hash, expected).map_err(|e| DataError::VocabHash {
            path: path.to_path_buf(),
            expected: e.expected,
            found: e.found,
        })
    }

    /// Write `vocab.json` atomically.
    pub fn save(&self, path: &Path) -> Result<(), DataError> {
        write_json_atomic(
            path,
            &VocabFile {
                words: self.words.clone(),
                counts: self.counts.clone(),
                min_count: self.min_count,
                hash: self.hash.clone(),
            },
        )
    }

    /// Read and check a `vocab.json` written by [`Vocab::save`].
    pub fn load(path: &Path) -> Result<Vocab, DataError> {
        let bytes = std::fs::read(path).map_err(|e| DataError::io(path, e))?;
        let file: VocabFile =
            serde_json::from_slice(&bytes).map_err(|e| DataError::json(path, &e))?;
        if file.words.len() < SPECIALS.len()
            || file.words[..SPECIALS.len()]
                .iter()
                .zip(SPECIALS)
                .any(|(w, s)| w != s)
        {
            return Err(DataError::invalid(
                path,
                format!("`words` must start with {SPECIALS:?}; delete the file to rebuild it from the training captions"),
            ));
        }
        if file.counts.len() != file.words.len() {
            return Err(DataError::invalid(
                path,
                format!(
                    "`counts` has {} entries but `words` has {}; delete the file to rebuild it",
                    file.counts.len(),
                    file.words.len()
                ),
            ));
        }
        let mut seen = std::collections::HashSet::new();
        if let Some(dup) = file.words.iter().find(|w| !seen.insert(w.as_str())) {
            return Err(DataError::invalid(
                path,
                format!("word {dup:?} appears twice in `words`; delete the file to rebuild it"),
            ));
        }
        let vocab = Self::from_parts(file.words, file.counts, file.min_count);
        if vocab.hash != file.hash {
            return Err(DataError::invalid(
                path,
                format!(
                    "stored `hash` {} does not match its word list (hash {}); the file was edited: delete it to rebuild it",
                    file.hash, vocab.hash
                ),
            ));
        }
        Ok(vocab)
    }
}

fn hash_words(words: &[String]) -> String {
    let mut h = Sha256::new();
    for (i, w) in words.iter().enumerate() {
        if i > 0 {
            h.update(b"\n");
        }
        h.update(w.as_bytes());
    }
    hex::encode(h.finalize())[..16].to_string()
}
