//! Lower-precision forward passes (`dtype = "bf16" | "f16"`) on the CPU: the learner's XE and SCST
//! steps agree with f32 on the same batch (loss, and every parameter's gradient), bf16 training still learns, and checkpoints (always
//! f32) move between bf16 and f32 runs.

#[path = "support/trainer.rs"]
mod support;
use support::{opts, tiny_data};

use std::collections::BTreeMap;

use caprl_wire::Sampling;

use caprl_data::{Dataset, Item};
use caprl_learner::eval::{evaluate, EvalOptions};
use caprl_learner::objective::xe;
use caprl_learner::{checkpoint, pg, PgTargets, StepStats, Trainer};
use caprl_model::model::{
    batch_tokens, inputs_for_rows, CaprlRng, Captioner, CaptionerConfig, DType, Device, ModelKind,
    SampleOptions, Tensor,
};
use caprl_model::optim::AdamWParams;

/// Largest relative difference of a bf16 step's loss from f32's on the same batch and weights
/// (bf16 keeps 8 significant bits: 2⁻⁸ ≈ 0.4% per rounding).
const BF16_LOSS_TOL: f32 = 5e-3;
/// The same for f16 (11 significant bits).
const F16_LOSS_TOL: f32 = 1e-3;
/// Per parameter, the least cosine and the largest relative error `‖g − g₃₂‖ / ‖g₃₂‖` of a
/// lower-precision gradient against f32's, for weight matrices and for biases. A bias gradient
/// is a sum over every row of the batch taken in the compute dtype, so it carries about ten
/// times the weights' error (measured: bf16 `logit.bias` 11%, weights under 1%).
#[derive(Clone, Copy)]
struct GradTol {
    weights: (f64, f64),
    biases: (f64, f64),
}
const BF16_GRAD_TOL: GradTol = GradTol {
    weights: (0.9995, 0.02),
    biases: (0.995, 0.15),
};
const F16_GRAD_TOL: GradTol = GradTol {
    weights: (0.99999, 5e-3),
    biases: (0.9995, 0.03),
};

fn tiny_model(data: &Dataset, hidden: usize, compute: DType) -> CaptionerConfig {
    let mut cfg = CaptionerConfig::new(ModelKind::Fc, data.vocab.len(), data.fc_dim(), None);
    cfg.model.embed = 32;
    cfg.model.hidden = hidden;
    cfg.model.dropout = 0.0;
    cfg.compute_dtype = compute;
    cfg
}

fn trainer(cfg: &CaptionerConfig, seed: u64) -> Trainer {
    Trainer::new(
        Captioner::new(cfg, &Device::Cpu, seed).unwrap(),
        AdamWParams::default(),
        5,
    )
    .unwrap()
}

fn rel(a: f32, b: f32) -> f32 {
    (a - b).abs() / b.abs().max(1e-6)
}

/// Every parameter's gradient of `loss`, flattened, by name (empty for a parameter it does not
/// reach).
fn gradients(model: &Captioner, loss: &Tensor) -> BTreeMap<String, Vec<f32>> {
    let grads = loss.backward().unwrap();
    let vars = model.varmap().data().lock().unwrap();
    vars.iter()
        .map(|(name, var)| {
            let g = grads.get(var.as_tensor()).map(|g| {
                let g = g.to_dtype(DType::F32).unwrap();
                g.flatten_all().unwrap().to_vec1::<f32>().unwrap()
            });
            (name.clone(), g.unwrap_or_default())
        })
        .collect()
}

/// The gradients of the trainer's XE step (`xe::nll` of the teacher-forced log-probabilities of
/// every reference of `items`), before clipping.
fn xe_gradients(model: &Captioner, data: &Dataset, items: &[&Item]) -> BTreeMap<String, Vec<f32>> {
    let cfg = model.config();
    let (mut rows, mut targets) = (Vec::new(), Vec::new());
    for item in items {
        for t in item.targets(&data.vocab, cfg.max_len) {
            rows.push(item.row);
            targets.push(t);
        }
    }
    let x = inputs_for_rows(data, &rows, cfg, &Device::Cpu).unwrap();
    let seqs = batch_tokens(&targets, &Device::Cpu).unwrap();
    let (logp, mask) = model.token_logprobs(&x, &seqs, None).unwrap();
    gradients(model, &xe::nll(&logp, &mask).unwrap())
}

/// The gradients of the trainer's SCST step (`pg::loss` with fixed advantages), before clipping.
fn pg_gradients(
    model: &Captioner,
    data: &Dataset,
    rows: &[usize],
    seqs: &[Vec<u32>],
    advantages: &[f32],
) -> BTreeMap<String, Vec<f32>> {
    let x = inputs_for_rows(data, rows, model.config(), &Device::Cpu).unwrap();
    let toks = batch_tokens(seqs, &Device::Cpu).unwrap();
    model.set_running_norm(true);
    let (logp, _) = model.token_logprobs(&x, &toks, None).unwrap();
    model.set_running_norm(false);
    let mask = model.token_mask(&toks).unwrap();
    gradients(
        model,
        &pg::loss(&logp, &mask, advantages, pg::LossNorm::Tokens).unwrap(),
    )
}

/// Compares every parameter's gradient with f32's: the cosine must be at least `tol.0` and the
/// relative error at most `tol.1` (of the weights' or the biases' pair). Returns the worst cosine
/// and relative error seen.
fn assert_gradients_close(
    what: &str,
    got: &BTreeMap<String, Vec<f32>>,
    want: &BTreeMap<String, Vec<f32>>,
    tol: GradTol,
) -> (f64, f64) {
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>(),
        "{what}: parameters"
    );
    let (mut worst_cos, mut worst_rel) = (1.0f64, 0.0f64);
    for (name, w) in want {
        let g = &got[name];
        assert!(!w.is_empty(), "{what}: f32 gives `{name}` no gradient");
        assert_eq!(
            g.len(),
            w.len(),
            "{what}: `{name}` has no gradient or another shape"
        );
        let (mut dot, mut gg, mut ww, mut diff) = (0f64, 0f64, 0f64, 0f64);
        for (&a, &b) in g.iter().zip(w) {
            let (a, b) = (a as f64, b as f64);
            dot += a * b;
            gg += a * a;
            ww += b * b;
            diff += (a - b) * (a - b);
        }
        assert!(ww > 0.0, "{what}: f32's gradient of `{name}` is zero");
        let cos = dot / (gg.sqrt() * ww.sqrt()).max(f64::MIN_POSITIVE);
        let bias = name.ends_with("bias") || name.ends_with("b_ih") || name.ends_with("b_hh");
        let tol = if bias { tol.biases } else { tol.weights };
        let rel = (diff / ww).sqrt();
        assert!(
            cos >= tol.0 && rel <= tol.1,
            "{what}: gradient of `{name}` has cosine {cos:.6} (at least {}) and relative error \
             {rel:.2e} (at most {}) against f32's",
            tol.0,
            tol.1
        );
        worst_cos = worst_cos.min(cos);
        worst_rel = worst_rel.max(rel);
    }
    (worst_cos, worst_rel)
}

/// The SCST batch of the loss test: each sequence's image row, its tokens and its advantage.
struct ScstBatch {
    rows: Vec<usize>,
    seqs: Vec<Vec<u32>>,
    advantages: Vec<f32>,
}

/// One SCST step on `batch` of a fresh trainer (seed 3) with `cfg`.
fn scst_step(cfg: &CaptionerConfig, data: &Dataset, batch: &ScstBatch) -> StepStats {
    let targets = PgTargets::sequence(&batch.advantages);
    trainer(cfg, 3)
        .pg_step(data, &batch.rows, &batch.seqs, targets, opts(1e-3))
        .unwrap()
}

/// The XE gradients on `items` and the SCST gradients on `batch` of a fresh model (seed 3)
/// with `cfg`.
fn step_gradients(
    cfg: &CaptionerConfig,
    data: &Dataset,
    items: &[&Item],
    batch: &ScstBatch,
) -> (BTreeMap<String, Vec<f32>>, BTreeMap<String, Vec<f32>>) {
    let fresh = || Captioner::new(cfg, &Device::Cpu, 3).unwrap();
    let xe = xe_gradients(&fresh(), data, items);
    let pg = pg_gradients(&fresh(), data, &batch.rows, &batch.seqs, &batch.advantages);
    (xe, pg)
}

/// Every parameter of the model, and every optimizer moment in a checkpoint, is f32.
fn assert_all_f32(model: &Captioner) {
    for (name, var) in model.varmap().data().lock().unwrap().iter() {
        assert_eq!(var.dtype(), DType::F32, "parameter {name} is not f32");
    }
}

#[test]
fn bf16_and_f16_xe_and_scst_losses_match_f32_on_the_same_batch() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tiny_data(tmp.path(), 16);
    let items: Vec<&Item> = data.train.items.iter().take(8).collect();
    let f32_cfg = tiny_model(&data, 48, DType::F32);

    // The SCST batch: 4 samples per image from the f32 model, fixed advantages.
    let sampler = Captioner::new(&f32_cfg, &Device::Cpu, 3).unwrap();
    let rows: Vec<usize> = items.iter().map(|it| it.row).collect();
    let x = caprl_model::model::inputs_for_rows(&data, &rows, &f32_cfg, &Device::Cpu).unwrap();
    let samples = sampler
        .sample(
            &x,
            &SampleOptions {
                n_per_input: 4,
                sampling: Sampling::default(),
                bad_endings: caprl_model::model::BadEndings::none(),
                max_len: f32_cfg.max_len,
            },
            &mut CaprlRng::new(9),
        )
        .unwrap();
    let seq_rows: Vec<usize> = rows
        .iter()
        .flat_map(|&r| std::iter::repeat_n(r, 4))
        .collect();
    let advantages: Vec<f32> = (0..seq_rows.len())
        .map(|i| ((i % 5) as f32 - 2.0) * 0.3)
        .collect();
    let batch = ScstBatch {
        rows: seq_rows,
        seqs: samples.tokens,
        advantages,
    };

    let mut reference = trainer(&f32_cfg, 3);
    let xe32 = reference.xe_step(&data, &items, opts(1e-3)).unwrap();
    let pg32 = scst_step(&f32_cfg, &data, &batch);
    assert!(!xe32.skipped && !pg32.skipped);

    let (xe_grads32, pg_grads32) = step_gradients(&f32_cfg, &data, &items, &batch);
    for (dtype, tol, grad_tol) in [
        (DType::BF16, BF16_LOSS_TOL, BF16_GRAD_TOL),
        (DType::F16, F16_LOSS_TOL, F16_GRAD_TOL),
    ] {
        let cfg = tiny_model(&data, 48, dtype);
        let mut t = trainer(&cfg, 3);
        let xe = t.xe_step(&data, &items, opts(1e-3)).unwrap();
        // The step updated the f32 master weights through the cast.
        assert_all_f32(&t.model);
        let pg = scst_step(&cfg, &data, &batch);
        eprintln!(
            "{dtype:?}: XE loss {:.6} vs f32 {:.6} (rel {:.2e}), grad norm {:.4} vs {:.4}; \
             SCST loss {:.6} vs f32 {:.6} (rel {:.2e}), grad norm {:.4} vs {:.4}",
            xe.loss,
            xe32.loss,
            rel(xe.loss, xe32.loss),
            xe.grad_norm,
            xe32.grad_norm,
            pg.loss,
            pg32.loss,
            rel(pg.loss, pg32.loss),
            pg.grad_norm,
            pg32.grad_norm
        );
        assert!(!xe.skipped && !pg.skipped, "{dtype:?} step was skipped");
        assert_eq!(xe.tokens, xe32.tokens);
        assert!(
            rel(xe.loss, xe32.loss) < tol,
            "{dtype:?} XE loss {} is not within {tol} of f32's {}",
            xe.loss,
            xe32.loss
        );
        assert!(
            rel(pg.loss, pg32.loss) < tol,
            "{dtype:?} SCST loss {} is not within {tol} of f32's {}",
            pg.loss,
            pg32.loss
        );
        let (xe_grads, pg_grads) = step_gradients(&cfg, &data, &items, &batch);
        let (xe_cos, xe_rel) =
            assert_gradients_close(&format!("{dtype:?} XE"), &xe_grads, &xe_grads32, grad_tol);
        let (pg_cos, pg_rel) =
            assert_gradients_close(&format!("{dtype:?} SCST"), &pg_grads, &pg_grads32, grad_tol);
        eprintln!(
            "{dtype:?} per-parameter gradients: XE worst cosine {xe_cos:.6}, relative error \
             {xe_rel:.2e}; SCST {pg_cos:.6}, {pg_rel:.2e}"
        );
        // Not the f32 pass by accident: lower precision changes the loss a little.
        assert_ne!(xe.loss, xe32.loss, "{dtype:?} gave f32's loss bit for bit");
    }
}

#[test]
fn bf16_training_raises_validation_cider() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tiny_data(tmp.path(), 160);
    // The bf16 twin of trainer_xe.rs's test; bf16 has no fast path on the CPU, so it is slower.
    let mut cfg = tiny_model(&data, 64, DType::BF16);
    cfg.model.dropout = 0.1;
    let mut t = trainer(&cfg, 3);
    let eval_opts = EvalOptions {
        beam: 1,
        samples: 0,
        ..EvalOptions::default()
    };
    let before = evaluate(&t.model, &data, &data.val.items, &eval_opts).unwrap();
    let mut losses = Vec::new();
    while t.state.step < 60 {
        let Some(idx) = t.next_batch(data.train.items.len(), 16) else {
            continue;
        };
        let items: Vec<&Item> = idx.iter().map(|&i| &data.train.items[i]).collect();
        losses.push(t.xe_step(&data, &items, opts(3e-3)).unwrap().loss);
    }
    let after = evaluate(&t.model, &data, &data.val.items, &eval_opts).unwrap();
    let head: f32 = losses[..5].iter().sum::<f32>() / 5.0;
    let tail: f32 = losses[losses.len() - 5..].iter().sum::<f32>() / 5.0;
    let (c0, c1) = (before.metrics["cider_d"], after.metrics["cider_d"]);
    eprintln!("bf16: XE loss {head:.3} → {tail:.3}, val CIDEr-D {c0:.3} → {c1:.3}");
    assert!(
        tail < 0.7 * head,
        "bf16 XE loss did not fall: {head:.3} → {tail:.3}"
    );
    assert!(
        c1 > c0 + 0.3,
        "bf16 training did not raise validation CIDEr-D by 0.3: {c0:.3} → {c1:.3}"
    );
    assert_all_f32(&t.model);
}

#[test]
fn checkpoints_from_a_bf16_run_load_into_an_f32_run_and_back() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tiny_data(tmp.path(), 24);
    let bf16 = tiny_model(&data, 24, DType::BF16);
    let f32_cfg = tiny_model(&data, 24, DType::F32);
    let items: Vec<&Item> = data.train.items.iter().take(8).collect();
    let adam = AdamWParams::default();

    let mut a = trainer(&bf16, 1);
    for _ in 0..3 {
        a.xe_step(&data, &items, opts(3e-3)).unwrap();
    }
    let root = tmp.path().join("ck");
    let ck = a.save(&root, 3, &[]).unwrap();
    // Weights and optimizer moments on disk are f32.
    for file in ["model.safetensors", "optim.safetensors"] {
        let tensors = candle_core::safetensors::load(ck.file(file), &Device::Cpu).unwrap();
        assert!(!tensors.is_empty());
        for (name, t) in &tensors {
            assert_eq!(t.dtype(), DType::F32, "{file}: {name} is not f32");
        }
    }

    // Into an f32 run: the same weights, and it trains on.
    let mut b = Trainer::restore(&ck, &f32_cfg, &Device::Cpu, adam, 5).unwrap();
    assert_eq!(b.model.config().compute_dtype, DType::F32);
    assert_eq!(
        a.model.to_safetensors().unwrap(),
        b.model.to_safetensors().unwrap()
    );
    assert_eq!(b.state.step, 3);
    let step = b.xe_step(&data, &items, opts(3e-3)).unwrap();
    assert!(!step.skipped && step.loss.is_finite());
    let ck2 = b.save(&root, 3, &[]).unwrap();

    // And back into a bf16 run.
    let mut c = Trainer::restore(&ck2, &bf16, &Device::Cpu, adam, 5).unwrap();
    assert_eq!(c.model.config().compute_dtype, DType::BF16);
    assert_eq!(
        b.model.to_safetensors().unwrap(),
        c.model.to_safetensors().unwrap()
    );
    let latest = checkpoint::latest_valid(&root).unwrap().unwrap();
    assert_eq!(latest.dir, ck2.dir);
    let step = c.xe_step(&data, &items, opts(3e-3)).unwrap();
    assert!(!step.skipped && step.loss.is_finite());
    assert_all_f32(&c.model);
}
