//! AdamW follows its formula (moments, bias correction, decoupled weight decay) and its state
//! round-trips bit for bit; clipping and schedules follow their formulas.

use caprl_model::model::{batch_tokens, Captioner, CaptionerConfig, Device, Inputs, ModelKind};
use caprl_model::optim::{clip_grad_norm, grad_norm, AdamW, AdamWParams, Schedule};

#[path = "support/threads.rs"]
mod threads;
use threads::on_threads;

fn setup() -> (Captioner, Inputs, caprl_model::model::Tensor) {
    setup_with_hidden(12)
}

fn setup_with_hidden(hidden: usize) -> (Captioner, Inputs, caprl_model::model::Tensor) {
    let mut cfg = CaptionerConfig::new(ModelKind::Fc, 10, 6, None);
    cfg.model.embed = 8;
    cfg.model.hidden = hidden;
    cfg.max_len = 6;
    let m = Captioner::new(&cfg, &Device::Cpu, 1).unwrap();
    let fc: Vec<f32> = (0..2 * 6).map(|i| (i as f32 * 0.37).sin()).collect();
    let x = Inputs::from_host(&fc, None, 2, &cfg, &Device::Cpu).unwrap();
    let seqs = batch_tokens(&[vec![4, 5, 2], vec![6, 2]], &Device::Cpu).unwrap();
    (m, x, seqs)
}

fn train_step(m: &Captioner, x: &Inputs, seqs: &caprl_model::model::Tensor, opt: &mut AdamW) {
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
    cfg.model.hidden = 16;
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
    // self-critical.pytorch's transformer.yml: d_model 512, warmup 20000, factor 1.
    let noam = Schedule::Noam {
        factor: 1.0,
        d_model: 512,
        warmup: 20_000,
    };
    let peak = 1.0 / (512.0f64 * 20_000.0).sqrt();
    assert!(
        (noam.lr(19_999, 0) - peak).abs() < 1e-15,
        "peak at the end of the warmup"
    );
    assert!(
        (peak - 3.125e-4).abs() < 1e-6,
        "the peak the notes quote: {peak}"
    );
    assert!(
        (noam.lr(0, 0) - peak / 20_000.0).abs() < 1e-15,
        "linear rise from step 1"
    );
    assert!(
        (noam.lr(79_999, 0) - peak / 2.0).abs() < 1e-15,
        "1/√s after the warmup"
    );
    assert!(noam.lr(9_999, 0) < noam.lr(10_000, 0));
    assert!(noam.lr(30_000, 0) > noam.lr(30_001, 0));
}

/// Parameters large enough to be updated in chunks on several threads end up with exactly the
/// values one thread gives.
#[test]
fn adamw_on_several_threads_matches_one_thread_bit_for_bit() {
    let run = |threads: usize| {
        on_threads(threads, || {
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

/// `θ`, `m` and `v` after AdamW steps from `θ0` with gradients `grads` and learning rates `lrs`,
/// worked in f64 from the formula (Loshchilov & Hutter, algorithm 2): `m ← β1 m + (1-β1) g`,
/// `v ← β2 v + (1-β2) g²`, `m̂ = m / (1-β1^t)`, `v̂ = v / (1-β2^t)`,
/// `θ ← θ (1 - lr·λ) - lr · m̂ / (√v̂ + ε)`.
fn adamw_by_hand(theta0: f64, grads: &[f64], lrs: &[f64], p: AdamWParams) -> (f64, f64, f64) {
    let (mut theta, mut m, mut v) = (theta0, 0.0, 0.0);
    for (t, (&g, &lr)) in grads.iter().zip(lrs).enumerate() {
        let t = t as i32 + 1;
        m = p.beta1 * m + (1.0 - p.beta1) * g;
        v = p.beta2 * v + (1.0 - p.beta2) * g * g;
        let m_hat = m / (1.0 - p.beta1.powi(t));
        let v_hat = v / (1.0 - p.beta2.powi(t));
        theta = theta * (1.0 - lr * p.weight_decay) - lr * m_hat / (v_hat.sqrt() + p.eps);
    }
    (theta, m, v)
}

/// AdamW steps on three parameters — f32 and f64 (the fused host update) and bf16 (the tensor-op
/// update that other devices use) — with the gradient of `Σ c·θ`, which is exactly `c`, against
/// the formula worked by hand; a fourth parameter that gets no gradient must not move.
#[test]
fn adamw_steps_follow_the_formula_with_bias_correction_and_decoupled_decay() {
    use caprl_model::model::{DType, Device, Tensor};
    let p = AdamWParams {
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.5,
    };
    let dev = Device::Cpu;
    let theta0 = [1.0, -2.0, 0.3];
    // Gradients per step and element: changing sign and size, so that m̂ and √v̂ differ.
    let grads: [[f64; 3]; 4] = [
        [0.5, 0.02, -1.5],
        [-0.25, 0.03, -1.0],
        [0.75, -0.01, 0.5],
        [0.1, 0.04, -2.0],
    ];
    let lrs = [0.1, 0.05, 0.1, 0.02];
    let varmap = candle_nn::VarMap::new();
    let vars: Vec<(&str, DType, candle_core::Var)> = [
        ("a_f32", DType::F32),
        ("b_f64", DType::F64),
        ("c_bf16", DType::BF16),
    ]
    .into_iter()
    .map(|(name, dtype)| {
        varmap
            .get(3usize, name, candle_nn::Init::Const(0.0), dtype, &dev)
            .unwrap();
        let var = varmap.data().lock().unwrap()[name].clone();
        let theta = Tensor::new(&theta0, &dev).unwrap().to_dtype(dtype).unwrap();
        var.set(&theta).unwrap();
        (name, dtype, var)
    })
    .collect();
    let idle = varmap
        .get(
            2usize,
            "idle",
            candle_nn::Init::Const(0.7),
            DType::F32,
            &dev,
        )
        .unwrap();
    let mut opt = AdamW::new(&varmap, p).unwrap();

    // Worked by hand for the first element's first two steps (g = 0.5 then -0.25, λ = 0.5):
    // step 1: m̂ = g, v̂ = g², θ = 1·(1 - 0.1·0.5) - 0.1·0.5/0.5 = 0.85 (coupled L2 decay would
    // give 0.9, no bias correction 0.95 - 0.1·0.05/√0.00025 ≈ 0.634);
    // step 2: m = 0.02, v = 0.00031225, m̂ = 0.02/0.19, v̂ = 0.00031225/0.001999,
    // θ = 0.85·(1 - 0.05·0.5) - 0.05·m̂/√v̂ ≈ 0.8154332.
    let by_hand = [0.85, 0.815_433_2];
    let first = |var: &candle_core::Var| -> f64 {
        let t = var.as_tensor().to_dtype(DType::F64).unwrap();
        t.to_vec1::<f64>().unwrap()[0]
    };
    for (t, (g, &lr)) in grads.iter().zip(&lrs).enumerate() {
        let mut loss = Tensor::new(0f64, &dev).unwrap();
        for (_, dtype, var) in &vars {
            let c = Tensor::new(g, &dev).unwrap().to_dtype(*dtype).unwrap();
            let term = (var.as_tensor() * c).unwrap().sum_all().unwrap();
            loss = (loss + term.to_dtype(DType::F64).unwrap()).unwrap();
        }
        opt.step(&loss.backward().unwrap(), lr).unwrap();
        if let Some(want) = by_hand.get(t) {
            for (name, _, var) in &vars[..2] {
                let got = first(var);
                assert!(
                    (got - want).abs() < 1e-6,
                    "{name}[0] after step {}: {got}, by hand {want}",
                    t + 1
                );
            }
        }
    }

    let state = candle_core::safetensors::load_buffer(&opt.to_bytes().unwrap(), &dev).unwrap();
    let host = |t: &Tensor| -> Vec<f64> { t.to_dtype(DType::F64).unwrap().to_vec1().unwrap() };
    for (name, dtype, var) in &vars {
        // f32 and f64 agree with the f64 formula up to rounding; bf16 keeps 8 significant bits,
        // so θ ≈ 1 is off by up to 2⁻⁸ per rounding (an update is ≈ lr = 0.1).
        let tol = match dtype {
            DType::BF16 => 3e-2,
            DType::F32 => 1e-6,
            _ => 1e-12,
        };
        let theta = host(var.as_tensor());
        let m = host(&state[&format!("m.{name}")]);
        let v = host(&state[&format!("v.{name}")]);
        for e in 0..3 {
            let g: Vec<f64> = grads.iter().map(|s| s[e]).collect();
            let (want, want_m, want_v) = adamw_by_hand(theta0[e], &g, &lrs, p);
            assert!(
                (theta[e] - want).abs() < tol,
                "{name}[{e}]: θ = {} after {} steps, the formula gives {want}",
                theta[e],
                lrs.len()
            );
            assert!(
                (m[e] - want_m).abs() < tol * want_m.abs().max(1e-3),
                "{name}[{e}]: m = {}, the formula gives {want_m}",
                m[e]
            );
            assert!(
                (v[e] - want_v).abs() < tol * want_v.abs().max(1e-6),
                "{name}[{e}]: v = {}, the formula gives {want_v}",
                v[e]
            );
        }
    }
    assert_eq!(opt.step_count(), 4);
    // No gradient, no update: not even the weight decay.
    assert_eq!(idle.to_vec1::<f32>().unwrap(), vec![0.7, 0.7]);
}
