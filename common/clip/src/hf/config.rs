//! `config.json` of a Hugging Face CLIP checkpoint → candle-transformers' [`ClipConfig`].
//!
//! transformers writes only the keys that differ from its defaults in some versions, so a key
//! that is absent takes the default of `CLIPTextConfig` / `CLIPVisionConfig` (ViT-B/32), as it
//! does when transformers loads the file. A key that is present must be valid.

use std::path::Path;

use candle_transformers::models::clip::text_model::{Activation, ClipTextConfig};
use candle_transformers::models::clip::vision_model::ClipVisionConfig;
use candle_transformers::models::clip::ClipConfig;
use serde_json::{Map, Value};

use crate::{ClipError, Result};

/// The parsed and checked `config.json`.
pub(crate) fn read(path: &Path) -> Result<ClipConfig> {
    let bad = |reason: String| ClipError::File {
        path: path.to_path_buf(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| bad(format!("cannot read: {e}")))?;
    let root: Value = serde_json::from_str(&text)
        .map_err(|e| bad(format!("not valid JSON ({e}); expected a CLIP config.json")))?;
    parse(&root).map_err(bad)
}

fn parse(root: &Value) -> std::result::Result<ClipConfig, String> {
    let root = root
        .as_object()
        .ok_or("expected a JSON object with text_config and vision_config")?;
    if let Some(kind) = root.get("model_type").and_then(Value::as_str) {
        if kind != "clip" {
            return Err(format!(
                "model_type is {kind:?}; only \"clip\" checkpoints can be loaded"
            ));
        }
    }
    let projection_dim = usize_key(root, "", "projection_dim", 512)?;
    let logit_scale = match root.get("logit_scale_init_value") {
        None => 2.6592,
        Some(v) => v
            .as_f64()
            .ok_or(format!("logit_scale_init_value is {v}, expected a number"))?
            as f32,
    };

    let t = section(root, "text_config")?;
    let text_config = ClipTextConfig {
        vocab_size: usize_key(t, "text_config.", "vocab_size", 49408)?,
        embed_dim: usize_key(t, "text_config.", "hidden_size", 512)?,
        activation: activation(t, "text_config.")?,
        intermediate_size: usize_key(t, "text_config.", "intermediate_size", 2048)?,
        max_position_embeddings: usize_key(t, "text_config.", "max_position_embeddings", 77)?,
        pad_with: None,
        num_hidden_layers: usize_key(t, "text_config.", "num_hidden_layers", 12)?,
        num_attention_heads: usize_key(t, "text_config.", "num_attention_heads", 8)?,
        projection_dim,
    };
    check_heads(
        "text_config.",
        text_config.embed_dim,
        text_config.num_attention_heads,
    )?;

    let v = section(root, "vision_config")?;
    let vision_config = ClipVisionConfig {
        embed_dim: usize_key(v, "vision_config.", "hidden_size", 768)?,
        activation: activation(v, "vision_config.")?,
        intermediate_size: usize_key(v, "vision_config.", "intermediate_size", 3072)?,
        num_hidden_layers: usize_key(v, "vision_config.", "num_hidden_layers", 12)?,
        num_attention_heads: usize_key(v, "vision_config.", "num_attention_heads", 12)?,
        projection_dim,
        num_channels: usize_key(v, "vision_config.", "num_channels", 3)?,
        image_size: usize_key(v, "vision_config.", "image_size", 224)?,
        patch_size: usize_key(v, "vision_config.", "patch_size", 32)?,
    };
    check_heads(
        "vision_config.",
        vision_config.embed_dim,
        vision_config.num_attention_heads,
    )?;
    if vision_config.num_channels != 3 {
        return Err(format!(
            "vision_config.num_channels is {}; only RGB models (3) are supported",
            vision_config.num_channels
        ));
    }
    if vision_config.patch_size > vision_config.image_size {
        return Err(format!(
            "vision_config.patch_size {} is larger than vision_config.image_size {}",
            vision_config.patch_size, vision_config.image_size
        ));
    }
    Ok(ClipConfig {
        image_size: vision_config.image_size,
        text_config,
        vision_config,
        logit_scale_init_value: logit_scale,
    })
}

/// `text_config` / `vision_config`; older files keep it in `*_config_dict` next to a `null`.
fn section<'a>(
    root: &'a Map<String, Value>,
    name: &str,
) -> std::result::Result<&'a Map<String, Value>, String> {
    [name.to_string(), format!("{name}_dict")]
        .iter()
        .filter_map(|key| root.get(key))
        .find(|v| !v.is_null())
        .map(|v| {
            v.as_object()
                .ok_or(format!("{name} is {v}, expected an object"))
        })
        .unwrap_or(Err(format!(
            "missing {name}; expected a Hugging Face CLIP config.json"
        )))
}

/// A positive integer under `key`, or `default` when the key is absent.
fn usize_key(
    map: &Map<String, Value>,
    prefix: &str,
    key: &str,
    default: usize,
) -> std::result::Result<usize, String> {
    match map.get(key) {
        None => Ok(default),
        Some(v) => v
            .as_u64()
            .filter(|&n| n > 0)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or(format!("{prefix}{key} is {v}, expected a positive integer")),
    }
}

/// candle's CLIP has QuickGELU only; a `gelu` model would load and give wrong embeddings.
fn activation(map: &Map<String, Value>, prefix: &str) -> std::result::Result<Activation, String> {
    match map.get("hidden_act") {
        None => Ok(Activation::QuickGelu),
        Some(Value::String(s)) if s == "quick_gelu" => Ok(Activation::QuickGelu),
        Some(v) => Err(format!(
            "{prefix}hidden_act is {v}; only \"quick_gelu\" (OpenAI CLIP) is supported"
        )),
    }
}

fn check_heads(prefix: &str, hidden: usize, heads: usize) -> std::result::Result<(), String> {
    if !hidden.is_multiple_of(heads) {
        return Err(format!(
            "{prefix}hidden_size {hidden} is not a multiple of {prefix}num_attention_heads {heads}"
        ));
    }
    Ok(())
}
