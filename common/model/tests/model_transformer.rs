//! The Transformer captioner: gradients, cached decoding against recomputing the prefix,
//! causality, shared encodings, save/load and its config errors.

#[path = "support/gradcheck.rs"]
mod gradcheck;

use caprl_wire::Sampling;

use caprl_model::model::{
    batch_tokens, CaprlRng, Captioner, CaptionerConfig, DType, Device, Inputs, ModelError,
    ModelKind, SampleOptions, Tensor, EOS,
};
use gradcheck::assert_gradients_match;

fn tiny(att: bool) -> CaptionerConfig {
    let mut cfg = CaptionerConfig::new(ModelKind::Transformer, 11, 6, att.then_some((4, 5)));
    cfg.model.enc_layers = 2;
    cfg.model.dec_layers = 2;
    cfg.model.d_model = 8;
    cfg.model.heads = 2;
    cfg.model.d_ff = 12;
    cfg.model.tie_embed = false;
    cfg.model.global_region = false;
    cfg.max_len = 6;
    cfg.model.dropout = 0.0;
    cfg
}

fn inputs(cfg: &CaptionerConfig, b: usize, salt: usize) -> Inputs {
    let fc: Vec<f32> = (0..b * cfg.fc_dim)
        .map(|i| (((i + salt) * 7919 % 23) as f32 - 11.0) / 4.0)
        .collect();
    let att: Option<Vec<f32>> = cfg.att.map(|(r, d)| {
        (0..b * r * d)
            .map(|i| (((i + salt) * 104729 % 19) as f32 - 9.0) / 3.0)
            .collect()
    });
    Inputs::from_host(&fc, att.as_deref(), b, cfg, &Device::Cpu).unwrap()
}

fn gradients_match_finite_differences(mut cfg: CaptionerConfig) {
    cfg.dtype = DType::F64;
    cfg.compute_dtype = DType::F64;
    let m = Captioner::new(&cfg, &Device::Cpu, 7).unwrap();
    let x = inputs(&cfg, 2, 1);
    let entries = |n: usize| vec![0, n / 3, n / 2, n - 1];
    assert_gradients_match(
        &m,
        &x,
        &[vec![4, 5, 6, EOS], vec![7, EOS]],
        |_| true,
        entries,
        1e-5,
    );
}

#[test]
fn transformer_gradients_match_finite_differences_over_regions() {
    gradients_match_finite_differences(tiny(true));
}

#[test]
fn transformer_gradients_match_finite_differences_with_the_fc_feature_as_a_region() {
    let mut cfg = tiny(true);
    cfg.model.global_region = true;
    cfg.model.enc_layers = 1;
    gradients_match_finite_differences(cfg);
}

#[test]
fn transformer_gradients_match_finite_differences_without_encoder_layers() {
    let mut cfg = tiny(true);
    cfg.model.global_region = true;
    cfg.model.enc_layers = 0;
    gradients_match_finite_differences(cfg);
}

#[test]
fn transformer_gradients_match_finite_differences_with_fc_only_and_tied_output() {
    let mut cfg = tiny(false);
    cfg.model.tie_embed = true;
    cfg.model.enc_layers = 1;
    gradients_match_finite_differences(cfg);
}

/// Greedy decoding by re-running the whole decoder over the prefix at every step: the
/// reference the key/value-cached decoder must match.
fn uncached_greedy(m: &Captioner, x: &Inputs, max_len: usize) -> Vec<(Vec<u32>, Vec<f32>)> {
    let b = x.batch_size().unwrap();
    (0..b)
        .map(|i| {
            let xi = x.select_rows(&[i]).unwrap();
            let (mut tokens, mut logps) = (Vec::new(), Vec::new());
            for t in 0..=max_len {
                // The last position's distribution is the next token's; its target is a dummy.
                let mut seq = tokens.clone();
                seq.push(4);
                let s = batch_tokens(&[seq], &Device::Cpu).unwrap();
                let full = m.teacher_forced(&xi, &s, None).unwrap().logprobs_full;
                let row = full
                    .get(0)
                    .unwrap()
                    .get(t)
                    .unwrap()
                    .to_vec1::<f32>()
                    .unwrap();
                let (w, lp) =
                    row.iter()
                        .enumerate()
                        .fold((0, f32::NEG_INFINITY), |best, (w, &lp)| {
                            if lp > best.1 {
                                (w, lp)
                            } else {
                                best
                            }
                        });
                if t == max_len && w as u32 != EOS {
                    break;
                }
                tokens.push(w as u32);
                logps.push(lp);
                if w as u32 == EOS {
                    break;
                }
            }
            (tokens, logps)
        })
        .collect()
}

#[test]
fn cached_decoding_equals_recomputing_the_prefix_every_step() {
    for (att, global_region, enc_layers) in [
        (true, false, 2),
        (false, false, 2),
        (true, true, 2),
        (true, true, 0),
    ] {
        let mut cfg = tiny(att);
        cfg.model.global_region = global_region;
        cfg.model.enc_layers = enc_layers;
        for seed in 0..4 {
            let m = Captioner::new(&cfg, &Device::Cpu, seed).unwrap();
            let x = inputs(&cfg, 3, seed as usize);
            let cached = m.greedy(&x, cfg.max_len).unwrap();
            let reference = uncached_greedy(&m, &x, cfg.max_len);
            for (row, (tokens, logps)) in reference.iter().enumerate() {
                assert_eq!(
                    &cached.tokens[row], tokens,
                    "att {att}, {enc_layers} encoder layers, seed {seed}, row {row}"
                );
                for (a, b) in cached.logprobs[row].iter().zip(logps) {
                    assert!(
                        (a - b).abs() < 1e-5,
                        "log-prob {a} cached vs {b} recomputed"
                    );
                }
            }
        }
    }
}

#[test]
fn changing_a_later_token_leaves_earlier_log_probs_unchanged() {
    let cfg = tiny(true);
    let m = Captioner::new(&cfg, &Device::Cpu, 3).unwrap();
    let x = inputs(&cfg, 1, 2);
    let full = |seq: Vec<u32>| {
        let s = batch_tokens(&[seq], &Device::Cpu).unwrap();
        m.teacher_forced(&x, &s, None)
            .unwrap()
            .logprobs_full
            .get(0)
            .unwrap()
            .to_vec2::<f32>()
            .unwrap()
    };
    let a = full(vec![4, 5, 6, 7, 8, EOS]);
    // Token 3 (index 3) is the input of positions 4 and later only.
    let b = full(vec![4, 5, 6, 9, 8, EOS]);
    for t in 0..=3 {
        assert_eq!(a[t], b[t], "position {t} saw a later token");
    }
    assert_ne!(a[4], b[4], "position 4 reads the changed token");
}

/// Rows that show the same image (its samples) read one encoding of it: the result equals
/// decoding each copy as its own image.
#[test]
fn samples_of_one_image_share_its_encoding() {
    let cfg = tiny(true);
    let m = Captioner::new(&cfg, &Device::Cpu, 4).unwrap();
    let x = inputs(&cfg, 2, 5);
    let opts = SampleOptions {
        n_per_input: 3,
        sampling: Sampling::default(),
        bad_endings: caprl_model::model::BadEndings::none(),
        max_len: cfg.max_len,
    };
    let shared = m.sample(&x, &opts, &mut CaprlRng::new(1)).unwrap();
    // The same rows as a batch of six separate images.
    let fc =
        x.fc.index_select(
            &Tensor::new(&[0u32, 0, 0, 1, 1, 1], &Device::Cpu).unwrap(),
            0,
        )
        .unwrap();
    let att = x
        .att
        .as_ref()
        .unwrap()
        .index_select(
            &Tensor::new(&[0u32, 0, 0, 1, 1, 1], &Device::Cpu).unwrap(),
            0,
        )
        .unwrap();
    let fc = fc.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let att = att.flatten_all().unwrap().to_vec1::<f32>().unwrap();
    let separate = Inputs::from_host(&fc, Some(&att), 6, &cfg, &Device::Cpu).unwrap();
    let one = SampleOptions {
        n_per_input: 1,
        ..opts
    };
    let apart = m.sample(&separate, &one, &mut CaprlRng::new(1)).unwrap();
    assert_eq!(shared.tokens, apart.tokens);
    for (a, b) in shared
        .logprobs
        .iter()
        .flatten()
        .zip(apart.logprobs.iter().flatten())
    {
        assert!((a - b).abs() < 1e-6);
    }
}

#[test]
fn transformer_save_and_load_give_identical_outputs() {
    let mut cfg = tiny(true);
    cfg.model.tie_embed = true;
    let a = Captioner::new(&cfg, &Device::Cpu, 1).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.safetensors");
    a.save(&path).unwrap();
    let b = Captioner::load(&path, &cfg, &Device::Cpu).unwrap();
    let x = inputs(&cfg, 2, 3);
    let seqs = batch_tokens(&[vec![4, 5, EOS], vec![6, EOS]], &Device::Cpu).unwrap();
    let (la, _) = a.token_logprobs(&x, &seqs, None).unwrap();
    let (lb, _) = b.token_logprobs(&x, &seqs, None).unwrap();
    assert_eq!(la.to_vec2::<f32>().unwrap(), lb.to_vec2::<f32>().unwrap());
    assert_eq!(a.to_safetensors().unwrap(), b.to_safetensors().unwrap());
    // Tied: no output matrix of its own.
    assert!(!a
        .varmap()
        .data()
        .lock()
        .unwrap()
        .contains_key("logit.weight"));
    // Weights of another shape are refused with the name of what differs.
    let mut other = cfg.clone();
    other.model.d_model = 12;
    let err = Captioner::load(&path, &other, &Device::Cpu)
        .err()
        .expect("shape mismatch");
    assert!(
        err.to_string().contains("embed.weight") || err.to_string().contains("shape"),
        "{err}"
    );
}

#[test]
fn impossible_transformer_shapes_are_clear_errors() {
    let mut cfg = tiny(true);
    cfg.model.d_model = 10;
    cfg.model.heads = 4;
    let err = Captioner::new(&cfg, &Device::Cpu, 0)
        .err()
        .expect("10 is not a multiple of 4");
    assert!(
        matches!(
            err,
            ModelError::Config {
                key: "model.d_model",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("heads"), "{err}");
    let mut cfg = tiny(true);
    cfg.model.dec_layers = 0;
    let err = Captioner::new(&cfg, &Device::Cpu, 0)
        .err()
        .expect("no decoder layer");
    assert!(err.to_string().contains("model.dec_layers"), "{err}");
}
