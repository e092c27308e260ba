//! The simple custom caption format: one row per caption, either
//! `captions.csv` with header `image_id,split,caption`, or
//! `captions.json` as `[{"image_id": .., "split": .., "caption": ..}]`.
//! Images keep the order of their first caption; `restval` counts as train.

use std::collections::HashMap;
use std::path::Path;

use serde::Deserialize;

use super::dataset::{RawImage, SplitName};
use super::error::DataError;
use super::tokenize;

#[derive(Debug, Deserialize)]
struct Row {
    image_id: serde_json::Value,
    split: String,
    caption: String,
}

fn parse_split(path: &Path, at: &str, split: &str) -> Result<SplitName, DataError> {
    match split.trim() {
        "train" | "restval" => Ok(SplitName::Train),
        "val" => Ok(SplitName::Val),
        "test" => Ok(SplitName::Test),
        other => Err(DataError::invalid(
            path,
            format!("{at}: split {other:?} is not one of train, restval, val, test"),
        )),
    }
}

/// Collects rows into images, checking each image keeps one split.
struct Grouper<'p> {
    path: &'p Path,
    images: Vec<RawImage>,
    index: HashMap<String, usize>,
}

impl<'p> Grouper<'p> {
    fn new(path: &'p Path) -> Self {
        Grouper {
            path,
            images: Vec::new(),
            index: HashMap::new(),
        }
    }

    fn add(&mut self, at: &str, id: String, split: &str, caption: &str) -> Result<(), DataError> {
        if id.trim().is_empty() {
            return Err(DataError::invalid(
                self.path,
                format!("{at}: empty image_id"),
            ));
        }
        let split = parse_split(self.path, at, split)?;
        let tokens = tokenize(caption);
        let i = match self.index.get(&id) {
            Some(&i) => {
                if self.images[i].split != split {
                    return Err(DataError::invalid(
                        self.path,
                        format!(
                            "{at}: image {id} is in split {} here but {} in an earlier row; an image belongs to one split",
                            split, self.images[i].split
                        ),
                    ));
                }
                i
            }
            None => {
                self.index.insert(id.clone(), self.images.len());
                self.images.push(RawImage {
                    id,
                    split,
                    refs: Vec::new(),
                });
                self.images.len() - 1
            }
        };
        if !tokens.is_empty() {
            self.images[i].refs.push(tokens);
        }
        Ok(())
    }
}

/// Parse `captions.csv`.
pub(crate) fn parse_csv(path: &Path, bytes: &[u8]) -> Result<Vec<RawImage>, DataError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .trim(csv::Trim::Headers)
        .from_reader(bytes);
    let headers = reader.headers().map_err(|e| csv_err(path, &e))?.clone();
    let find = |name: &str| {
        headers
            .iter()
            .position(|h| h == name)
            .ok_or_else(|| DataError::Csv {
                path: path.to_path_buf(),
                line: 1,
                message: format!(
                    "header {:?} has no column `{name}`; expected image_id,split,caption",
                    headers.iter().collect::<Vec<_>>()
                ),
            })
    };
    let (c_id, c_split, c_caption) = (find("image_id")?, find("split")?, find("caption")?);
    let mut grouper = Grouper::new(path);
    for record in reader.records() {
        let record = record.map_err(|e| csv_err(path, &e))?;
        let line = record.position().map(|p| p.line()).unwrap_or(0);
        let get = |c: usize| record.get(c).unwrap_or("");
        grouper.add(
            &format!("line {line}"),
            get(c_id).trim().to_string(),
            get(c_split),
            get(c_caption),
        )?;
    }
    Ok(grouper.images)
}

fn csv_err(path: &Path, e: &csv::Error) -> DataError {
    DataError::Csv {
        path: path.to_path_buf(),
        line: e.position().map(|p| p.line()).unwrap_or(0),
        message: e.to_string(),
    }
}

/// Parse the JSON form (an array of rows).
pub(crate) fn parse_json(path: &Path, bytes: &[u8]) -> Result<Vec<RawImage>, DataError> {
    let rows: Vec<Row> = serde_json::from_slice(bytes).map_err(|e| DataError::json(path, &e))?;
    let mut grouper = Grouper::new(path);
    for (i, row) in rows.into_iter().enumerate() {
        let id = match &row.image_id {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Number(n) => n.to_string(),
            other => {
                return Err(DataError::invalid(
                    path,
                    format!("entry {i}: image_id is {other}; use a string or an integer"),
                ))
            }
        };
        grouper.add(&format!("entry {i}"), id, &row.split, &row.caption)?;
    }
    Ok(grouper.images)
}
