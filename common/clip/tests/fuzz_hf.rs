//! Bad input for the Hugging Face CLIP checkpoint's readers, as property tests: a mutated
//! `config.json` or `tokenizer.json`, or a config value out of range, gives an error, never a
//! panic or a runaway allocation.
//!
//! Cases, seed and saved failures: `common/tests/support/fuzz.rs` (`CAPRL_FUZZ_CASES`,
//! `CAPRL_FUZZ_SEED`, `fuzz_hf.proptest-regressions`).

#[path = "../../tests/support/ci.rs"]
mod ci;
#[path = "../../tests/support/fuzz.rs"]
mod fuzz;
#[path = "support/tiny_clip.rs"]
mod tiny_clip;

use std::path::Path;
use std::sync::OnceLock;

use caprl_clip::hf::HfClip;
use caprl_clip::Encoder;
use caprl_data::Vocab;
use caprl_model::model::EOS;
use fuzz::{mutate, mutations};
use proptest::prelude::*;

/// Cases per property in CI (fixed seed; more by hand with `CAPRL_FUZZ_CASES`).
const CASES: u32 = 256;

/// The three files of a tiny CLIP checkpoint and the caption vocabulary it was made for,
/// written once per test binary.
struct Clip {
    vocab: Vocab,
    config: Vec<u8>,
    tokenizer: Vec<u8>,
    weights: Vec<u8>,
}

fn clip() -> &'static Clip {
    static CLIP: OnceLock<Clip> = OnceLock::new();
    CLIP.get_or_init(|| {
        let caps: Vec<Vec<String>> = ["a red cube on a table", "two blue balls near a cone"]
            .iter()
            .map(|c| c.split(' ').map(String::from).collect())
            .collect();
        let vocab = Vocab::build(caps.iter().map(Vec::as_slice), 1);
        let words = tiny_clip::plain_words(&vocab);
        let dir = tempfile::tempdir().unwrap();
        tiny_clip::write(dir.path(), &words);
        let read = |name: &str| std::fs::read(dir.path().join(name)).unwrap();
        Clip {
            config: read("config.json"),
            tokenizer: read("tokenizer.json"),
            weights: read("model.safetensors"),
            vocab,
        }
    })
}

/// Writes the tiny checkpoint with `config` and `tokenizer` in place of its own files into
/// `dir`, opens it and, when it opens, embeds two captions. Returns the error text, if any.
fn open_clip(dir: &Path, config: &[u8], tokenizer: &[u8]) -> Option<String> {
    let c = clip();
    std::fs::write(dir.join("config.json"), config).unwrap();
    std::fs::write(dir.join("tokenizer.json"), tokenizer).unwrap();
    std::fs::write(dir.join("model.safetensors"), &c.weights).unwrap();
    let model = match HfClip::open(dir, &c.vocab) {
        Ok(m) => m,
        Err(e) => return Some(e.to_string()),
    };
    let caption = |text: &str| {
        let mut ids: Vec<u32> = text.split(' ').map(|w| c.vocab.id(w)).collect();
        ids.push(EOS);
        ids
    };
    let captions = [
        caption("a red cube"),
        caption("two blue balls near a table"),
    ];
    model.embed_captions(&captions).err().map(|e| e.to_string())
}

#[test]
fn the_valid_checkpoint_opens() {
    // The files the properties mutate are themselves valid.
    let c = clip();
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(open_clip(dir.path(), &c.config, &c.tokenizer), None);
}

/// A JSON value to put in place of one number of `config.json`.
fn config_value() -> impl Strategy<Value = serde_json::Value> {
    prop_oneof![
        (0u64..70).prop_map(serde_json::Value::from),
        any::<u64>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<f64>().prop_map(|f| serde_json::json!(f)),
        Just(serde_json::Value::Null),
        ".{0,8}".prop_map(serde_json::Value::from),
    ]
}

proptest! {
    #![proptest_config(fuzz::config(CASES))]

    #[test]
    fn clip_checkpoint_reader_never_panics_on_mutated_config_or_tokenizer(
        in_tokenizer in any::<bool>(),
        muts in mutations(),
    ) {
        let c = clip();
        let dir = tempfile::tempdir().unwrap();
        let (config, tokenizer) = if in_tokenizer {
            (c.config.clone(), mutate(&c.tokenizer, &muts))
        } else {
            (mutate(&c.config, &muts), c.tokenizer.clone())
        };
        if let Some(e) = open_clip(dir.path(), &config, &tokenizer) {
            prop_assert!(!e.is_empty());
        }
    }

    #[test]
    fn clip_config_reader_refuses_bad_values_without_panicking(
        section in prop::sample::select(vec!["", "text_config", "vision_config"]),
        key in prop::sample::select(vec![
            "projection_dim", "logit_scale_init_value", "vocab_size", "hidden_size",
            "intermediate_size", "max_position_embeddings", "num_hidden_layers",
            "num_attention_heads", "num_channels", "image_size", "patch_size", "hidden_act",
        ]),
        value in config_value(),
    ) {
        let c = clip();
        let mut config: serde_json::Value = serde_json::from_slice(&c.config).unwrap();
        let target = if section.is_empty() { &mut config } else { &mut config[section] };
        target[key] = value;
        let dir = tempfile::tempdir().unwrap();
        let text = serde_json::to_vec(&config).unwrap();
        if let Some(e) = open_clip(dir.path(), &text, &c.tokenizer) {
            prop_assert!(!e.is_empty());
        }
    }
}
