//! Document frequencies of n-grams over reference sets, for CIDEr-D's idf.
//!
//! `df(g)` is the number of images whose reference set contains the n-gram
//! `g` at least once (pycocoevalcap `CiderScorer.compute_doc_freq`). SCST
//! training builds it once from the training references and reuses it
//! (self-critical.pytorch's `coco-train-idxs.p`, made by
//! `scripts/prepro_ngrams.py`); evaluation builds it from the set being
//! scored (`corpus` mode).
//!
//! File format (little endian): magic `CAPRLDF\0`, `u32` version (1),
//! `u64` number of images, `u64` number of entries, then the entries sorted
//! by key as (`u128` packed n-gram, `u32` df), `u64` number of vocabulary
//! words, each as `u32` byte length + UTF-8 bytes, then the SHA-256 of all
//! the bytes before it. The vocabulary (word of id 0, 1, …) is optional (0
//! words) but lets text be interned with the ids the table was built with
//! (`caprl score --df FILE`).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::ngrams::{order_of, push_ngrams, KeyMap, NgramKey, MAX_ORDER};

const MAGIC: &[u8; 8] = b"CAPRLDF\0";
const VERSION: u32 = 1;
const HEADER_LEN: usize = 8 + 4 + 8 + 8;
const ENTRY_LEN: usize = 16 + 4;

/// What went wrong reading or writing a document-frequency file.
#[derive(Debug, thiserror::Error)]
pub enum DfError {
    /// The file could not be read or written.
    #[error("document-frequency file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The file does not start with the caprl df magic bytes.
    #[error("{path} is not a caprl document-frequency file (bad magic); build one with `caprl data df DIR`")]
    BadMagic {
        /// The file.
        path: PathBuf,
    },
    /// The file was written by a newer or older format.
    #[error("{path}: document-frequency format version {found} is not supported (this build reads version {VERSION}); rebuild it with `caprl data df DIR`")]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// Version found in the header.
        found: u32,
    },
    /// The file is shorter or longer than its header says.
    #[error("{path}: expected {expected} bytes from the header, found {found}; the file is truncated or corrupt, rebuild it")]
    Length {
        /// The file.
        path: PathBuf,
        /// Length implied by the header.
        expected: u64,
        /// Actual length.
        found: u64,
    },
    /// The trailing SHA-256 does not match the contents.
    #[error("{path}: checksum mismatch; the file is corrupt, rebuild it")]
    Checksum {
        /// The file.
        path: PathBuf,
    },
    /// An entry breaks an invariant (order 1..=4, sorted keys, 1 <= df <= images).
    #[error("{path}: entry {index} is invalid: {reason}; rebuild the file")]
    BadEntry {
        /// The file.
        path: PathBuf,
        /// Entry index (0-based).
        index: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// An n-gram given as words is empty or longer than 4 words.
    #[error("n-gram {ngram:?} has {order} words; document frequencies are kept for 1 to 4")]
    NgramOrder {
        /// The n-gram, words joined by spaces.
        ngram: String,
        /// Its number of words.
        order: usize,
    },
}

/// N-gram document frequencies (orders 1..=4) and the number of images they
/// were counted over (CIDEr-D's `ref_len = ln(num_images)`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DocFreq {
    pub(crate) df: KeyMap<u32>,
    pub(crate) num_images: usize,
    pub(crate) words: Vec<String>,
}

impl DocFreq {
    /// Counts, for every n-gram of order 1..=4, the images (entries of
    /// `refs`, each the interned reference sentences of one image) whose
    /// references contain it.
    pub fn from_refs(refs: &[Vec<Vec<u32>>]) -> Self {
        Self::from_repeated_refs(refs, |_| 1)
    }

    /// [`DocFreq::from_refs`] where entry `i` of `refs` stands for `times(i)` images with the
    /// same references: self-critical.pytorch's corpus df, which counts an image's references
    /// once per sampled caption, without copying them per caption.
    pub fn from_repeated_refs(refs: &[Vec<Vec<u32>>], times: impl Fn(usize) -> u32) -> Self {
        let total: usize = refs.iter().flatten().map(|s| 4 * s.len()).sum();
        let mut df: KeyMap<u32> = KeyMap::default();
        df.reserve(total / 2);
        let mut keys = Vec::new();
        let mut num_images = 0usize;
        for (i, image) in refs.iter().enumerate() {
            let times = times(i);
            if times == 0 {
                continue;
            }
            num_images += times as usize;
            keys.clear();
            for sentence in image {
                for n in 1..=MAX_ORDER {
                    push_ngrams(sentence, n, &mut keys);
                }
            }
            keys.sort_unstable();
            keys.dedup();
            for &k in &keys {
                *df.entry(k).or_insert(0) += times;
            }
        }
        Self {
            df,
            num_images,
            words: Vec::new(),
        }
    }

    /// Attaches the vocabulary the ids stand for (word of id `i` at `i`),
    /// saved with the table.
    pub fn with_words(mut self, words: Vec<String>) -> Self {
        self.words = words;
        self
    }

    /// The attached vocabulary (empty when none was given).
    pub fn words(&self) -> &[String] {
        &self.words
    }

    /// Number of images the frequencies were counted over.
    pub fn num_images(&self) -> usize {
        self.num_images
    }

    /// Number of distinct n-grams.
    pub fn len(&self) -> usize {
        self.df.len()
    }

    /// True when no n-gram was counted.
    pub fn is_empty(&self) -> bool {
        self.df.is_empty()
    }

    /// Document frequency of the n-gram `tokens` (1..=4 ids); 0 if unseen.
    pub fn get(&self, tokens: &[u32]) -> u32 {
        if tokens.is_empty() || tokens.len() > MAX_ORDER {
            return 0;
        }
        self.df
            .get(&super::ngrams::pack(tokens))
            .copied()
            .unwrap_or(0)
    }

    /// Writes the table to `path` atomically (a temporary file in the same
    /// directory, synced, then renamed over `path`).
    pub fn save(&self, path: &Path) -> Result<(), DfError> {
        let io = |source| DfError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut entries: Vec<(NgramKey, u32)> = self.df.iter().map(|(&k, &v)| (k, v)).collect();
        entries.sort_unstable();
        let mut buf = Vec::with_capacity(HEADER_LEN + entries.len() * ENTRY_LEN + 32);
        buf.extend_from_slice(MAGIC);
        buf.extend_from_slice(&VERSION.to_le_bytes());
        buf.extend_from_slice(&(self.num_images as u64).to_le_bytes());
        buf.extend_from_slice(&(entries.len() as u64).to_le_bytes());
        for (k, v) in &entries {
            buf.extend_from_slice(&k.to_le_bytes());
            buf.extend_from_slice(&v.to_le_bytes());
        }
        buf.extend_from_slice(&(self.words.len() as u64).to_le_bytes());
        for w in &self.words {
            buf.extend_from_slice(&(w.len() as u32).to_le_bytes());
            buf.extend_from_slice(w.as_bytes());
        }
        let digest = Sha256::digest(&buf);
        buf.extend_from_slice(&digest);

        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(io)?;
        tmp.write_all(&buf).map_err(io)?;
        tmp.as_file().sync_all().map_err(io)?;
        tmp.persist(path).map_err(|e| io(e.error))?;
        Ok(())
    }

    /// Reads a table written by [`DocFreq::save`], checking its magic,
    /// version, length, checksum and entries. The file is read as a stream (the entries go
    /// into the table as they are hashed), so loading never holds the file and the table at
    /// once; a file whose checksum fails is refused as such, whatever its entries say.
    pub fn load(path: &Path) -> Result<Self, DfError> {
        let p = || path.to_path_buf();
        let io = |source| DfError::Io { path: p(), source };
        let file = std::fs::File::open(path).map_err(io)?;
        let found = file.metadata().map_err(io)?.len();
        let mut r = HashedReader::new(file);
        let mut magic = [0u8; 8];
        if found < 8 || {
            r.take(&mut magic).map_err(io)?;
            &magic != MAGIC
        } {
            return Err(DfError::BadMagic { path: p() });
        }
        if found < HEADER_LEN as u64 {
            return Err(DfError::Length {
                path: p(),
                expected: HEADER_LEN as u64,
                found,
            });
        }
        let version = r.u32().map_err(io)?;
        if version != VERSION {
            return Err(DfError::UnsupportedVersion {
                path: p(),
                found: version,
            });
        }
        let num_images = r.u64().map_err(io)?;
        let n = r.u64().map_err(io)?;
        let expected = n
            .checked_mul(ENTRY_LEN as u64)
            .and_then(|b| b.checked_add((HEADER_LEN + 8 + 32) as u64));
        if expected.is_none_or(|e| e > found) {
            return Err(DfError::Length {
                path: p(),
                expected: expected.unwrap_or(u64::MAX),
                found,
            });
        }
        let body = found - 32;
        let parsed = read_body(&mut r, path, (n, num_images), (body, found));
        if !r.checksum_matches(body).map_err(io)? {
            return Err(DfError::Checksum { path: p() });
        }
        let (df, words) = parsed?;
        Ok(Self {
            words,
            df,
            num_images: usize::try_from(num_images).map_err(|_| DfError::BadEntry {
                path: p(),
                index: 0,
                reason: "image count overflows usize".into(),
            })?,
        })
    }
}

/// The entries and vocabulary of a table file after its header: `n` entries of at most
/// `num_images` images, then the words, ending at `body` (the file is `found` bytes long).
fn read_body(
    r: &mut HashedReader,
    path: &Path,
    (n, num_images): (u64, u64),
    (body, found): (u64, u64),
) -> Result<(KeyMap<u32>, Vec<String>), DfError> {
    let p = || path.to_path_buf();
    let io = |source| DfError::Io { path: p(), source };
    let bad = |index: u64, reason: String| DfError::BadEntry {
        path: p(),
        index,
        reason,
    };
    let mut df = KeyMap::default();
    df.reserve(n as usize);
    let mut prev: Option<NgramKey> = None;
    // Entries are read (and hashed) a block at a time: one hash update per entry would cost
    // more than the reading.
    const BLOCK: u64 = 1 << 16;
    let mut block = vec![0u8; ENTRY_LEN * BLOCK as usize];
    let mut i = 0u64;
    while i < n {
        let bytes = &mut block[..ENTRY_LEN * (n - i).min(BLOCK) as usize];
        r.take(bytes).map_err(io)?;
        for entry in bytes.chunks_exact(ENTRY_LEN) {
            let key = u128::from_le_bytes(entry[..16].try_into().expect("16 bytes"));
            let count = u32::from_le_bytes(entry[16..].try_into().expect("4 bytes"));
            let order = order_of(key);
            if !(1..=MAX_ORDER).contains(&order) {
                return Err(bad(i, format!("n-gram order {order} is outside 1..=4")));
            }
            if prev.is_some_and(|p| p >= key) {
                return Err(bad(i, "keys are not strictly increasing".into()));
            }
            if count == 0 || u64::from(count) > num_images {
                return Err(bad(i, format!("df {count} is outside 1..={num_images}")));
            }
            prev = Some(key);
            df.insert(key, count);
            i += 1;
        }
    }
    let nwords = r.u64().map_err(io)?;
    let mut words = Vec::new();
    for i in 0..nwords {
        if r.pos + 4 > body {
            return Err(DfError::Length {
                path: p(),
                expected: r.pos + 4 + 32,
                found,
            });
        }
        let len = u64::from(r.u32().map_err(io)?);
        if len > body - r.pos {
            return Err(DfError::Length {
                path: p(),
                expected: r.pos + len + 32,
                found,
            });
        }
        let mut word = vec![0u8; len as usize];
        r.take(&mut word).map_err(io)?;
        let word =
            String::from_utf8(word).map_err(|_| bad(i, "vocabulary word is not UTF-8".into()))?;
        words.push(word);
    }
    if r.pos != body {
        return Err(DfError::Length {
            path: p(),
            expected: r.pos + 32,
            found,
        });
    }
    Ok((df, words))
}

/// A table file read front to back, hashing what is read.
struct HashedReader {
    inner: std::io::BufReader<std::fs::File>,
    hasher: Sha256,
    /// Bytes read so far.
    pos: u64,
}

impl HashedReader {
    fn new(file: std::fs::File) -> HashedReader {
        HashedReader {
            inner: std::io::BufReader::with_capacity(1 << 20, file),
            hasher: Sha256::new(),
            pos: 0,
        }
    }

    fn take(&mut self, buf: &mut [u8]) -> std::io::Result<()> {
        self.inner.read_exact(buf)?;
        self.hasher.update(&*buf);
        self.pos += buf.len() as u64;
        Ok(())
    }

    fn u32(&mut self) -> std::io::Result<u32> {
        let mut b = [0u8; 4];
        self.take(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    fn u64(&mut self) -> std::io::Result<u64> {
        let mut b = [0u8; 8];
        self.take(&mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Hashes the rest of the first `body` bytes and compares the digest with the 32 bytes
    /// stored after them.
    fn checksum_matches(&mut self, body: u64) -> std::io::Result<bool> {
        let mut buf = vec![0u8; 1 << 16];
        while self.pos < body {
            let n = buf.len().min((body - self.pos) as usize);
            self.take(&mut buf[..n])?;
        }
        let mut stored = [0u8; 32];
        self.inner.read_exact(&mut stored)?;
        Ok(self.hasher.clone().finalize().as_slice() == stored)
    }
}

/// Builds a [`DocFreq`] from n-grams written as words and their document
/// frequencies, one at a time: what self-critical.pytorch's df pickle holds
/// (`document_frequency`, `ref_len`). Words get ids in order of first sight,
/// kept as the table's vocabulary.
#[derive(Debug, Default)]
pub struct DocFreqBuilder {
    interner: super::intern::Interner,
    df: KeyMap<u32>,
    ids: Vec<u32>,
}

impl DocFreqBuilder {
    /// An empty builder with room for `entries` n-grams.
    pub fn with_capacity(entries: usize) -> Self {
        let mut df = KeyMap::default();
        df.reserve(entries);
        Self {
            df,
            ..Self::default()
        }
    }

    /// Records that `count` images contain the n-gram `words` (1 to 4 words). An
    /// entry with count 0 is left out: its idf is the same as an unseen n-gram's.
    pub fn add(&mut self, words: &[&str], count: u32) -> Result<(), DfError> {
        if words.is_empty() || words.len() > MAX_ORDER {
            return Err(DfError::NgramOrder {
                ngram: words.join(" "),
                order: words.len(),
            });
        }
        if count > 0 {
            self.ids.clear();
            for w in words {
                self.ids.push(self.interner.intern(w));
            }
            self.df.insert(super::ngrams::pack(&self.ids), count);
        }
        Ok(())
    }

    /// The table, counted over `num_images` images.
    pub fn finish(self, num_images: usize) -> DocFreq {
        DocFreq {
            df: self.df,
            num_images,
            words: self.interner.into_words(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn df_counts_each_image_once() {
        let refs = vec![vec![vec![1, 2, 1], vec![1, 3]], vec![vec![2, 2]]];
        let df = DocFreq::from_refs(&refs);
        assert_eq!(df.num_images(), 2);
        assert_eq!(df.get(&[1]), 1);
        assert_eq!(df.get(&[2]), 2);
        assert_eq!(df.get(&[2, 2]), 1);
        assert_eq!(df.get(&[1, 2, 1]), 1);
        assert_eq!(df.get(&[9]), 0);
    }
}
