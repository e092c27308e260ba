//! Karpathy-split captions JSON (COCO / Flickr `dataset_*.json`):
//! `{"images": [{"imgid", "cocoid"?, "filename", "split", "sentences": [{"raw", "tokens"}]}]}`.
//!
//! The image id is `cocoid` when present, else `imgid`, else the file stem of `filename`
//! (the ids self-critical.pytorch names its feature files by). `restval` is folded into
//! train. References are re-tokenized from `raw` with [`tokenize`] so that training and
//! scoring see the same tokens; `tokens` is used only when `raw` is missing.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::dataset::{RawImage, SplitName};
use super::error::DataError;
use super::tokenize;

#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct KarpathyFile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset: Option<String>,
    pub images: Vec<KarpathyImage>,
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct KarpathyImage {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imgid: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cocoid: Option<serde_json::Value>,
    #[serde(default)]
    pub filename: String,
    pub split: String,
    #[serde(default)]
    pub sentences: Vec<KarpathySentence>,
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct KarpathySentence {
    #[serde(default)]
    pub raw: String,
    #[serde(default)]
    pub tokens: Vec<String>,
}

fn id_text(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Parse a Karpathy-split file into images with tokenized references.
pub(crate) fn parse(path: &Path, bytes: &[u8]) -> Result<Vec<RawImage>, DataError> {
    let file: KarpathyFile = serde_json::from_slice(bytes).map_err(|e| {
        // Well-formed JSON of the wrong shape (`{}`, another tool's file) is not "malformed".
        match serde_json::from_slice::<serde_json::Value>(bytes) {
            Ok(serde_json::Value::Object(top)) if !top.contains_key("images") => {
                DataError::invalid(
                    path,
                    "is a JSON object without `images`: a Karpathy-split file is \
                 {\"images\": [{\"cocoid\", \"split\", \"sentences\": [{\"raw\"}]}]}",
                )
            }
            _ => DataError::json(path, &e),
        }
    })?;
    let mut out = Vec::with_capacity(file.images.len());
    for (i, img) in file.images.into_iter().enumerate() {
        let id = img
            .cocoid
            .as_ref()
            .and_then(id_text)
            .or_else(|| img.imgid.as_ref().and_then(id_text))
            .or_else(|| {
                Path::new(&img.filename)
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .filter(|s| !s.is_empty())
            })
            .ok_or_else(|| {
                DataError::invalid(
                    path,
                    format!("images[{i}] has no `cocoid`, `imgid` or `filename` to identify it"),
                )
            })?;
        let split = match img.split.as_str() {
            "train" | "restval" => SplitName::Train,
            "val" => SplitName::Val,
            "test" => SplitName::Test,
            other => {
                return Err(DataError::invalid(
                    path,
                    format!(
                    "images[{i}] (id {id}) has split {other:?}; allowed: train, restval, val, test"
                ),
                ))
            }
        };
        let refs: Vec<Vec<String>> = img
            .sentences
            .iter()
            .map(|s| {
                if s.raw.trim().is_empty() {
                    s.tokens.iter().flat_map(|t| tokenize(t)).collect()
                } else {
                    tokenize(&s.raw)
                }
            })
            .filter(|r: &Vec<String>| !r.is_empty())
            .collect();
        out.push(RawImage { id, split, refs });
    }
    Ok(out)
}
