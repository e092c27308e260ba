//! caprl-clip: joint text–image embeddings (paper 004): the dual encoder behind the `clip`, `clip-i2t`,
//! `clip-s` and `disc` rewards and the retrieval metrics of `caprl eval`.
//!
//! - [`dual`]: a small CLIP-style dual encoder of our own (image tower over the data set's
//!   features, text tower over vocabulary ids, learnable temperature), trained by
//!   `caprl clip train` with the symmetric InfoNCE loss ([`train`]).
//! - [`hf`]: a loader for Hugging Face CLIP checkpoints from a local directory
//!   (`config.json`, `model.safetensors`, `tokenizer.json`), for users with real CLIP weights.
//! - [`disc`]: the discriminator `P_D(x)`, a 3-layer MLP on the frozen embeddings, and
//!   [`DiscScorer`], its forward pass on host arrays for reward workers.
//! - [`retrieval`]: recall@k in both directions and nearest-image mining.
//!
//! Every encoder hands out L2-normalised rows in an [`Embeddings`] table, so a similarity is a
//! dot product.

pub mod disc;
mod disc_scorer;
pub mod dual;
mod gemm;
pub mod hf;
mod params;
pub mod retrieval;
pub mod train;

use std::path::{Path, PathBuf};

use caprl_data::{Dataset, Vocab};

pub use disc::Discriminator;
pub use disc_scorer::DiscScorer;
pub use dual::{DualConfig, DualEncoder};
pub use gemm::{matmul, transpose};

/// What went wrong with an encoder; each message says what to fix.
#[derive(Debug, thiserror::Error)]
pub enum ClipError {
    #[error("tensor error: {0}")]
    Candle(#[from] candle_core::Error),
    #[error("{path}: {reason}")]
    File { path: PathBuf, reason: String },
    #[error("{0}")]
    Input(String),
    #[error(transparent)]
    Data(#[from] caprl_data::DataError),
    #[error(transparent)]
    Snapshot(#[from] caprl_common::snapshot::SnapshotError),
    #[error(transparent)]
    Model(#[from] caprl_model::model::ModelError),
}

pub type Result<T> = std::result::Result<T, ClipError>;

impl From<caprl_model::model::params::Poisoned> for ClipError {
    fn from(e: caprl_model::model::params::Poisoned) -> Self {
        ClipError::Input(e.to_string())
    }
}

/// Row-major table of L2-normalised embeddings, `len × dim`.
#[derive(Debug, Clone, PartialEq)]
pub struct Embeddings {
    pub dim: usize,
    pub data: Vec<f32>,
}

impl Embeddings {
    /// Normalises each row of `data` (`len × dim`) to unit length (zero rows stay zero).
    pub fn normalised(dim: usize, mut data: Vec<f32>) -> Self {
        for row in data.chunks_mut(dim.max(1)) {
            let n = row.iter().map(|x| x * x).sum::<f32>().sqrt();
            if n > 0.0 {
                row.iter_mut().for_each(|x| *x /= n);
            }
        }
        Self { dim, data }
    }

    pub fn len(&self) -> usize {
        self.data.len() / self.dim.max(1)
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.dim..(i + 1) * self.dim]
    }

    /// Cosine similarity of row `i` of `self` and row `j` of `other`.
    pub fn dot(&self, i: usize, other: &Embeddings, j: usize) -> f32 {
        dot(self.row(i), other.row(j))
    }
}

/// `Σ aₖbₖ` in eight fixed lanes (vectorised by the compiler; the same order every call).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for k in 0..8 {
            lanes[k] += x[k] * y[k];
        }
    }
    lanes.iter().sum::<f32>() + tail
}

/// A joint text–image embedding space: what rewards and retrieval metrics need.
pub trait Encoder: Send + Sync {
    /// Embedding width.
    fn dim(&self) -> usize;
    /// Embeddings of captions given as vocabulary ids (an EOS ends a caption).
    fn embed_captions(&self, captions: &[Vec<u32>]) -> Result<Embeddings>;
    /// Embeddings of the images at feature rows `rows` of `data`.
    fn embed_images(&self, data: &Dataset, rows: &[usize]) -> Result<Embeddings>;
}

/// Opens an encoder: a `.safetensors` file written by `caprl clip train` (checked against
/// `vocab`), or a directory holding a Hugging Face CLIP checkpoint.
pub fn open_encoder(path: &Path, vocab: &Vocab) -> Result<Box<dyn Encoder>> {
    if path.is_dir() {
        Ok(Box::new(hf::HfClip::open(path, vocab)?))
    } else {
        Ok(Box::new(DualEncoder::load(path, vocab)?))
    }
}
