//! A data set directory, opened and validated in one call.
//!
//! Layout of `DIR`:
//! - captions: `captions.json` (Karpathy-split, a JSON object with `images`, or the custom
//!   format, a JSON array of rows) or `captions.csv` (custom); see [`super::karpathy`] and
//!   [`super::custom`];
//! - features: `features.safetensors` + `features.ids.json`, or a `features/` directory of
//!   `.npy` files; see [`super::features`];
//! - `vocab.json`: built from the training references (min count 1 unless asked otherwise)
//!   and written atomically the first time the data set is opened.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use super::error::{examples, DataError};
use super::features::{FeatureStore, NpyStore, SafetensorsStore};
use super::vocab::Vocab;
use super::{custom, karpathy};

/// File names inside a data set directory.
pub const CAPTIONS_JSON: &str = "captions.json";
pub const CAPTIONS_CSV: &str = "captions.csv";
pub const FEATURES_SAFETENSORS: &str = "features.safetensors";
pub const FEATURES_IDS: &str = "features.ids.json";
pub const FEATURES_DIR: &str = "features";
pub const VOCAB_JSON: &str = "vocab.json";
/// Optional named subsets of a data set's images (`{"name": [image id, ...]}`): `caprl eval`
/// reports CIDEr-D and BLEU-4 on each apart (the regions task's `seen` and `unseen`).
pub const SUBSETS_JSON: &str = "subsets.json";

/// One of the three splits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SplitName {
    Train,
    Val,
    Test,
}

impl SplitName {
    pub const ALL: [SplitName; 3] = [SplitName::Train, SplitName::Val, SplitName::Test];

    pub fn as_str(self) -> &'static str {
        match self {
            SplitName::Train => "train",
            SplitName::Val => "val",
            SplitName::Test => "test",
        }
    }
}

impl fmt::Display for SplitName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SplitName {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "train" | "restval" => Ok(SplitName::Train),
            "val" => Ok(SplitName::Val),
            "test" => Ok(SplitName::Test),
            other => Err(format!(
                "unknown split {other:?}; expected train, val or test"
            )),
        }
    }
}

/// Caption file format; `Auto` detects it from the file name and the first JSON character.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    #[default]
    Auto,
    Karpathy,
    Custom,
}

impl FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(Format::Auto),
            "karpathy" => Ok(Format::Karpathy),
            "custom" => Ok(Format::Custom),
            other => Err(format!(
                "unknown data format {other:?}; expected auto, karpathy or custom"
            )),
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::Auto => "auto",
            Format::Karpathy => "karpathy",
            Format::Custom => "custom",
        })
    }
}

/// How to open a data set. `Default` is: detect the format, min count 1 (or whatever an
/// existing `vocab.json` was built with), no expected vocabulary hash.
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    pub format: Format,
    /// Min count for a newly built vocabulary; when set and an existing `vocab.json` was built
    /// with another value, opening fails instead of silently using it.
    pub min_count: Option<usize>,
    /// Fail with [`DataError::VocabHash`] unless the vocabulary has this hash.
    pub vocab_hash: Option<String>,
}

/// An image as read from a captions file, before features are attached.
#[derive(Debug, Clone)]
pub(crate) struct RawImage {
    pub id: String,
    pub split: SplitName,
    pub refs: Vec<Vec<String>>,
}

/// One image of a split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// Original image id (`cocoid` / `imgid` / file stem / custom `image_id`).
    pub id: String,
    /// Row in the feature store.
    pub row: usize,
    /// Tokenized reference captions.
    pub refs: Vec<Vec<String>>,
}

impl Item {
    /// Every reference as decoder targets: vocabulary ids truncated to `max_len`, then EOS.
    pub fn targets(&self, vocab: &Vocab, max_len: usize) -> Vec<Vec<u32>> {
        self.refs
            .iter()
            .map(|words| {
                let mut ids = vocab.encode(words);
                ids.truncate(max_len);
                ids.push(Vocab::EOS);
                ids
            })
            .collect()
    }
}

/// The images of one split, in file order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Split {
    pub items: Vec<Item>,
}

impl Split {
    pub fn len(&self) -> usize {
        self.items.len()
    }
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
    pub fn iter(&self) -> std::slice::Iter<'_, Item> {
        self.items.iter()
    }
    /// Total number of reference captions.
    pub fn captions(&self) -> usize {
        self.items.iter().map(|i| i.refs.len()).sum()
    }

    /// The references longer than `max_len` words (their targets are cut to it): how many, and
    /// the longest one's length and image id; `None` when every reference fits.
    pub fn over_length(&self, max_len: usize) -> Option<OverLength> {
        let mut out: Option<OverLength> = None;
        for item in &self.items {
            for r in item.refs.iter().filter(|r| r.len() > max_len) {
                let o = out.get_or_insert_with(|| OverLength {
                    count: 0,
                    longest: 0,
                    id: item.id.clone(),
                });
                o.count += 1;
                if r.len() > o.longest {
                    (o.longest, o.id) = (r.len(), item.id.clone());
                }
            }
        }
        out
    }
}

/// References longer than the decoder's `max_len` ([`Split::over_length`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverLength {
    pub count: usize,
    /// Words of the longest.
    pub longest: usize,
    /// The image it describes.
    pub id: String,
}

/// A validated data set: splits, vocabulary and features.
#[derive(Debug)]
pub struct Dataset {
    pub vocab: Vocab,
    pub train: Split,
    pub val: Split,
    pub test: Split,
    features: FeatureStore,
    dir: PathBuf,
    format: Format,
    /// [`Dataset::fingerprint`], computed on first use.
    fingerprint: std::sync::OnceLock<String>,
}

impl Dataset {
    /// Open `dir`, detecting the format and validating captions, features and vocabulary.
    pub fn open(dir: &Path) -> Result<Dataset, DataError> {
        Self::open_with(dir, &OpenOptions::default())
    }

    /// Open `dir` and require the vocabulary hash a model was trained with.
    pub fn open_expecting(dir: &Path, vocab_hash: &str) -> Result<Dataset, DataError> {
        Self::open_with(
            dir,
            &OpenOptions {
                vocab_hash: Some(vocab_hash.to_string()),
                ..OpenOptions::default()
            },
        )
    }

    /// Open `dir` with explicit options.
    pub fn open_with(dir: &Path, options: &OpenOptions) -> Result<Dataset, DataError> {
        if !dir.is_dir() {
            return Err(DataError::invalid(
                dir,
                "not a directory; give the data set directory (holding captions.json or captions.csv)",
            ));
        }
        let (captions_path, images, format) = read_captions(dir, options.format)?;
        validate_images(&captions_path, &images)?;

        let features = open_features(dir, &images)?;
        let index = features.row_index();
        let missing: Vec<String> = images
            .iter()
            .filter(|img| !index.contains_key(img.id.as_str()))
            .map(|img| img.id.clone())
            .collect();
        if !missing.is_empty() {
            return Err(DataError::MissingFeatures {
                path: features.path().to_path_buf(),
                missing: missing.len(),
                examples: examples(&missing, 5),
            });
        }
        let mut splits = [Split::default(), Split::default(), Split::default()];
        for img in images {
            let row = index[img.id.as_str()];
            splits[img.split as usize].items.push(Item {
                id: img.id,
                row,
                refs: img.refs,
            });
        }
        drop(index);
        let [train, val, test] = splits;

        let vocab_path = dir.join(VOCAB_JSON);
        let vocab = if vocab_path.is_file() {
            let vocab = Vocab::load(&vocab_path)?;
            if let Some(m) = options.min_count {
                if m.max(1) != vocab.min_count() {
                    return Err(DataError::invalid(
                        &vocab_path,
                        format!(
                            "built with min_count {} but {m} was asked for; delete it to rebuild or set min_count = {}",
                            vocab.min_count(),
                            vocab.min_count()
                        ),
                    ));
                }
            }
            vocab
        } else {
            let vocab = Vocab::build(
                train
                    .items
                    .iter()
                    .flat_map(|i| i.refs.iter().map(Vec::as_slice)),
                options.min_count.unwrap_or(1),
            );
            if let Err(e) = vocab.save(&vocab_path) {
                tracing::warn!("could not write the vocabulary beside the data set: {e}");
            }
            vocab
        };
        if let Some(expected) = &options.vocab_hash {
            vocab.check_hash(expected, &vocab_path)?;
        }
        Ok(Dataset {
            vocab,
            train,
            val,
            test,
            features,
            dir: dir.to_path_buf(),
            format,
            fingerprint: std::sync::OnceLock::new(),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// What the roles of a run must agree on, as the first 16 hex digits of a SHA-256: the
    /// vocabulary hash and every training image's id, feature row and references, in order.
    /// Two data sets with the same fingerprint give the same tasks, decodes and rewards.
    pub fn fingerprint(&self) -> &str {
        self.fingerprint.get_or_init(|| {
            use sha2::{Digest, Sha256};
            let mut h = Sha256::new();
            h.update(self.vocab.hash().as_bytes());
            for item in &self.train.items {
                h.update(b"\x1e");
                h.update(item.id.as_bytes());
                h.update((item.row as u64).to_le_bytes());
                for r in &item.refs {
                    h.update(b"\x1f");
                    h.update(r.join(" ").as_bytes());
                }
            }
            hex::encode(&h.finalize()[..8])
        })
    }

    /// The named subsets of `subsets.json` beside the captions (none when there is no such
    /// file), each as its image ids.
    pub fn subsets(&self) -> Result<BTreeMap<String, BTreeSet<String>>, DataError> {
        let path = self.dir.join(SUBSETS_JSON);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
            Err(e) => return Err(DataError::io(&path, e)),
        };
        serde_json::from_str(&text).map_err(|e| DataError::json(&path, &e))
    }

    /// The detected caption format (`Karpathy` or `Custom`).
    pub fn format(&self) -> Format {
        self.format
    }

    /// The feature file or directory.
    pub fn features_path(&self) -> &Path {
        self.features.path()
    }

    /// Number of rows in the feature store (may exceed the number of captioned images).
    pub fn feature_rows(&self) -> usize {
        self.features.ids().len()
    }

    pub fn fc_dim(&self) -> usize {
        self.features.fc_dim()
    }

    /// `(regions, dim)` of the attention features, if the store has them.
    pub fn att_shape(&self) -> Option<(usize, usize)> {
        self.features.att_shape()
    }

    /// Global features of `rows`, `[rows.len() * fc_dim]` row-major.
    pub fn fc_rows(&self, rows: &[usize]) -> Result<Vec<f32>, DataError> {
        self.features.fc_rows(rows)
    }

    /// Region features of `rows`, `[rows.len() * regions * dim]`, or `None` without `att`.
    pub fn att_rows(&self, rows: &[usize]) -> Result<Option<Vec<f32>>, DataError> {
        self.features.att_rows(rows)
    }

    pub fn split(&self, name: SplitName) -> &Split {
        match name {
            SplitName::Train => &self.train,
            SplitName::Val => &self.val,
            SplitName::Test => &self.test,
        }
    }
}

fn read_captions(
    dir: &Path,
    format: Format,
) -> Result<(PathBuf, Vec<RawImage>, Format), DataError> {
    let json = dir.join(CAPTIONS_JSON);
    let csv = dir.join(CAPTIONS_CSV);
    match (json.is_file(), csv.is_file()) {
        (true, true) => Err(DataError::invalid(
            dir,
            "holds both captions.json and captions.csv; keep only one",
        )),
        (false, false) => Err(DataError::invalid(
            dir,
            "no captions file; expected captions.json (Karpathy or custom) or captions.csv (custom)",
        )),
        (false, true) => {
            if format == Format::Karpathy {
                return Err(DataError::invalid(
                    &csv,
                    "format is karpathy but the captions are CSV; use format = \"custom\" or \"auto\"",
                ));
            }
            let bytes = std::fs::read(&csv).map_err(|e| DataError::io(&csv, e))?;
            let images = custom::parse_csv(&csv, &bytes)?;
            Ok((csv, images, Format::Custom))
        }
        (true, false) => {
            let bytes = std::fs::read(&json).map_err(|e| DataError::io(&json, e))?;
            let first = bytes.iter().find(|b| !b.is_ascii_whitespace()).copied();
            let detected = match (format, first) {
                (Format::Auto, Some(b'{')) => Format::Karpathy,
                (Format::Auto, Some(b'[')) => Format::Custom,
                (Format::Auto, _) => {
                    return Err(DataError::invalid(
                        &json,
                        "neither a JSON object with `images` (Karpathy) nor a JSON array of {image_id, split, caption} (custom)",
                    ))
                }
                (Format::Custom, Some(b'{')) | (Format::Karpathy, Some(b'[')) => {
                    let (holds, fits) = match format {
                        Format::Custom => ("a Karpathy file (a JSON object with `images`)", "karpathy"),
                        _ => ("a custom list (a JSON array of {image_id, split, caption})", "custom"),
                    };
                    return Err(DataError::invalid(
                        &json,
                        format!(
                            "format is {format} but the file is {holds}; use format = \"{fits}\" or \"auto\""
                        ),
                    ));
                }
                (f, _) => f,
            };
            let images = match detected {
                Format::Custom => custom::parse_json(&json, &bytes)?,
                _ => karpathy::parse(&json, &bytes)?,
            };
            Ok((json, images, detected))
        }
    }
}

fn validate_images(path: &Path, images: &[RawImage]) -> Result<(), DataError> {
    let mut seen = HashSet::new();
    for img in images {
        if !seen.insert(img.id.as_str()) {
            return Err(DataError::invalid(
                path,
                format!(
                    "image id {} appears twice; give every image one entry",
                    img.id
                ),
            ));
        }
        if img.refs.is_empty() {
            return Err(DataError::NoCaptions {
                path: path.to_path_buf(),
                id: img.id.clone(),
            });
        }
    }
    for split in SplitName::ALL {
        if !images.iter().any(|i| i.split == split) {
            return Err(DataError::EmptySplit {
                path: path.to_path_buf(),
                split: split.to_string(),
            });
        }
    }
    Ok(())
}

fn open_features(dir: &Path, images: &[RawImage]) -> Result<FeatureStore, DataError> {
    let st = dir.join(FEATURES_SAFETENSORS);
    let npy_dir = dir.join(FEATURES_DIR);
    if st.is_file() {
        let ids = dir.join(FEATURES_IDS);
        if !ids.is_file() {
            return Err(DataError::invalid(
                &ids,
                "missing: features.safetensors needs features.ids.json, a JSON array of the image id of each row",
            ));
        }
        Ok(FeatureStore::Safetensors(SafetensorsStore::open(
            &st, &ids,
        )?))
    } else if npy_dir.is_dir() {
        let ids = images.iter().map(|i| i.id.clone()).collect();
        Ok(FeatureStore::Npy(NpyStore::open(&npy_dir, ids)?))
    } else {
        Err(DataError::invalid(
            dir,
            "no features; expected features.safetensors + features.ids.json or a features/ directory with fc/<id>.npy",
        ))
    }
}
