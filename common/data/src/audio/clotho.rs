//! The Clotho captions format: one CSV per split with header
//! `file_name,caption_1,caption_2,caption_3,caption_4,caption_5` and the split's audio files in
//! a directory beside it (`clotho_captions_development.csv` + `development/`, likewise
//! `validation` and `evaluation`). Captions are preprocessed as paper 000 does: lowercased,
//! punctuation removed (the project's tokenizer, words joined by spaces).

use std::path::{Path, PathBuf};

use crate::tokenize;
use crate::{DataError, SplitName};

/// Clotho's split names and the data set split each becomes.
pub const CLOTHO_SPLITS: [(&str, SplitName); 3] = [
    ("development", SplitName::Train),
    ("validation", SplitName::Val),
    ("evaluation", SplitName::Test),
];

/// Caption columns of a Clotho CSV.
pub const CAPTION_COLUMNS: [&str; 5] = [
    "caption_1",
    "caption_2",
    "caption_3",
    "caption_4",
    "caption_5",
];

/// One clip of a split: its audio file and its preprocessed captions.
#[derive(Debug, Clone, PartialEq)]
pub struct ClothoClip {
    pub file_name: String,
    pub path: PathBuf,
    pub captions: Vec<String>,
}

/// The CSV of Clotho split `name` under `root`.
pub fn clotho_csv(root: &Path, name: &str) -> PathBuf {
    root.join(format!("clotho_captions_{name}.csv"))
}

/// Reads `csv` and checks that every `file_name` exists in `audio_dir`.
pub fn read_clotho_csv(csv: &Path, audio_dir: &Path) -> Result<Vec<ClothoClip>, DataError> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(false)
        .from_path(csv)
        .map_err(|e| csv_err(csv, e))?;
    let headers = reader.headers().map_err(|e| csv_err(csv, e))?.clone();
    let col = |name: &str| -> Result<usize, DataError> {
        headers
            .iter()
            .position(|h| h.trim().trim_start_matches('\u{feff}') == name)
            .ok_or_else(|| {
                DataError::invalid(
                    csv,
                    format!(
                        "no `{name}` column (header is {:?}); a Clotho captions CSV has columns file_name, {}",
                        headers.iter().collect::<Vec<_>>(),
                        CAPTION_COLUMNS.join(", ")
                    ),
                )
            })
    };
    let file_col = col("file_name")?;
    let caption_cols = CAPTION_COLUMNS
        .iter()
        .map(|c| col(c))
        .collect::<Result<Vec<_>, _>>()?;
    let mut clips = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (i, record) in reader.records().enumerate() {
        let record = record.map_err(|e| csv_err(csv, e))?;
        let line = record.position().map_or(i as u64 + 2, |p| p.line());
        let file_name = record.get(file_col).unwrap_or("").trim().to_string();
        if file_name.is_empty() {
            return Err(DataError::invalid(
                csv,
                format!("line {line}: empty file_name"),
            ));
        }
        if !seen.insert(file_name.clone()) {
            return Err(DataError::invalid(
                csv,
                format!("line {line}: {file_name} is listed twice; each clip needs one row"),
            ));
        }
        let path = audio_dir.join(&file_name);
        if !path.is_file() {
            return Err(DataError::invalid(
                csv,
                format!(
                    "line {line}: audio file {} does not exist; put the split's audio in {} or remove the row",
                    path.display(),
                    audio_dir.display()
                ),
            ));
        }
        let captions: Vec<String> = caption_cols
            .iter()
            .map(|&c| tokenize(record.get(c).unwrap_or("")).join(" "))
            .filter(|c| !c.is_empty())
            .collect();
        if captions.is_empty() {
            return Err(DataError::NoCaptions {
                path: csv.to_path_buf(),
                id: file_name,
            });
        }
        clips.push(ClothoClip {
            file_name,
            path,
            captions,
        });
    }
    Ok(clips)
}

fn csv_err(path: &Path, e: csv::Error) -> DataError {
    if let csv::ErrorKind::Io(io) = e.kind() {
        return DataError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::new(io.kind(), io.to_string()),
        };
    }
    DataError::Csv {
        path: path.to_path_buf(),
        line: e.position().map_or(0, |p| p.line()),
        message: e.to_string(),
    }
}
