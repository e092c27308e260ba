//! AdamW state round-trips bit for bit; clipping and schedules follow their formulas.

use caprl_common::model::{batch_tokens, Captioner, CaptionerConfig, Device, Inputs, ModelKind};
use caprl_common::optim::{clip_grad_norm, grad_norm, AdamW, AdamWParams, Schedule};

fn setup() -> (Captioner, Inputs, caprl_common::model::Tensor) {
    setup_with_hidden(12)
}

fn setup_with_hidden(hidden: usize) -> (Captioner, Inputs, caprl_common::model::Tensor) {
    let mut cfg = CaptionerConfig::new(ModelKind::Fc, 10, 6, None);
    cfg.embed = 8;
    cfg.hidden = hidden;
    cfg.max_len = 6;
    let m = Captioner::new(&cfg, &Device::Cpu, 1).unwrap();
    let fc: Vec<f32> = (0..2 * 6).map(|i| (i as f32 * 0.37).sin()).collect();
    let x = Inputs::from_host(&fc, None, 2, &cfg, &Device::Cpu).unwrap();
    let seqs = batch_tokens(&[vec![4, 5, 2], vec![6, 2]], &Device::Cpu).unwrap();
    (m, x, seqs)
}

fn train_step(m: &Captioner, x: &Inputs, seqs: &caprl_common::model::Tensor, opt: &mut AdamW) {
    let (logp, _) = m.token_logprobs(x, seqs, None).unwrap();
    let loss = logp.sum_all().unwrap().neg().unwrap();
    let mut grads = loss.backward().unwrap();
    clip_grad_norm(&mut grads, &opt.vars(), 1.0).unwrap();
    opt.step(&grads, 1e-2).unwrap();
}

fn params() -> AdamWParams {
    AdamWParams {
        weight_decay: 0.01,
        ..AdamWParams::default()
    }
}

#[test]
fn adamw_resumed_from_a_checkpoint_matches_an_uninterrupted_run_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    let (a, x, seqs) = setup();
    let mut opt_a = AdamW::new(a.varmap(), params()).unwrap();
    let initial = a.to_safetensors().unwrap();
    train_step(&a, &x, &seqs, &mut opt_a);
    assert_ne!(
        a.to_safetensors().unwrap(),
        initial,
        "a step changes the weights"
    );
    for _ in 0..2 {
        train_step(&a, &x, &seqs, &mut opt_a);
    }
    a.save(&dir.path().join("w.safetensors")).unwrap();
    opt_a.save(&dir.path().join("opt.safetensors")).unwrap();
    train_step(&a, &x, &seqs, &mut opt_a);
    train_step(&a, &x, &seqs, &mut opt_a);

    let b = Captioner::load(&dir.path().join("w.safetensors"), a.config(), &Device::Cpu).unwrap();
    let mut opt_b = AdamW::new(b.varmap(), AdamWParams::default()).unwrap();
    opt_b.load(&dir.path().join("opt.safetensors")).unwrap();
    assert_eq!(opt_b.step_count(), 3);
    assert_eq!(opt_b.params(), params());
    train_step(&b, &x, &seqs, &mut opt_b);
    train_step(&b, &x, &seqs, &mut opt_b);
    assert_eq!(a.to_safetensors().unwrap(), b.to_safetensors().unwrap());
}

#[test]
fn optimizer_state_of_another_model_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _, _) = setup();
    let opt = AdamW::new(a.varmap(), params()).unwrap();
    opt.save(&dir.path().join("opt.safetensors")).unwrap();
    let mut cfg = a.config().clone();
    cfg.hidden = 16;
    let b = Captioner::new(&cfg, &Device::Cpu, 1).unwrap();
    let mut opt_b = AdamW::new(b.varmap(), params()).unwrap();
    let msg = opt_b
        .load(&dir.path().join("opt.safetensors"))
        .err()
        .unwrap()
        .to_string();
    assert!(
        msg.contains("opt.safetensors") && msg.contains("shape"),
        "{msg}"
    );
    std::fs::write(dir.path().join("junk"), b"junk").unwrap();
    assert!(opt_b.load(&dir.path().join("junk")).is_err());
}

#[test]
fn clipping_scales_to_max_norm_and_returns_the_norm_before() {
    let (m, x, seqs) = setup();
    let opt = AdamW::new(m.varmap(), params()).unwrap();
    let (logp, _) = m.token_logprobs(&x, &seqs, None).unwrap();
    let mut grads = logp.sum_all().unwrap().neg().unwrap().backward().unwrap();
    let before = grad_norm(&grads, &opt.vars()).unwrap();
    assert!(before > 0.1);
    let max = before / 4.0;
    let reported = clip_grad_norm(&mut grads, &opt.vars(), max).unwrap();
    assert_eq!(reported, before);
    let after = grad_norm(&grads, &opt.vars()).unwrap();
    assert!((after - max).abs() < 1e-5 * max, "{after} vs {max}");
    // Under the limit or with 0 (off): unchanged.
    assert!((clip_grad_norm(&mut grads, &opt.vars(), 0.0).unwrap() - after).abs() < 1e-9);
    assert!((grad_norm(&grads, &opt.vars()).unwrap() - after).abs() < 1e-9);
}

#[test]
fn adamw_rejects_out_of_range_hyper_parameters() {
    let (m, _, _) = setup();
    let bad = AdamWParams {
        beta1: 1.0,
        ..AdamWParams::default()
    };
    let msg = AdamW::new(m.varmap(), bad).err().unwrap().to_string();
    assert!(msg.contains("beta1"), "{msg}");
}

#[test]
fn schedules_follow_their_formulas() {
    let c = Schedule::Constant { lr: 0.1 };
    assert_eq!(c.lr(1000, 50), 0.1);
    let s = Schedule::Step {
        lr: 1.0,
        every: 3,
        rate: 0.5,
    };
    assert_eq!(s.lr(0, 0), 1.0);
    assert_eq!(s.lr(0, 2), 1.0);
    assert_eq!(s.lr(0, 3), 0.5);
    assert_eq!(s.lr(0, 7), 0.25);
    let cos = Schedule::Cosine {
        lr: 1.0,
        warmup: 10,
        total: 110,
    };
    assert!((cos.lr(0, 0) - 0.1).abs() < 1e-12);
    assert!((cos.lr(9, 0) - 1.0).abs() < 1e-12);
    assert!((cos.lr(10, 0) - 1.0).abs() < 1e-12);
    assert!((cos.lr(60, 0) - 0.5).abs() < 1e-12);
    assert!(cos.lr(110, 0).abs() < 1e-12);
    assert!(cos.lr(500, 0).abs() < 1e-12);
}

/// Parameters large enough to be updated in chunks on several threads end up with exactly the
/// values one thread gives.
#[test]
fn adamw_on_several_threads_matches_one_thread_bit_for_bit() {
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        pool.install(|| {
            // w_hh is 3H x H = 3 x 160²: more than four update chunks.
            let (m, x, seqs) = setup_with_hidden(160);
            let mut opt = AdamW::new(m.varmap(), params()).unwrap();
            for _ in 0..2 {
                train_step(&m, &x, &seqs, &mut opt);
            }
            (m.to_safetensors().unwrap(), opt.to_bytes().unwrap())
        })
    };
    let one = run(1);
    assert!(one == run(2), "weights or moments differ on two threads");
}
