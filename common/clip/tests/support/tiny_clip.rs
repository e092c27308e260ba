//! A tiny randomly initialised CLIP checkpoint in the Hugging Face layout (`config.json`,
//! `model.safetensors`, `tokenizer.json`), written by the tests themselves: no hub, no network.
#![allow(dead_code)]

use std::path::Path;

use candle_core::{DType, Device};
use candle_nn::{Init, VarBuilder, VarMap};
use candle_transformers::models::clip::text_model::{Activation, ClipTextConfig};
use candle_transformers::models::clip::vision_model::ClipVisionConfig;
use candle_transformers::models::clip::{ClipConfig, ClipModel};
use caprl_data::{Vocab, SPECIALS};
use tokenizers::models::wordlevel::WordLevel;
use tokenizers::pre_tokenizers::whitespace::WhitespaceSplit;
use tokenizers::processors::template::TemplateProcessing;
use tokenizers::Tokenizer;

pub const HIDDEN: usize = 32;
pub const LAYERS: usize = 2;
pub const HEADS: usize = 2;
pub const IMAGE_SIZE: usize = 32;
pub const PATCH: usize = 8;
pub const PROJECTION: usize = 16;
pub const MAX_POSITIONS: usize = 16;
/// Start- and end-of-text, the last two ids as in OpenAI's vocabulary.
pub const SOT: &str = "<|startoftext|>";
pub const EOT: &str = "<|endoftext|>";

/// The vocabulary's words without its special tokens: what the tiny tokenizer is built from.
pub fn plain_words(vocab: &Vocab) -> Vec<String> {
    vocab
        .words()
        .iter()
        .filter(|w| !SPECIALS.contains(&w.as_str()))
        .cloned()
        .collect()
}

/// candle-transformers' config of the tiny model for `vocab_size` tokens.
pub fn config(vocab_size: usize) -> ClipConfig {
    ClipConfig {
        text_config: ClipTextConfig {
            vocab_size,
            embed_dim: HIDDEN,
            activation: Activation::QuickGelu,
            intermediate_size: 2 * HIDDEN,
            max_position_embeddings: MAX_POSITIONS,
            pad_with: None,
            num_hidden_layers: LAYERS,
            num_attention_heads: HEADS,
            projection_dim: PROJECTION,
        },
        vision_config: ClipVisionConfig {
            embed_dim: HIDDEN,
            activation: Activation::QuickGelu,
            intermediate_size: 2 * HIDDEN,
            num_hidden_layers: LAYERS,
            num_attention_heads: HEADS,
            projection_dim: PROJECTION,
            num_channels: 3,
            image_size: IMAGE_SIZE,
            patch_size: PATCH,
        },
        logit_scale_init_value: 2.6592,
        image_size: IMAGE_SIZE,
    }
}

/// The `config.json` transformers would write for [`config`].
pub fn config_json(vocab_size: usize) -> serde_json::Value {
    serde_json::json!({
        "architectures": ["CLIPModel"],
        "model_type": "clip",
        "projection_dim": PROJECTION,
        "logit_scale_init_value": 2.6592,
        "text_config": {
            "model_type": "clip_text_model",
            "vocab_size": vocab_size,
            "hidden_size": HIDDEN,
            "intermediate_size": 2 * HIDDEN,
            "num_hidden_layers": LAYERS,
            "num_attention_heads": HEADS,
            "max_position_embeddings": MAX_POSITIONS,
            "hidden_act": "quick_gelu",
            "layer_norm_eps": 1e-5
        },
        "vision_config": {
            "model_type": "clip_vision_model",
            "hidden_size": HIDDEN,
            "intermediate_size": 2 * HIDDEN,
            "num_hidden_layers": LAYERS,
            "num_attention_heads": HEADS,
            "num_channels": 3,
            "image_size": IMAGE_SIZE,
            "patch_size": PATCH,
            "hidden_act": "quick_gelu",
            "layer_norm_eps": 1e-5
        }
    })
}

/// A word-level tokenizer over `words` (plus `<unk>`), wrapping each text in start- and
/// end-of-text like CLIP's BPE tokenizer does.
pub fn tokenizer(words: &[String]) -> Tokenizer {
    let mut vocab: Vec<String> = words.to_vec();
    vocab.push("<unk>".into());
    vocab.push(SOT.into());
    vocab.push(EOT.into());
    let n = vocab.len() as u32;
    let model = WordLevel::builder()
        .vocab(
            vocab
                .into_iter()
                .enumerate()
                .map(|(i, w)| (w, i as u32))
                .collect(),
        )
        .unk_token("<unk>".into())
        .build()
        .expect("word-level model");
    let template = TemplateProcessing::builder()
        .try_single(format!("{SOT} $A {EOT}"))
        .expect("template")
        .special_tokens(vec![(SOT, n - 2), (EOT, n - 1)])
        .build()
        .expect("post-processor");
    let mut tokenizer = Tokenizer::new(model);
    tokenizer
        .with_pre_tokenizer(Some(WhitespaceSplit))
        .with_post_processor(Some(template));
    tokenizer
}

/// Writes the three files of a random tiny checkpoint whose tokenizer knows `words` into `dir`;
/// returns the model, loaded back from the written weights.
pub fn write(dir: &Path, words: &[String]) -> ClipModel {
    std::fs::create_dir_all(dir).expect("checkpoint dir");
    let tokenizer = tokenizer(words);
    let vocab_size = tokenizer.get_vocab_size(true);
    tokenizer
        .save(dir.join("tokenizer.json"), true)
        .expect("tokenizer.json");
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_string_pretty(&config_json(vocab_size)).expect("json"),
    )
    .expect("config.json");

    let config = config(vocab_size);
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &Device::Cpu);
    // candle only loads these two when present; a real checkpoint has them.
    let normal = Init::Randn {
        mean: 0.0,
        stdev: 1.0,
    };
    vb.pp("vision_model.embeddings")
        .get_with_hints(HIDDEN, "class_embedding", normal)
        .expect("class embedding");
    vb.get_with_hints((), "logit_scale", Init::Const(2.6592))
        .expect("logit scale");
    ClipModel::new(vb, &config).expect("random model");
    let weights = dir.join("model.safetensors");
    varmap.save(&weights).expect("model.safetensors");
    load(dir, vocab_size)
}

/// candle-transformers' own model on the weights in `dir`.
pub fn load(dir: &Path, vocab_size: usize) -> ClipModel {
    let weights = dir.join("model.safetensors");
    let vb = unsafe { VarBuilder::from_mmaped_safetensors(&[weights], DType::F32, &Device::Cpu) }
        .expect("weights");
    ClipModel::new(vb, &config(vocab_size)).expect("model from the written weights")
}
