//! The compute dtype: bf16/f16 passes over f32 parameters, on the CPU.

#[path = "support/decode.rs"]
mod decode;

use caprl_wire::Sampling;

use caprl_model::model::{
    batch_tokens, BeamOptions, Captioner, CaptionerConfig, DType, Device, Inputs, ModelKind,
    RnnKind, SampleOptions,
};
use decode::sample_seeded;

/// [`decode::tiny`] computing in `compute`, without dropout and with a wider transformer
/// feed-forward (24).
fn tiny(kind: ModelKind, rnn: RnnKind, layers: usize, compute: DType) -> CaptionerConfig {
    let mut cfg = decode::tiny(kind, rnn, layers);
    cfg.model.dropout = 0.0;
    cfg.compute_dtype = compute;
    cfg.model.d_ff = 24;
    cfg
}

/// [`decode::inputs`] of `b` images, unsalted.
fn inputs(cfg: &CaptionerConfig, b: usize) -> Inputs {
    decode::inputs(cfg, b, 0)
}

fn sample_opts(cfg: &CaptionerConfig) -> SampleOptions {
    SampleOptions {
        n_per_input: 3,
        sampling: Sampling::default(),
        bad_endings: caprl_model::model::BadEndings::none(),
        max_len: cfg.max_len,
    }
}

#[test]
fn lower_precision_passes_keep_f32_parameters_and_agree_with_f32() {
    for (kind, rnn, layers) in [
        (ModelKind::Fc, RnnKind::Gru, 1),
        (ModelKind::Fc, RnnKind::Lstm, 2),
        (ModelKind::Att, RnnKind::Gru, 1),
        (ModelKind::Transformer, RnnKind::Gru, 2),
    ] {
        let reference =
            Captioner::new(&tiny(kind, rnn, layers, DType::F32), &Device::Cpu, 4).unwrap();
        let x32 = inputs(reference.config(), 3);
        let seqs = batch_tokens(
            &[vec![4, 5, 6, 2], vec![7, 2], vec![8, 9, 10, 11, 2]],
            &Device::Cpu,
        )
        .unwrap();
        let (lp32, _) = reference.token_logprobs(&x32, &seqs, None).unwrap();
        let lp32: Vec<f32> = lp32.flatten_all().unwrap().to_vec1().unwrap();
        for (dtype, tol) in [(DType::BF16, 0.05f32), (DType::F16, 0.01)] {
            let cfg = tiny(kind, rnn, layers, dtype);
            let m = Captioner::new(&cfg, &Device::Cpu, 4).unwrap();
            for (name, var) in m.varmap().data().lock().unwrap().iter() {
                assert_eq!(var.dtype(), DType::F32, "{name}");
            }
            let x = inputs(&cfg, 3);
            assert_eq!(x.fc.dtype(), dtype);
            let (lp, mask) = m.token_logprobs(&x, &seqs, None).unwrap();
            // Log-probabilities come out in the parameters' dtype.
            assert_eq!((lp.dtype(), mask.dtype()), (DType::F32, DType::F32));
            let lp: Vec<f32> = lp.flatten_all().unwrap().to_vec1().unwrap();
            let worst = lp
                .iter()
                .zip(&lp32)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(
                worst < tol,
                "{kind:?}/{rnn:?}/{layers} {dtype:?}: log-probs differ from f32 by {worst}"
            );
            // Gradients reach the f32 parameters through the cast.
            let (lp_t, _) = m.token_logprobs(&x, &seqs, None).unwrap();
            let grads = lp_t.sum_all().unwrap().backward().unwrap();
            for (name, var) in m.varmap().data().lock().unwrap().iter() {
                let g = grads
                    .get(var.as_tensor())
                    .unwrap_or_else(|| panic!("{dtype:?}: no gradient for {name}"));
                assert_eq!(g.dtype(), DType::F32, "{name}");
            }
            // Decoders run and stop within the length limit.
            let beams = m
                .beam(
                    &x,
                    &BeamOptions {
                        width: 2,
                        max_len: cfg.max_len,
                        length_norm: true,
                        block_trigrams: false,
                        groups: 1,
                        diversity_lambda: 0.0,
                        bad_endings: caprl_model::model::BadEndings::none(),
                    },
                )
                .unwrap();
            assert_eq!(beams.len(), 3);
            let g = m.greedy(&x, cfg.max_len).unwrap();
            assert!(g.tokens.iter().all(|t| t.len() <= cfg.max_len + 1));
        }
    }
}

#[test]
fn bf16_sampling_is_reproducible_for_a_seed_on_the_cpu() {
    let cfg = tiny(ModelKind::Att, RnnKind::Lstm, 2, DType::BF16);
    let m = Captioner::new(&cfg, &Device::Cpu, 2).unwrap();
    let x = inputs(&cfg, 4);
    let a = sample_seeded(&m, &x, &sample_opts(&cfg), 17);
    let b = sample_seeded(&m, &x, &sample_opts(&cfg), 17);
    assert_eq!(a, b);
    let c = sample_seeded(&m, &x, &sample_opts(&cfg), 18);
    assert_ne!(a.tokens, c.tokens, "another seed gave the same samples");
}

#[test]
fn parameters_stay_f32_or_f64_and_the_compute_dtype_is_checked() {
    let mut cfg = tiny(ModelKind::Fc, RnnKind::Gru, 1, DType::F32);
    cfg.dtype = DType::BF16;
    let msg = Captioner::new(&cfg, &Device::Cpu, 0)
        .err()
        .unwrap()
        .to_string();
    assert!(msg.contains("master weights stay f32"), "{msg}");

    let mut m = Captioner::new(
        &tiny(ModelKind::Fc, RnnKind::Gru, 1, DType::F32),
        &Device::Cpu,
        0,
    )
    .unwrap();
    let msg = m.set_compute_dtype(DType::U32).err().unwrap().to_string();
    assert!(msg.contains("f32, bf16 or f16"), "{msg}");
    assert_eq!(m.config().compute_dtype, DType::F32);
    m.set_compute_dtype(DType::BF16).unwrap();
    assert_eq!(m.config().compute_dtype, DType::BF16);
}
