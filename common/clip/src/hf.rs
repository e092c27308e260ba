//! Hugging Face CLIP checkpoints from a local directory (`config.json`, `model.safetensors`,
//! `tokenizer.json`), run with candle-transformers' CLIP towers on the CPU.
//!
//! Captions go through the checkpoint's own tokenizer after the vocabulary ids are turned back
//! into words. Images are not in a captioning data set, only their features: `caprl features
//! --clip DIR` writes the CLIP image embeddings as the data set's features, and
//! [`Encoder::embed_images`] reads them back.

mod config;
mod pixels;
mod tokens;

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, IndexOp, Module, Tensor};
use candle_nn::{Linear, VarBuilder};
use candle_transformers::models::clip::text_model::ClipTextTransformer;
use candle_transformers::models::clip::vision_model::ClipVisionTransformer;
use rayon::prelude::*;

use super::{ClipError, Embeddings, Encoder, Result};
use caprl_data::{Dataset, Vocab, SPECIALS};
use caprl_model::model::EOS;
use tokens::TextTokenizer;

/// The model configuration, weights and tokenizer inside a checkpoint directory.
const CONFIG_FILE: &str = "config.json";
const WEIGHTS_FILE: &str = "model.safetensors";
const TOKENIZER_FILE: &str = "tokenizer.json";

/// Captions or images per forward pass: bounds the activations held at once.
const BATCH: usize = 32;

/// A CLIP checkpoint: text and vision towers with their projections into the joint space.
pub struct HfClip {
    text_model: ClipTextTransformer,
    text_projection: Linear,
    vision_model: ClipVisionTransformer,
    visual_projection: Linear,
    tokenizer: TextTokenizer,
    vocab: Vocab,
    dir: PathBuf,
    image_size: usize,
    dim: usize,
    device: Device,
}

impl HfClip {
    /// Loads the checkpoint in `dir`; `vocab` turns the caption ids of
    /// [`Encoder::embed_captions`] back into words.
    pub fn open(dir: &Path, vocab: &Vocab) -> Result<Self> {
        let config_path = existing(dir, CONFIG_FILE)?;
        let weights = existing(dir, WEIGHTS_FILE)?;
        let tokenizer_path = existing(dir, TOKENIZER_FILE)?;
        let config = config::read(&config_path)?;
        let text = &config.text_config;
        let tokenizer = TextTokenizer::open(
            &tokenizer_path,
            text.vocab_size,
            text.max_position_embeddings,
        )?;

        let device = Device::Cpu;
        let mismatch = |e: candle_core::Error| ClipError::File {
            path: weights.clone(),
            reason: format!(
                "{}; the weights do not match {CONFIG_FILE} (use the config.json, \
                 model.safetensors and tokenizer.json of one checkpoint)",
                without_backtrace(e)
            ),
        };
        // SAFETY: the map is read-only and the weights are copied into f32 tensors while
        // loading; a checkpoint is not rewritten while caprl reads it.
        let vb = unsafe { VarBuilder::from_mmaped_safetensors(&[&weights], DType::F32, &device) }
            .map_err(|e| ClipError::File {
            path: weights.clone(),
            reason: format!("not a readable safetensors file ({})", without_backtrace(e)),
        })?;
        // candle draws a random class embedding when the tensor is absent: refuse instead.
        let class_embedding = "vision_model.embeddings.class_embedding";
        if !vb.contains_tensor(class_embedding) {
            return Err(mismatch(candle_core::Error::CannotFindTensor {
                path: class_embedding.into(),
            }));
        }
        let vision = &config.vision_config;
        // candle allocates one position id per patch before it reads the position embedding
        // that would show a wrong image_size or patch_size: compare with the weights first.
        let patches = vision.image_size / vision.patch_size;
        let positions = patches
            .checked_mul(patches)
            .and_then(|n| n.checked_add(1))
            .ok_or_else(|| ClipError::File {
                path: config_path.clone(),
                reason: format!(
                    "vision_config.image_size {} and patch_size {} give more patches than \
                     fit in memory",
                    vision.image_size, vision.patch_size
                ),
            })?;
        vb.pp("vision_model.embeddings.position_embedding")
            .get((positions, vision.embed_dim), "weight")
            .map_err(mismatch)?;
        let text_model = ClipTextTransformer::new(vb.pp("text_model"), text).map_err(mismatch)?;
        let vision_model =
            ClipVisionTransformer::new(vb.pp("vision_model"), vision).map_err(mismatch)?;
        let dim = text.projection_dim;
        let text_projection =
            candle_nn::linear_no_bias(text.embed_dim, dim, vb.pp("text_projection"))
                .map_err(mismatch)?;
        let visual_projection =
            candle_nn::linear_no_bias(vision.embed_dim, dim, vb.pp("visual_projection"))
                .map_err(mismatch)?;
        Ok(Self {
            text_model,
            text_projection,
            vision_model,
            visual_projection,
            tokenizer,
            vocab: vocab.clone(),
            dir: dir.to_path_buf(),
            image_size: vision.image_size,
            dim,
            device,
        })
    }

    /// Side of the square images the vision tower takes (`vision_config.image_size`).
    pub fn image_size(&self) -> usize {
        self.image_size
    }

    /// Embeddings of the PNG or JPEG files at `paths`, in order.
    pub fn embed_image_files(&self, paths: &[PathBuf]) -> Result<Embeddings> {
        let size = self.image_size;
        let mut out = Vec::with_capacity(paths.len() * self.dim);
        for chunk in paths.chunks(BATCH) {
            let images = chunk
                .par_iter()
                .map(|p| pixels::load(p, size))
                .collect::<Result<Vec<_>>>()?;
            let pixels =
                Tensor::from_vec(images.concat(), (chunk.len(), 3, size, size), &self.device)?;
            let features = self
                .vision_model
                .forward(&pixels)?
                .apply(&self.visual_projection)?;
            out.extend(features.flatten_all()?.to_vec1::<f32>()?);
        }
        Ok(Embeddings::normalised(self.dim, out))
    }

    /// Embeddings of caption texts: the text tower's output at each caption's last token (the
    /// end-of-text the tokenizer appends), projected.
    ///
    /// candle's own pooling takes the position of the largest id, which is the end-of-text
    /// token only in OpenAI's vocabulary; the last token is the same there and right elsewhere.
    fn embed_texts(&self, texts: Vec<String>) -> Result<Vec<f32>> {
        let batch = self.tokenizer.encode(texts)?;
        let rows = batch.lengths.len();
        let ids = Tensor::from_vec(batch.ids, (rows, batch.width), &self.device)?;
        let hidden = self.text_model.forward_with_mask(&ids, usize::MAX)?;
        let pooled = batch
            .lengths
            .iter()
            .enumerate()
            .map(|(row, &len)| hidden.i((row, len - 1)))
            .collect::<candle_core::Result<Vec<_>>>()?;
        let features = Tensor::stack(&pooled, 0)?.apply(&self.text_projection)?;
        Ok(features.flatten_all()?.to_vec1::<f32>()?)
    }

    /// The words of a caption: up to its EOS, special tokens left out.
    fn caption_text(&self, ids: &[u32]) -> String {
        let words: Vec<&str> = ids
            .iter()
            .take_while(|&&id| id != EOS)
            .map(|&id| self.vocab.word(id))
            .filter(|w| !SPECIALS.contains(w))
            .collect();
        words.join(" ")
    }
}

impl Encoder for HfClip {
    fn dim(&self) -> usize {
        self.dim
    }

    fn embed_captions(&self, captions: &[Vec<u32>]) -> Result<Embeddings> {
        let mut out = Vec::with_capacity(captions.len() * self.dim);
        for chunk in captions.chunks(BATCH) {
            let texts = chunk.iter().map(|c| self.caption_text(c)).collect();
            out.extend(self.embed_texts(texts)?);
        }
        Ok(Embeddings::normalised(self.dim, out))
    }

    /// The data set's features, which are this checkpoint's image embeddings when
    /// `caprl features --clip DIR` made them.
    fn embed_images(&self, data: &Dataset, rows: &[usize]) -> Result<Embeddings> {
        if data.fc_dim() != self.dim {
            return Err(ClipError::Input(format!(
                "the features of {} are {}-dimensional, but {} embeds into {} dimensions; \
                 make the features with `caprl features --clip {} --images IMAGES --out {}`",
                data.dir().display(),
                data.fc_dim(),
                self.dir.display(),
                self.dim,
                self.dir.display(),
                data.dir().display(),
            )));
        }
        Ok(Embeddings::normalised(self.dim, data.fc_rows(rows)?))
    }
}

/// `dir/name`, or an error saying which file of the checkpoint is missing.
fn existing(dir: &Path, name: &str) -> Result<PathBuf> {
    let path = dir.join(name);
    if path.is_file() {
        return Ok(path);
    }
    Err(ClipError::File {
        path,
        reason: format!(
            "missing; a CLIP checkpoint directory needs {CONFIG_FILE}, {WEIGHTS_FILE} and \
             {TOKENIZER_FILE} (e.g. `huggingface-cli download openai/clip-vit-base-patch32 \
             {CONFIG_FILE} {WEIGHTS_FILE} {TOKENIZER_FILE} --local-dir {}`)",
            dir.display()
        ),
    })
}

/// The error without the backtrace candle attaches under `RUST_BACKTRACE`: a user needs the
/// tensor's name and shapes, not candle's stack.
fn without_backtrace(e: candle_core::Error) -> candle_core::Error {
    match e {
        candle_core::Error::WithBacktrace { inner, .. } => without_backtrace(*inner),
        e => e,
    }
}
