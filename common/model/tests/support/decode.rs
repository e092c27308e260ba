//! The tiny models, inputs and decode settings of the decoding tests (`model_decode*.rs`).
#![allow(dead_code)]

use caprl_wire::Sampling;

use caprl_model::model::{
    batch_tokens, BadEndings, CaprlRng, Captioner, CaptionerConfig, Decoded, Device, Inputs,
    ModelKind, RnnKind, SampleOptions,
};

pub fn tiny(kind: ModelKind, rnn: RnnKind, layers: usize) -> CaptionerConfig {
    let mut cfg = CaptionerConfig::new(kind, 12, 6, Some((4, 5)));
    cfg.model.rnn = rnn;
    cfg.model.layers = layers;
    cfg.model.embed = 8;
    cfg.model.hidden = 16;
    cfg.model.att_hidden = 8;
    cfg.max_len = 7;
    if kind == ModelKind::Transformer {
        cfg.model.enc_layers = 1;
        cfg.model.dec_layers = layers;
        cfg.model.d_model = 16;
        cfg.model.heads = 2;
        cfg.model.d_ff = 20;
        cfg.model.tie_embed = false;
        cfg.model.global_region = false;
    }
    cfg
}

pub fn inputs(cfg: &CaptionerConfig, b: usize, salt: usize) -> Inputs {
    let fc: Vec<f32> = (0..b * cfg.fc_dim)
        .map(|i| (((i + salt) * 7919 % 23) as f32 - 11.0) / 4.0)
        .collect();
    let att: Vec<f32> = (0..b * 4 * 5)
        .map(|i| (((i + salt) * 104729 % 19) as f32 - 9.0) / 3.0)
        .collect();
    Inputs::from_host(&fc, Some(&att), b, cfg, &Device::Cpu).unwrap()
}

pub fn configs() -> Vec<CaptionerConfig> {
    vec![
        tiny(ModelKind::Fc, RnnKind::Gru, 1),
        tiny(ModelKind::Att, RnnKind::Lstm, 2),
        tiny(ModelKind::Transformer, RnnKind::Gru, 2),
    ]
}

pub fn opts(n: usize, temperature: f32, top_k: u32) -> SampleOptions {
    SampleOptions {
        n_per_input: n,
        sampling: Sampling {
            temperature,
            top_k,
            top_p: 1.0,
        },
        bad_endings: BadEndings::none(),
        max_len: 7,
    }
}

/// `m`'s samples of `x` with `options`, drawn from a fresh stream seeded with `seed`.
pub fn sample_seeded(m: &Captioner, x: &Inputs, options: &SampleOptions, seed: u64) -> Decoded {
    m.sample(x, options, &mut CaprlRng::new(seed)).unwrap()
}

pub fn teacher_logp(m: &Captioner, x: &Inputs, seqs: &[Vec<u32>]) -> Vec<f32> {
    let t = batch_tokens(seqs, &Device::Cpu).unwrap();
    let (logp, _) = m.token_logprobs(x, &t, None).unwrap();
    logp.sum(1).unwrap().to_vec1::<f32>().unwrap()
}
