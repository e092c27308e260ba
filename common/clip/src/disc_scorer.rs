//! The discriminator's forward pass on host arrays, for reward workers: `P_D` of a rollout's
//! captions without tensors. Layer 1 acts on `[f^T; f^I]`, so it splits into a text half and
//! an image half; the image half is computed once per distinct image of the rollout, not once
//! per caption. Captions travel as columns (`dim × n`, the layout the reward's similarity
//! product already made), so every layer is one `gemm` that reads its operands as they lie.

use super::gemm::{matmul, transpose};
use super::{ClipError, Embeddings, Result};

/// A snapshot of a [`super::Discriminator`]'s weights, ready to score.
#[derive(Debug, Clone)]
pub struct DiscScorer {
    dim: usize,
    hidden: usize,
    /// Layer 1 over the text embedding, `hidden × dim`.
    w1_text: Vec<f32>,
    /// Layer 1 over the image embedding, transposed: `dim × hidden`.
    w1_image_t: Vec<f32>,
    b1: Vec<f32>,
    /// `hidden × hidden`.
    w2: Vec<f32>,
    b2: Vec<f32>,
    w3: Vec<f32>,
    b3: f32,
}

impl DiscScorer {
    /// From the three layers' weights (`fc1` is `hidden × 2·dim`, text columns first).
    pub(crate) fn new(
        dim: usize,
        fc1: (Vec<f32>, Vec<f32>),
        fc2: (Vec<f32>, Vec<f32>),
        fc3: (Vec<f32>, f32),
    ) -> Self {
        let hidden = fc1.1.len();
        let (mut w1_text, mut w1_image) = (Vec::new(), Vec::new());
        for row in fc1.0.chunks_exact(2 * dim) {
            w1_text.extend_from_slice(&row[..dim]);
            w1_image.extend_from_slice(&row[dim..]);
        }
        Self {
            dim,
            hidden,
            w1_text,
            w1_image_t: transpose(&w1_image, dim),
            b1: fc1.1,
            w2: fc2.0,
            b2: fc2.1,
            w3: fc3.0,
            b3: fc3.1,
        }
    }

    /// `P_D` of caption `j` paired with image `image_of[j]` of `images`, the `n` captions given
    /// as the columns of `texts_t` (`dim × n`, row-major: see [`super::transpose`]).
    pub fn probabilities(
        &self,
        texts_t: &[f32],
        images: &Embeddings,
        image_of: &[usize],
    ) -> Result<Vec<f32>> {
        let (n, d, h) = (image_of.len(), self.dim, self.hidden);
        if texts_t.len() != d * n || images.dim != d {
            return Err(ClipError::Input(format!(
                "discriminator over {d}-d embeddings got {} text values for {n} captions and \
                 images of {}",
                texts_t.len(),
                images.dim
            )));
        }
        if let Some(&bad) = image_of.iter().find(|&&i| i >= images.len()) {
            return Err(ClipError::Input(format!(
                "image index {bad} is outside the {} images given",
                images.len()
            )));
        }
        if n == 0 {
            return Ok(Vec::new());
        }
        // Hidden units as rows, captions as columns.
        let image_half = matmul(&images.data, &self.w1_image_t, d);
        let mut x = matmul(&self.w1_text, texts_t, d);
        for (u, row) in x.chunks_exact_mut(n).enumerate() {
            for (v, &i) in row.iter_mut().zip(image_of) {
                *v = (*v + image_half[i * h + u] + self.b1[u]).max(0.0);
            }
        }
        let mut y = matmul(&self.w2, &x, h);
        for (row, b) in y.chunks_exact_mut(n).zip(&self.b2) {
            row.iter_mut().for_each(|v| *v = (*v + b).max(0.0));
        }
        let mut z = vec![self.b3; n];
        for (row, w) in y.chunks_exact(n).zip(&self.w3) {
            z.iter_mut().zip(row).for_each(|(z, v)| *z += w * v);
        }
        Ok(z.into_iter().map(|z| 1.0 / (1.0 + (-z).exp())).collect())
    }
}
