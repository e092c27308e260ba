//! A printable summary of any data set: images and captions per split, vocabulary,
//! caption lengths and feature shapes. `caprl data stats` and `caprl data synth` print it.

use std::fmt;
use std::path::PathBuf;

use super::dataset::{Dataset, Format, SplitName};

/// Counts for one split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitStats {
    pub name: SplitName,
    pub images: usize,
    pub captions: usize,
}

/// Summary of a data set; `Display` renders it as text with a length histogram.
#[derive(Debug, Clone, PartialEq)]
pub struct DatasetStats {
    pub dir: PathBuf,
    pub format: Format,
    pub splits: Vec<SplitStats>,
    pub images: usize,
    pub captions: usize,
    pub vocab_size: usize,
    pub vocab_hash: String,
    /// `length_histogram[n]` = number of captions (all splits) with `n` tokens.
    pub length_histogram: Vec<usize>,
    pub mean_length: f64,
    pub fc_dim: usize,
    pub att_shape: Option<(usize, usize)>,
    pub feature_rows: usize,
    /// Share of training tokens that map to `<unk>`.
    pub train_unk_rate: f64,
}

/// Summarize an open data set.
pub fn stats(ds: &Dataset) -> DatasetStats {
    let mut splits = Vec::new();
    let mut histogram: Vec<usize> = Vec::new();
    let mut tokens = 0usize;
    for name in SplitName::ALL {
        let split = ds.split(name);
        for refs in split.iter().flat_map(|i| i.refs.iter()) {
            if histogram.len() <= refs.len() {
                histogram.resize(refs.len() + 1, 0);
            }
            histogram[refs.len()] += 1;
            tokens += refs.len();
        }
        splits.push(SplitStats {
            name,
            images: split.len(),
            captions: split.captions(),
        });
    }
    let images = splits.iter().map(|s| s.images).sum();
    let captions: usize = splits.iter().map(|s| s.captions).sum();
    let (mut train_tokens, mut unk) = (0usize, 0usize);
    for w in ds.train.iter().flat_map(|i| i.refs.iter().flatten()) {
        train_tokens += 1;
        if ds.vocab.id(w) == super::vocab::Vocab::UNK {
            unk += 1;
        }
    }
    DatasetStats {
        dir: ds.dir().to_path_buf(),
        format: ds.format(),
        splits,
        images,
        captions,
        vocab_size: ds.vocab.len(),
        vocab_hash: ds.vocab.hash().to_string(),
        length_histogram: histogram,
        mean_length: if captions == 0 {
            0.0
        } else {
            tokens as f64 / captions as f64
        },
        fc_dim: ds.fc_dim(),
        att_shape: ds.att_shape(),
        feature_rows: ds.feature_rows(),
        train_unk_rate: if train_tokens == 0 {
            0.0
        } else {
            unk as f64 / train_tokens as f64
        },
    }
}

const BAR_WIDTH: usize = 40;

impl fmt::Display for DatasetStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "data set   {} ({})", self.dir.display(), self.format)?;
        for s in &self.splits {
            writeln!(
                f,
                "  {:<5}    {:>8} images {:>9} captions",
                s.name.as_str(),
                s.images,
                s.captions
            )?;
        }
        writeln!(
            f,
            "  total    {:>8} images {:>9} captions",
            self.images, self.captions
        )?;
        writeln!(
            f,
            "vocab      {} ids (hash {}), train <unk> rate {:.4}",
            self.vocab_size, self.vocab_hash, self.train_unk_rate
        )?;
        match self.att_shape {
            Some((r, d)) => writeln!(
                f,
                "features   {} rows, fc {}, att {} x {}",
                self.feature_rows, self.fc_dim, r, d
            )?,
            None => writeln!(
                f,
                "features   {} rows, fc {}, no att",
                self.feature_rows, self.fc_dim
            )?,
        }
        writeln!(f, "caption length (tokens), mean {:.2}", self.mean_length)?;
        let max = self
            .length_histogram
            .iter()
            .copied()
            .max()
            .unwrap_or(0)
            .max(1);
        for (len, &count) in self.length_histogram.iter().enumerate() {
            if count == 0 {
                continue;
            }
            let bar = (count * BAR_WIDTH).div_ceil(max);
            writeln!(f, "  {len:>3} {:<BAR_WIDTH$} {count}", "#".repeat(bar))?;
        }
        Ok(())
    }
}
