//! Scoring a whole caption file against a reference file (`caprl score`).
//!
//! REFS is COCO annotations (`{"annotations": [{"image_id", "caption"}]}`)
//! or `{"<id>": ["ref", …]}`; CANDS is COCO results (`[{"image_id",
//! "caption"}]`) or `{"<id>": "caption"}`. Ids are compared as strings
//! (`42` and `"42"` are the same image). Text is split on whitespace only:
//! give it PTB-tokenised, lower-cased text to reproduce published numbers
//! (see the [`score`](super) module docs). The images scored are those in
//! CANDS, as pycocoevalcap's `COCOEvalCap` does, and corpus-mode df counts
//! their references only.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use super::bleu::BleuStats;
use super::df::DocFreq;
use super::meteor::{Meteor, MeteorError};
use super::texts::{score_texts, Extra, Idf};

/// What is wrong with a REFS or CANDS file.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The file is not valid JSON.
    #[error("{path}:{line}:{column}: not valid JSON: {msg}")]
    Json {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// The parser's message.
        msg: String,
    },
    /// The JSON does not have one of the accepted shapes.
    #[error("{path}: {msg}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What was expected.
        msg: String,
    },
    /// Some candidate ids have no references.
    #[error("{count} candidate image id(s) have no references in {refs}, e.g. {examples}")]
    MissingRefs {
        /// The REFS file.
        refs: PathBuf,
        /// How many ids lack references.
        count: usize,
        /// A few of them, comma separated.
        examples: String,
    },
}

/// BLEU-1..4, ROUGE-L, CIDEr-D (and METEOR when asked for) of one image or of the corpus.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Scores {
    /// BLEU-1..4.
    pub bleu: [f64; 4],
    /// ROUGE-L.
    pub rouge_l: f64,
    /// CIDEr-D.
    pub cider_d: f64,
    /// METEOR 1.5 ([`Report::add_meteor`]); the corpus value is the jar's aggregate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub meteor: Option<f64>,
}

/// The scores of one image.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ImageScores {
    /// Image id as written in the files.
    pub image_id: String,
    /// Its scores.
    #[serde(flatten)]
    pub scores: Scores,
}

/// Corpus scores and per-image scores, in CANDS order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// Corpus scores (BLEU from summed counts; ROUGE-L and CIDEr-D means).
    pub corpus: Scores,
    /// Per-image scores.
    pub images: Vec<ImageScores>,
}

impl Report {
    /// Adds METEOR to the report [`score_captions`] made from the same `refs` and `cands`, computed
    /// by `meteor` (the jar pycocoevalcap runs; see [`super::meteor`]).
    pub fn add_meteor(
        &mut self,
        meteor: &mut Meteor,
        refs: &BTreeMap<String, Vec<String>>,
        cands: &[(String, String)],
    ) -> Result<(), MeteorError> {
        let sets: Vec<&[String]> = cands
            .iter()
            .map(|(id, _)| refs.get(id).map(Vec::as_slice).unwrap_or_default())
            .collect();
        let texts: Vec<&str> = cands.iter().map(|(_, c)| c.as_str()).collect();
        let (corpus, per_image) = meteor.compute_score(&sets, &texts)?;
        self.corpus.meteor = Some(corpus);
        for (image, m) in self.images.iter_mut().zip(per_image) {
            image.scores.meteor = Some(m);
        }
        Ok(())
    }
}

fn read_json(path: &Path) -> Result<Value, EvalError> {
    let text = std::fs::read_to_string(path).map_err(|source| EvalError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|e| EvalError::Json {
        path: path.to_path_buf(),
        line: e.line(),
        column: e.column(),
        msg: e.to_string(),
    })
}

fn id_string(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn format_err(path: &Path, msg: impl Into<String>) -> EvalError {
    EvalError::Format {
        path: path.to_path_buf(),
        msg: msg.into(),
    }
}

fn coco_entry(path: &Path, i: usize, e: &Value, list: &str) -> Result<(String, String), EvalError> {
    let id = id_string(&e["image_id"]).ok_or_else(|| {
        format_err(
            path,
            format!("{list}[{i}]: \"image_id\" must be a number or string"),
        )
    })?;
    let caption = e["caption"]
        .as_str()
        .ok_or_else(|| format_err(path, format!("{list}[{i}]: \"caption\" must be a string")))?;
    Ok((id, caption.to_owned()))
}

/// Reads REFS: image id → reference captions.
pub fn load_refs(path: &Path) -> Result<BTreeMap<String, Vec<String>>, EvalError> {
    let json = read_json(path)?;
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    match &json {
        Value::Object(m) if m.contains_key("annotations") => {
            let anns = m["annotations"]
                .as_array()
                .ok_or_else(|| format_err(path, "\"annotations\" must be a list"))?;
            for (i, a) in anns.iter().enumerate() {
                let (id, cap) = coco_entry(path, i, a, "annotations")?;
                out.entry(id).or_default().push(cap);
            }
        }
        Value::Object(m) => {
            for (id, v) in m {
                let caps = v.as_array().ok_or_else(|| {
                    format_err(path, format!("\"{id}\": expected a list of reference captions"))
                })?;
                let caps = caps
                    .iter()
                    .map(|c| c.as_str().map(str::to_owned))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| format_err(path, format!("\"{id}\": every reference must be a string")))?;
                out.insert(id.clone(), caps);
            }
        }
        _ => {
            return Err(format_err(
                path,
                "expected COCO annotations {\"annotations\": [{\"image_id\", \"caption\"}]} or {\"<id>\": [\"ref\", ...]}",
            ))
        }
    }
    Ok(out)
}

/// Reads CANDS: (image id, caption) in file order; an id may appear once.
pub fn load_cands(path: &Path) -> Result<Vec<(String, String)>, EvalError> {
    let json = read_json(path)?;
    let out: Vec<(String, String)> =
        match &json {
            Value::Array(list) => list
                .iter()
                .enumerate()
                .map(|(i, e)| coco_entry(path, i, e, "results"))
                .collect::<Result<_, _>>()?,
            Value::Object(m) => m
                .iter()
                .map(|(id, v)| {
                    v.as_str()
                        .map(|c| (id.clone(), c.to_owned()))
                        .ok_or_else(|| {
                            format_err(path, format!("\"{id}\": the caption must be a string"))
                        })
                })
                .collect::<Result<_, _>>()?,
            _ => return Err(format_err(
                path,
                "expected COCO results [{\"image_id\", \"caption\"}] or {\"<id>\": \"caption\"}",
            )),
        };
    let mut seen = std::collections::HashSet::new();
    for (id, _) in &out {
        if !seen.insert(id.as_str()) {
            return Err(format_err(
                path,
                format!("image id {id} has more than one caption; give one per image"),
            ));
        }
    }
    if out.is_empty() {
        // Every score of nothing would print as 0, which reads like a model that failed.
        return Err(format_err(
            path,
            "holds no captions; give at least one (COCO results [{\"image_id\", \"caption\"}] \
             or {\"<id>\": \"caption\"})",
        ));
    }
    Ok(out)
}

/// Scores `cands` against `refs` (paths are for error messages). `df` is
/// the precomputed table, or `None` for corpus mode. With `parallel`, images
/// are scored on rayon's pool.
pub fn score_captions(
    refs_path: &Path,
    refs: &BTreeMap<String, Vec<String>>,
    cands: &[(String, String)],
    df: Option<DocFreq>,
    parallel: bool,
) -> Result<Report, EvalError> {
    let missing: Vec<&str> = cands
        .iter()
        .filter(|(id, _)| refs.get(id).is_none_or(|r| r.is_empty()))
        .map(|(id, _)| id.as_str())
        .collect();
    if !missing.is_empty() {
        let mut examples = missing
            .iter()
            .take(5)
            .copied()
            .collect::<Vec<_>>()
            .join(", ");
        if missing.len() > 5 {
            examples.push_str(", ...");
        }
        return Err(EvalError::MissingRefs {
            refs: refs_path.to_path_buf(),
            count: missing.len(),
            examples,
        });
    }
    let sets: Vec<&[String]> = cands.iter().map(|(id, _)| refs[id].as_slice()).collect();
    let texts: Vec<&str> = cands.iter().map(|(_, c)| c.as_str()).collect();
    let idf = match &df {
        Some(d) => Idf::Table(d),
        None => Idf::Corpus,
    };
    let extra = Extra {
        bleu: true,
        rouge: true,
    };
    let per: Vec<(BleuStats, Scores)> = score_texts(&sets, &texts, idf, extra, parallel)
        .into_iter()
        .map(|r| {
            let s = Scores {
                bleu: r.bleu.scores(),
                rouge_l: r.rouge,
                cider_d: r.cider,
                meteor: None,
            };
            (r.bleu, s)
        })
        .collect();
    let mut total = BleuStats::default();
    for (s, _) in &per {
        total.add(s);
    }
    let n = per.len().max(1) as f64;
    let corpus = Scores {
        bleu: total.scores(),
        rouge_l: per.iter().map(|(_, s)| s.rouge_l).sum::<f64>() / n,
        cider_d: per.iter().map(|(_, s)| s.cider_d).sum::<f64>() / n,
        meteor: None,
    };
    let images = per
        .into_iter()
        .zip(cands)
        .map(|((_, scores), (id, _))| ImageScores {
            image_id: id.clone(),
            scores,
        })
        .collect();
    Ok(Report { corpus, images })
}
