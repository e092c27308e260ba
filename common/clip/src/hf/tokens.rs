//! Caption text → CLIP token ids with the checkpoint's `tokenizer.json`.

use std::path::Path;

use serde_json::Value;
use tokenizers::{PostProcessor, Tokenizer, TruncationParams};

use crate::{ClipError, Result};

/// A batch of token sequences, right-padded to the longest.
pub(crate) struct Batch {
    /// Row-major `rows × width` ids.
    pub ids: Vec<u32>,
    pub width: usize,
    /// Tokens of each sequence before padding (at least 1).
    pub lengths: Vec<usize>,
}

/// The checkpoint's tokenizer, truncating to the model's `max_position_embeddings`.
pub(crate) struct TextTokenizer {
    tokenizer: Tokenizer,
}

impl TextTokenizer {
    /// Reads `tokenizer.json` and checks it against the text model's vocabulary and length.
    pub fn open(path: &Path, vocab_size: usize, max_len: usize) -> Result<Self> {
        let bad = |reason: String| ClipError::File {
            path: path.to_path_buf(),
            reason,
        };
        let bytes = std::fs::read(path).map_err(|e| bad(format!("cannot read: {e}")))?;
        // tokenizers panics (`expect("Helper")`) on a syntax error inside `decoder` when it
        // parses the file itself: check the JSON first.
        serde_json::from_slice::<Value>(&bytes).map_err(|e| {
            bad(format!(
                "not a tokenizers tokenizer.json (invalid JSON: {e})"
            ))
        })?;
        let mut tokenizer = Tokenizer::from_bytes(&bytes)
            .map_err(|e| bad(format!("not a tokenizers tokenizer.json ({e})")))?;
        if let Some(processor) = tokenizer.get_post_processor() {
            let json = serde_json::to_value(processor)
                .map_err(|e| bad(format!("unreadable post_processor ({e})")))?;
            check_special_tokens(&json).map_err(bad)?;
        }
        let size = tokenizer.get_vocab_size(true);
        if size > vocab_size {
            return Err(bad(format!(
                "has {size} tokens but config.json's text_config.vocab_size is {vocab_size}; \
                 tokenizer.json and the weights come from different checkpoints"
            )));
        }
        let added = tokenizer
            .get_post_processor()
            .map_or(0, |p| p.added_tokens(false));
        if max_len <= added {
            return Err(bad(format!(
                "adds {added} special tokens, leaving no room for words in \
                 text_config.max_position_embeddings {max_len}"
            )));
        }
        // Truncation keeps the special tokens (the final end-of-text the model pools at);
        // padding is ours, below.
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: max_len,
                ..TruncationParams::default()
            }))
            .map_err(|e| bad(format!("cannot truncate to {max_len} tokens ({e})")))?;
        tokenizer.with_padding(None);
        Ok(Self { tokenizer })
    }

    /// Tokenizes `texts` (special tokens added), padding with id 0: the text model is causal,
    /// so what follows the pooled position changes nothing.
    pub fn encode(&self, texts: Vec<String>) -> Result<Batch> {
        let encodings = self
            .tokenizer
            .encode_batch(texts, true)
            .map_err(|e| ClipError::Input(format!("tokenizing captions: {e}")))?;
        let lengths: Vec<usize> = encodings.iter().map(|e| e.len().max(1)).collect();
        let width = lengths.iter().copied().max().unwrap_or(1);
        let mut ids = vec![0u32; encodings.len() * width];
        for (row, encoding) in ids.chunks_mut(width).zip(&encodings) {
            row[..encoding.len()].copy_from_slice(encoding.get_ids());
        }
        Ok(Batch {
            ids,
            width,
            lengths,
        })
    }
}

/// tokenizers checks that a template's special tokens exist when a template is built, not when
/// one is read from `tokenizer.json`, and then panics while encoding: check them here.
fn check_special_tokens(processor: &Value) -> std::result::Result<(), String> {
    match processor.get("type").and_then(Value::as_str) {
        Some("Sequence") => processor
            .get("processors")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .try_for_each(check_special_tokens),
        Some("TemplateProcessing") => {
            let defined = processor.get("special_tokens").and_then(Value::as_object);
            for template in ["single", "pair"] {
                let pieces = processor.get(template).and_then(Value::as_array);
                for piece in pieces.into_iter().flatten() {
                    let Some(name) = piece.pointer("/SpecialToken/id").and_then(Value::as_str)
                    else {
                        continue;
                    };
                    if !defined.is_some_and(|d| d.contains_key(name)) {
                        return Err(format!(
                            "post_processor's {template} template uses the special token \
                             {name:?}, which its special_tokens does not define; use the \
                             checkpoint's own tokenizer.json"
                        ));
                    }
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}
