//! `clip::hf`: a Hugging Face CLIP checkpoint directory loads, embeds captions and image files
//! into unit rows that equal candle-transformers' own `ClipModel` on the same weights, and every
//! broken directory or input is refused with the file and what to do.

#[path = "support/tiny_clip.rs"]
mod tiny_clip;

use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use candle_transformers::models::clip::ClipModel;
use caprl_clip::hf::HfClip;
use caprl_clip::{ClipError, Embeddings, Encoder};
use caprl_data::{synth, write_safetensors, Dataset, SynthConfig, Vocab, SPECIALS};
use caprl_model::model::EOS;
use image::{Rgb, RgbImage};
use tiny_clip::{IMAGE_SIZE, PROJECTION};

/// CLIP's published pixel mean and std, written out again so the loader is checked against them.
#[allow(clippy::excessive_precision)]
const MEAN: [f32; 3] = [0.48145466, 0.4578275, 0.40821073];
#[allow(clippy::excessive_precision)]
const STD: [f32; 3] = [0.26862954, 0.26130258, 0.27577711];

/// A tiny synthetic data set, and a tiny checkpoint whose tokenizer knows its words.
struct Fixture {
    root: tempfile::TempDir,
    data: PathBuf,
    clip: PathBuf,
    vocab: Vocab,
    model: ClipModel,
}

fn fixture() -> Fixture {
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    let config = SynthConfig {
        seed: 3,
        train: 12,
        val: 4,
        test: 4,
        progress: false,
    };
    synth(&data, &config).unwrap();
    let vocab = Dataset::open(&data).unwrap().vocab;
    let words = tiny_clip::plain_words(&vocab);
    let clip = root.path().join("clip");
    let model = tiny_clip::write(&clip, &words);
    Fixture {
        root,
        data,
        clip,
        vocab,
        model,
    }
}

/// Caption ids of `text` (words of the vocabulary), ended by EOS and followed by padding.
fn ids(vocab: &Vocab, text: &str) -> Vec<u32> {
    let mut ids: Vec<u32> = text.split(' ').map(|w| vocab.id(w)).collect();
    ids.extend([EOS, 0, 0]);
    ids
}

/// Two captions made of the data set's own words.
fn two_captions(vocab: &Vocab) -> (String, String) {
    let w = &vocab.words()[SPECIALS.len()..];
    (
        format!("{} {} {}", w[0], w[1], w[2]),
        format!("{} {}", w[3], w[4]),
    )
}

/// A PNG of `w × h` pixels with a colour pattern drawn from `seed`.
fn write_png(path: &Path, w: u32, h: u32, seed: u32) {
    let img = RgbImage::from_fn(w, h, |x, y| {
        let v = |k: u32| ((x * (7 + k) + y * (13 + seed) + seed * 31 + k * 17) % 256) as u8;
        Rgb([v(0), v(1), v(2)])
    });
    img.save(path).unwrap();
}

fn assert_unit_rows(e: &Embeddings, rows: usize) {
    assert_eq!(e.dim, PROJECTION);
    assert_eq!(e.len(), rows);
    for i in 0..rows {
        let row = e.row(i);
        assert!(row.iter().all(|x| x.is_finite()), "row {i}: {row:?}");
        let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "row {i} has norm {norm}");
    }
}

fn assert_close(a: &[f32], b: &[f32], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!((x - y).abs() < 1e-5, "{what}[{i}]: {x} vs {y}");
    }
}

fn l2_normalised(t: &Tensor) -> Vec<f32> {
    let v = t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    Embeddings::normalised(PROJECTION, v).data
}

fn open_err(dir: &Path, vocab: &Vocab) -> String {
    match HfClip::open(dir, vocab) {
        Ok(_) => panic!("{} opened", dir.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn captions_and_image_files_embed_to_unit_rows_of_projection_dim() {
    let f = fixture();
    let clip = HfClip::open(&f.clip, &f.vocab).unwrap();
    assert_eq!(clip.dim(), PROJECTION);
    assert_eq!(clip.image_size(), IMAGE_SIZE);

    let (a, b) = two_captions(&f.vocab);
    let captions = clip
        .embed_captions(&[ids(&f.vocab, &a), ids(&f.vocab, &b), vec![EOS]])
        .unwrap();
    assert_unit_rows(&captions, 3);

    let paths: Vec<PathBuf> = (0..3)
        .map(|i| {
            let p = f.root.path().join(format!("img{i}.png"));
            write_png(&p, 32, 32, i);
            p
        })
        .collect();
    let images = clip.embed_image_files(&paths).unwrap();
    assert_unit_rows(&images, 3);
}

#[test]
fn same_input_gives_the_same_embedding_and_different_captions_differ() {
    let f = fixture();
    let clip = HfClip::open(&f.clip, &f.vocab).unwrap();
    let (a, b) = two_captions(&f.vocab);
    let once = clip
        .embed_captions(&[ids(&f.vocab, &a), ids(&f.vocab, &b)])
        .unwrap();
    let again = clip
        .embed_captions(&[ids(&f.vocab, &a), ids(&f.vocab, &b)])
        .unwrap();
    assert_eq!(once, again);
    // Alone, the caption goes through matrix products of another shape: equal up to rounding.
    let alone = clip.embed_captions(&[ids(&f.vocab, &a)]).unwrap();
    assert_close(alone.row(0), once.row(0), "caption alone");
    assert!(once.dot(0, &once, 1) < 0.999, "two captions embed alike");

    // BOS, PAD and UNK are not words; everything after EOS is ignored.
    let mut noisy = vec![Vocab::BOS, Vocab::UNK];
    noisy.extend(ids(&f.vocab, &a));
    noisy.extend(ids(&f.vocab, &b));
    let cleaned = clip.embed_captions(&[noisy]).unwrap();
    assert_close(cleaned.row(0), once.row(0), "caption with special tokens");

    let p = f.root.path().join("a.png");
    write_png(&p, 32, 32, 5);
    let x = clip.embed_image_files(std::slice::from_ref(&p)).unwrap();
    let y = clip.embed_image_files(&[p]).unwrap();
    assert_eq!(x, y);
}

#[test]
fn embeddings_equal_candle_transformers_clip_model_on_the_same_weights() {
    let f = fixture();
    let clip = HfClip::open(&f.clip, &f.vocab).unwrap();
    let (a, b) = two_captions(&f.vocab);
    let ours = clip
        .embed_captions(&[ids(&f.vocab, &a), ids(&f.vocab, &b)])
        .unwrap();
    let tokenizer = tokenizers::Tokenizer::from_file(f.clip.join("tokenizer.json")).unwrap();
    for (i, text) in [a, b].iter().enumerate() {
        let enc = tokenizer.encode(text.as_str(), true).unwrap();
        let tokens = Tensor::new(enc.get_ids(), &Device::Cpu)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        let theirs = l2_normalised(&f.model.get_text_features(&tokens).unwrap());
        assert_close(ours.row(i), &theirs, "text embedding");
    }

    // A 32×32 image needs no resizing, so its pixel values are (x / 255 - mean) / std.
    let p = f.root.path().join("img.png");
    write_png(&p, 32, 32, 9);
    let img = image::open(&p).unwrap().to_rgb8();
    let plane = IMAGE_SIZE * IMAGE_SIZE;
    let mut pixels = vec![0f32; 3 * plane];
    for (i, px) in img.pixels().enumerate() {
        for c in 0..3 {
            pixels[c * plane + i] = (f32::from(px[c]) / 255.0 - MEAN[c]) / STD[c];
        }
    }
    let pixels = Tensor::from_vec(pixels, (1, 3, IMAGE_SIZE, IMAGE_SIZE), &Device::Cpu).unwrap();
    let theirs = l2_normalised(&f.model.get_image_features(&pixels).unwrap());
    let ours = clip.embed_image_files(&[p]).unwrap();
    assert_close(ours.row(0), &theirs, "image embedding");
}

#[test]
fn images_of_other_sizes_and_jpegs_are_resized_and_center_cropped() {
    let f = fixture();
    let clip = HfClip::open(&f.clip, &f.vocab).unwrap();
    let dir = f.root.path();
    // A flat colour stays that colour through any resize and crop.
    let flat = |name: &str, w: u32, h: u32| {
        let p = dir.join(name);
        RgbImage::from_pixel(w, h, Rgb([200, 40, 90]))
            .save(&p)
            .unwrap();
        p
    };
    let flat_images = [
        flat("exact.png", 32, 32),
        flat("wide.png", 80, 48),
        flat("tall.png", 20, 45),
        flat("photo.jpg", 64, 64),
    ];
    let e = clip.embed_image_files(&flat_images).unwrap();
    assert_unit_rows(&e, 4);
    for i in 1..3 {
        assert_close(e.row(i), e.row(0), "flat image of another size");
    }
    // JPEG is lossy: close, not equal.
    assert!(
        e.dot(3, &e, 0) > 0.99,
        "flat JPEG differs from the flat PNG"
    );

    let patterned = dir.join("patterned.png");
    write_png(&patterned, 50, 37, 2);
    assert_unit_rows(&clip.embed_image_files(&[patterned]).unwrap(), 1);
}

#[test]
fn captions_longer_than_the_model_are_cut_keeping_the_end_of_text() {
    let f = fixture();
    let clip = HfClip::open(&f.clip, &f.vocab).unwrap();
    let words = &f.vocab.words()[SPECIALS.len()..];
    let long: Vec<&str> = (0..3 * tiny_clip::MAX_POSITIONS)
        .map(|i| words[i % words.len()].as_str())
        .collect();
    // Start- and end-of-text take two of the model's positions.
    let fits = &long[..tiny_clip::MAX_POSITIONS - 2];
    let e = clip
        .embed_captions(&[
            ids(&f.vocab, &long.join(" ")),
            ids(&f.vocab, &fits.join(" ")),
        ])
        .unwrap();
    assert_unit_rows(&e, 2);
    assert_close(e.row(0), e.row(1), "cut caption");
}

#[test]
fn many_inputs_are_embedded_in_batches_like_one_at_a_time() {
    let f = fixture();
    let clip = HfClip::open(&f.clip, &f.vocab).unwrap();
    let words = &f.vocab.words()[SPECIALS.len()..];
    let captions: Vec<Vec<u32>> = (0..40)
        .map(|i| {
            let text = format!(
                "{} {}",
                words[i % words.len()],
                words[(i * 7) % words.len()]
            );
            ids(&f.vocab, &text)
        })
        .collect();
    let all = clip.embed_captions(&captions).unwrap();
    assert_unit_rows(&all, 40);
    for i in [0, 31, 32, 39] {
        let one = clip.embed_captions(&captions[i..=i]).unwrap();
        assert_close(all.row(i), one.row(0), "caption in a batch");
    }

    let paths: Vec<PathBuf> = (0..35)
        .map(|i| {
            let p = f.root.path().join(format!("{i}.png"));
            write_png(&p, 32, 32, i);
            p
        })
        .collect();
    let all = clip.embed_image_files(&paths).unwrap();
    assert_unit_rows(&all, 35);
    let last = clip.embed_image_files(&paths[34..]).unwrap();
    assert_close(all.row(34), last.row(0), "image in a batch");
}

#[test]
fn missing_files_are_named_with_how_to_get_them() {
    let f = fixture();
    for name in ["model.safetensors", "tokenizer.json", "config.json"] {
        let dir = f.root.path().join(format!("without-{name}"));
        std::fs::create_dir_all(&dir).unwrap();
        for other in ["model.safetensors", "tokenizer.json", "config.json"] {
            if other != name {
                std::fs::copy(f.clip.join(other), dir.join(other)).unwrap();
            }
        }
        let err = open_err(&dir, &f.vocab);
        assert!(err.contains(name) && err.contains("missing"), "{err}");
        assert!(err.contains("huggingface-cli download"), "{err}");
    }
    let err = open_err(&f.root.path().join("no-such-dir"), &f.vocab);
    assert!(
        err.contains("config.json") && err.contains("missing"),
        "{err}"
    );
}

#[test]
fn a_tensor_of_the_wrong_shape_is_named() {
    let f = fixture();
    let weights = f.clip.join("model.safetensors");
    let mut tensors = candle_core::safetensors::load(&weights, &Device::Cpu).unwrap();
    let name = "text_projection.weight";
    tensors.insert(
        name.into(),
        Tensor::zeros(
            (PROJECTION + 1, tiny_clip::HIDDEN),
            candle_core::DType::F32,
            &Device::Cpu,
        )
        .unwrap(),
    );
    candle_core::safetensors::save(&tensors, &weights).unwrap();
    let err = open_err(&f.clip, &f.vocab);
    assert!(err.contains("model.safetensors"), "{err}");
    assert!(err.contains(name) && err.contains("[17, 32]"), "{err}");
    assert!(err.contains("do not match config.json"), "{err}");
}

#[test]
fn a_missing_tensor_is_named() {
    let f = fixture();
    let weights = f.clip.join("model.safetensors");
    let mut tensors = candle_core::safetensors::load(&weights, &Device::Cpu).unwrap();
    let name = "vision_model.embeddings.class_embedding";
    tensors.remove(name).unwrap();
    candle_core::safetensors::save(&tensors, &weights).unwrap();
    let err = open_err(&f.clip, &f.vocab);
    assert!(
        err.contains("model.safetensors") && err.contains(name),
        "{err}"
    );
}

#[test]
fn a_malformed_or_wrong_config_json_is_refused_with_the_field() {
    let f = fixture();
    let path = f.clip.join("config.json");
    let good = tiny_clip::config_json(f.vocab.len());
    let cases: Vec<(String, &str)> = vec![
        ("{ \"text_config\": ".into(), "not valid JSON"),
        ("[1, 2]".into(), "expected a JSON object"),
        (
            {
                let mut c = good.clone();
                c.as_object_mut().unwrap().remove("vision_config");
                c.to_string()
            },
            "missing vision_config",
        ),
        (
            {
                let mut c = good.clone();
                c["text_config"]["hidden_size"] = "big".into();
                c.to_string()
            },
            "text_config.hidden_size is \"big\", expected a positive integer",
        ),
        (
            {
                let mut c = good.clone();
                c["vision_config"]["num_attention_heads"] = 3.into();
                c.to_string()
            },
            "vision_config.hidden_size 32 is not a multiple of vision_config.num_attention_heads 3",
        ),
        (
            {
                let mut c = good.clone();
                c["vision_config"]["hidden_act"] = "gelu".into();
                c.to_string()
            },
            "vision_config.hidden_act is \"gelu\"",
        ),
        (
            {
                let mut c = good.clone();
                c["model_type"] = "siglip".into();
                c.to_string()
            },
            "only \"clip\" checkpoints",
        ),
    ];
    for (text, expected) in cases {
        std::fs::write(&path, &text).unwrap();
        let err = open_err(&f.clip, &f.vocab);
        assert!(err.contains("config.json"), "{text}: {err}");
        assert!(err.contains(expected), "{text}: {err}");
    }
}

#[test]
fn a_tokenizer_for_another_vocabulary_is_refused() {
    let f = fixture();
    let path = f.clip.join("tokenizer.json");
    std::fs::write(&path, "{ not a tokenizer").unwrap();
    let err = open_err(&f.clip, &f.vocab);
    assert!(
        err.contains("tokenizer.json") && err.contains("not a tokenizers"),
        "{err}"
    );

    let words: Vec<String> = (0..500).map(|i| format!("w{i}")).collect();
    tiny_clip::tokenizer(&words).save(&path, false).unwrap();
    let err = open_err(&f.clip, &f.vocab);
    assert!(err.contains("text_config.vocab_size"), "{err}");
}

#[test]
fn an_unreadable_image_is_named() {
    let f = fixture();
    let clip = HfClip::open(&f.clip, &f.vocab).unwrap();
    let good = f.root.path().join("good.png");
    write_png(&good, 32, 32, 1);
    let bad = f.root.path().join("broken.png");
    std::fs::write(&bad, b"not an image at all").unwrap();
    let err = clip
        .embed_image_files(&[good.clone(), bad.clone()])
        .unwrap_err();
    assert!(
        matches!(err, ClipError::File { ref path, .. } if path == &bad),
        "{err}"
    );
    assert!(err.to_string().contains("PNG or JPEG"), "{err}");
    let missing = f.root.path().join("missing.png");
    let err = clip.embed_image_files(&[missing]).unwrap_err();
    assert!(err.to_string().contains("missing.png"), "{err}");
}

#[test]
fn embed_images_on_features_of_another_width_says_to_run_caprl_features() {
    let f = fixture();
    let clip = HfClip::open(&f.clip, &f.vocab).unwrap();
    let data = Dataset::open(&f.data).unwrap();
    assert_ne!(data.fc_dim(), PROJECTION);
    let err = clip.embed_images(&data, &[0, 1]).unwrap_err().to_string();
    assert!(err.contains("caprl features --clip"), "{err}");
    assert!(err.contains(&data.fc_dim().to_string()), "{err}");
}

#[test]
fn embed_images_reads_back_features_made_from_the_image_files() {
    let f = fixture();
    let clip = HfClip::open(&f.clip, &f.vocab).unwrap();
    let ids: Vec<String> =
        serde_json::from_slice(&std::fs::read(f.data.join("features.ids.json")).unwrap()).unwrap();
    let images = f.root.path().join("images");
    std::fs::create_dir_all(&images).unwrap();
    let paths: Vec<PathBuf> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let p = images.join(format!("{id}.png"));
            write_png(&p, 40, 32, i as u32);
            p
        })
        .collect();
    let from_files = clip.embed_image_files(&paths).unwrap();
    write_safetensors(&f.data, &ids, &from_files.data, PROJECTION, None).unwrap();

    let data = Dataset::open(&f.data).unwrap();
    assert_eq!(data.fc_dim(), PROJECTION);
    let rows: Vec<usize> = data.test.items.iter().map(|item| item.row).collect();
    let from_features = clip.embed_images(&data, &rows).unwrap();
    assert_unit_rows(&from_features, rows.len());
    for (k, &row) in rows.iter().enumerate() {
        assert_close(from_features.row(k), from_files.row(row), "features row");
    }
}
