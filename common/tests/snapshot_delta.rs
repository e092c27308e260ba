//! Snapshot deltas over a real training run: every version rebuilt from the one before by its
//! delta is the version's full snapshot bit for bit, in f32 and bf16; a reader that missed
//! versions rebuilds the newest from the oldest it holds by the deltas in between.

use caprl_common::snapshot;
use caprl_common::snapshot_delta::{apply, encode};
use caprl_model::model::{
    batch_tokens, Captioner, CaptionerConfig, DType, Device, Inputs, ModelKind,
};
use caprl_model::optim::{AdamW, AdamWParams};

/// A small Transformer and an XE step on two captions at learning rate `lr`.
fn model() -> (Captioner, Inputs, caprl_model::model::Tensor) {
    let mut cfg = CaptionerConfig::new(ModelKind::Transformer, 11, 6, Some((4, 5)));
    cfg.model.d_model = 16;
    cfg.model.heads = 2;
    cfg.model.d_ff = 32;
    cfg.model.enc_layers = 1;
    cfg.model.dec_layers = 1;
    cfg.max_len = 6;
    let m = Captioner::new(&cfg, &Device::Cpu, 1).unwrap();
    let fc: Vec<f32> = (0..2 * 6).map(|i| (i as f32 * 0.37).sin()).collect();
    let att: Vec<f32> = (0..2 * 4 * 5).map(|i| (i as f32 * 0.11).cos()).collect();
    let x = Inputs::from_host(&fc, Some(&att), 2, &cfg, &Device::Cpu).unwrap();
    let seqs = batch_tokens(&[vec![4, 5, 2], vec![6, 7, 8, 2]], &Device::Cpu).unwrap();
    (m, x, seqs)
}

fn step(m: &Captioner, x: &Inputs, seqs: &caprl_model::model::Tensor, opt: &mut AdamW, lr: f64) {
    let (logp, _) = m.token_logprobs(x, seqs, None).unwrap();
    let grads = logp.sum_all().unwrap().neg().unwrap().backward().unwrap();
    opt.step(&grads, lr).unwrap();
}

#[test]
fn every_version_rebuilt_from_deltas_is_its_full_snapshot_in_f32_and_bf16() {
    for (dtype, width) in [(DType::F32, 4), (DType::BF16, 2)] {
        let (m, x, seqs) = model();
        let mut opt = AdamW::new(m.varmap(), AdamWParams::default()).unwrap();
        let full = |m: &Captioner| snapshot::encode(m, Vec::new(), dtype, Some("vocab")).unwrap();
        let first = full(&m);
        let mut versions = vec![first.clone()];
        let mut held = first.clone();
        // A larger step now and then, as at the start of a phase, beside the small ones.
        for v in 1..=30 {
            let lr = if v % 10 == 0 { 1e-2 } else { 1e-4 };
            step(&m, &x, &seqs, &mut opt, lr);
            let next = full(&m);
            let delta = encode(versions.last().unwrap(), &next, width).unwrap();
            assert!(
                delta.len() < next.len(),
                "{dtype:?} v{v}: a delta of {} bytes",
                delta.len()
            );
            held = apply(&held, &delta).unwrap();
            assert_eq!(held, next, "{dtype:?} v{v} rebuilt from its delta");
            versions.push(next);
        }
        // A reader that holds v3 only: the deltas after it rebuild v30, and a delta made against
        // an older base (v3 → v30 at once) does too.
        let mut late = versions[3].clone();
        for v in 4..=30 {
            let delta = encode(&versions[v - 1], &versions[v], width).unwrap();
            late = apply(&late, &delta).unwrap();
        }
        assert_eq!(late, versions[30], "{dtype:?}: v3 and the deltas after it");
        let jump = encode(&versions[3], &versions[30], width).unwrap();
        assert_eq!(apply(&versions[3], &jump).unwrap(), versions[30]);
        // The rebuilt snapshot loads as the policy it is.
        let cfg = m.config().clone();
        let loaded = snapshot::load_policy(&late, &cfg, &Device::Cpu, "vocab");
        assert!(loaded.is_ok(), "{dtype:?}: {:?}", loaded.err());
    }
}
