//! The comparisons of one tiny model between the CPU reference and the device under test.

use candle_core::backprop::GradStore;
use candle_core::{DType, Device, Tensor};

use super::{Comparison, Result, SelftestOptions};
use crate::model::{
    batch_tokens, CaprlRng, Captioner, CaptionerConfig, Inputs, ModelError, ModelKind, RnnKind,
};
use crate::optim::{clip_grad_norm, grad_norm, AdamW, AdamWParams};
use caprl_kernels::fastmath::{set_simd, Simd};
use caprl_kernels::set_generic_ops;

/// A model to compare, with its inputs (host features) and teacher-forced captions.
pub(crate) struct TinyModel {
    pub name: &'static str,
    pub cfg: CaptionerConfig,
    pub fc: Vec<f32>,
    pub att: Option<Vec<f32>>,
    pub batch: usize,
    pub captions: Vec<Vec<u32>>,
}

/// One model of each kind, small enough that the whole self-test takes seconds on a CPU: the
/// fc model with a GRU, the att model with two LSTM layers, the crnn audio encoder (its
/// convolutions, batch norm and bidirectional GRU) and a two-layer Transformer over regions.
pub(crate) fn tiny_models() -> Vec<TinyModel> {
    let wave = |n: usize, k: f32| -> Vec<f32> { (0..n).map(|i| (i as f32 * k).sin()).collect() };
    let captions = vec![vec![4, 5, 6, 2], vec![7, 2], vec![8, 9, 4, 10, 2]];
    let b = captions.len();
    let mut fc = CaptionerConfig::new(ModelKind::Fc, 12, 6, None);
    (
        fc.model.embed,
        fc.model.hidden,
        fc.max_len,
        fc.model.dropout,
    ) = (8, 16, 6, 0.2);
    let mut att = CaptionerConfig::new(ModelKind::Att, 12, 6, Some((5, 4)));
    (
        att.model.embed,
        att.model.hidden,
        att.model.att_hidden,
        att.max_len,
    ) = (8, 12, 10, 6);
    (att.model.rnn, att.model.layers, att.model.dropout) = (RnnKind::Lstm, 2, 0.2);
    let mut crnn = CaptionerConfig::new(ModelKind::Crnn, 12, 6, Some((16, 64)));
    (
        crnn.model.embed,
        crnn.model.hidden,
        crnn.model.crnn_width,
        crnn.max_len,
    ) = (8, 10, 8, 6);
    crnn.model.dropout = 0.0;
    let mut transformer = CaptionerConfig::new(ModelKind::Transformer, 12, 6, Some((5, 4)));
    (transformer.max_len, transformer.model.dropout) = (6, 0.2);
    transformer.model.enc_layers = 2;
    transformer.model.dec_layers = 2;
    transformer.model.d_model = 16;
    transformer.model.heads = 4;
    transformer.model.d_ff = 24;
    transformer.model.tie_embed = false;
    transformer.model.global_region = false;
    // Each model's inputs: `fc` and, where it attends, `att` values per image (a sine wave
    // with its own step, so no two inputs are alike).
    let tiny = |name, cfg, fc: f32, att: Option<(usize, f32)>| TinyModel {
        name,
        fc: wave(b * 6, fc),
        att: att.map(|(per_image, step)| wave(b * per_image, step)),
        cfg,
        batch: b,
        captions: captions.clone(),
    };
    vec![
        tiny("fc-gru", fc, 0.37, None),
        tiny("att-lstm2", att, 0.41, Some((5 * 4, 0.23))),
        tiny("crnn-gru", crnn, 0.29, Some((16 * 64, 0.057))),
        tiny("transformer", transformer, 0.31, Some((5 * 4, 0.19))),
    ]
}

/// Values of a tensor on the host, as f64.
fn host(t: &Tensor) -> Result<Vec<f64>> {
    Ok(t.to_device(&Device::Cpu)?
        .to_dtype(DType::F64)?
        .flatten_all()?
        .to_vec1()?)
}

/// The largest difference of two value lists, its index, and the largest reference magnitude.
fn largest_diff(got: &[f64], want: &[f64]) -> (f64, usize, f64) {
    let mut worst = (
        if got.len() == want.len() {
            0.0
        } else {
            f64::INFINITY
        },
        0,
    );
    let mut scale = 0f64;
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let d = (g - w).abs();
        // NaN on either side is the worst difference there is.
        let d = if d.is_nan() { f64::INFINITY } else { d };
        if d > worst.0 {
            worst = (d, i);
        }
        scale = scale.max(w.abs());
    }
    (worst.0, worst.1, scale)
}

/// A tolerance check of `got` against `want`.
fn close(name: String, got: &[f64], want: &[f64], tol: f64, detail: String) -> Comparison {
    let (largest, at, scale) = largest_diff(got, want);
    Comparison {
        name,
        largest,
        allowed: tol * scale.max(1.0),
        detail: if largest > 0.0 && want.len() > 1 {
            format!("{detail} at element {at}")
        } else {
            detail
        },
    }
}

/// One model's state on one device: the model, its inputs and captions.
struct Side {
    model: Captioner,
    x: Inputs,
    seqs: Tensor,
}

impl Side {
    fn new(m: &TinyModel, device: &Device, seed: u64) -> Result<Self> {
        let model = Captioner::new(&m.cfg, device, seed)?;
        let x = Inputs::from_host(&m.fc, m.att.as_deref(), m.batch, &m.cfg, device)?;
        let seqs = batch_tokens(&m.captions, device)?;
        Ok(Self { model, x, seqs })
    }

    /// Token log-probs (no dropout) and the gradients of their mean.
    fn logprobs_and_grads(&self) -> Result<(Tensor, GradStore)> {
        let (logp, mask) = self.model.token_logprobs(&self.x, &self.seqs, None)?;
        let n = mask.sum_all()?.to_dtype(DType::F64)?.to_scalar::<f64>()?;
        let loss = (logp.sum_all()?.neg()? / n.max(1.0))?;
        let grads = loss.backward()?;
        Ok((logp, grads))
    }

    /// The parameters, sorted by name.
    fn vars(&self) -> Vec<(String, candle_core::Var)> {
        let data = match self.model.varmap().data().lock() {
            Ok(d) => d,
            Err(p) => p.into_inner(),
        };
        let mut v: Vec<_> = data.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }
}

/// How one side of a comparison computes on the CPU: the project's kernels at a SIMD level,
/// or the generic ops (what CUDA runs).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mode {
    pub generic_ops: bool,
    pub level: Simd,
}

/// The two sides of a comparison: the reference (always on the CPU) and the subject.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sides {
    pub reference: Mode,
    pub subject: Mode,
}

/// Runs `f` in `mode` (process-wide: the self-test runs alone).
fn mode<T>(mode: Mode, f: impl FnOnce() -> Result<T>) -> Result<T> {
    set_generic_ops(Some(mode.generic_ops));
    set_simd(Some(mode.level))?;
    f()
}

/// Every comparison of `m` on `device` against the CPU reference.
pub(crate) fn compare_model(
    m: &TinyModel,
    device: &Device,
    sides: Sides,
    opts: &SelftestOptions,
) -> Result<Vec<Comparison>> {
    let tol = opts.tolerance;
    let name = |what: &str| format!("{} {what}", m.name);
    let reference = mode(sides.reference, || Side::new(m, &Device::Cpu, opts.seed))?;
    let subject = mode(sides.subject, || Side::new(m, device, opts.seed))?;
    let mut out = Vec::new();

    let (ref_logp, ref_grads) = mode(sides.reference, || reference.logprobs_and_grads())?;
    let (sub_logp, sub_grads) = mode(sides.subject, || subject.logprobs_and_grads())?;
    out.push(close(
        name("token log-probs"),
        &host(&sub_logp)?,
        &host(&ref_logp)?,
        tol,
        format!("{} tokens", m.captions.iter().map(Vec::len).sum::<usize>()),
    ));

    // Each parameter against its own magnitude; the one nearest its limit is reported.
    let mut per_param = Vec::new();
    for ((pname, rv), (_, sv)) in reference.vars().iter().zip(&subject.vars()) {
        let (Some(rg), sg) = (ref_grads.get(rv.as_tensor()), sub_grads.get(sv.as_tensor())) else {
            continue;
        };
        let got = match sg {
            Some(g) => host(g)?,
            None => vec![f64::INFINITY; rg.elem_count()],
        };
        per_param.push(close(
            name("gradients"),
            &got,
            &host(rg)?,
            tol,
            pname.clone(),
        ));
    }
    let n_params = per_param.len();
    let ratio = |c: &Comparison| c.largest / c.allowed.max(f64::MIN_POSITIVE);
    let mut worst = per_param
        .into_iter()
        .max_by(|a, b| ratio(a).total_cmp(&ratio(b)))
        .ok_or_else(|| ModelError::Input("the model has no parameter with a gradient".into()))?;
    worst.detail = format!("{n_params} parameters; nearest its limit: {}", worst.detail);
    out.push(worst);

    let vars = |side: &Side| -> Vec<candle_core::Var> {
        side.vars().into_iter().map(|(_, v)| v).collect()
    };
    let ref_norm = mode(sides.reference, || {
        Ok(grad_norm(&ref_grads, &vars(&reference))?)
    })?;
    let sub_norm = mode(sides.subject, || {
        Ok(grad_norm(&sub_grads, &vars(&subject))?)
    })?;
    out.push(close(
        name("gradient norm"),
        &[sub_norm],
        &[ref_norm],
        tol,
        format!("global L2 norm {ref_norm:.6} on the CPU"),
    ));

    out.push(adamw_step(
        m, &reference, &ref_grads, &subject, sub_grads, sides, tol,
    )?);
    out.push(greedy(m, &reference, &subject, sides)?);
    out.push(snapshot(m, &subject, sides)?);
    out.push(repeat_training(m, device, sides, opts)?);
    Ok(out)
}

/// One AdamW step on each side from the same (the reference's) gradients.
fn adamw_step(
    m: &TinyModel,
    reference: &Side,
    ref_grads: &GradStore,
    subject: &Side,
    mut sub_grads: GradStore,
    sides: Sides,
    tol: f64,
) -> Result<Comparison> {
    let p = AdamWParams {
        weight_decay: 0.01,
        ..AdamWParams::default()
    };
    let lr = 1e-2;
    for ((_, rv), (_, sv)) in reference.vars().iter().zip(subject.vars()) {
        if let Some(g) = ref_grads.get(rv.as_tensor()) {
            sub_grads.insert(sv.as_tensor(), g.to_device(sv.device())?);
        }
    }
    mode(sides.reference, || {
        Ok(AdamW::new(reference.model.varmap(), p)?.step(ref_grads, lr)?)
    })?;
    mode(sides.subject, || {
        Ok(AdamW::new(subject.model.varmap(), p)?.step(&sub_grads, lr)?)
    })?;
    let mut got = Vec::new();
    let mut want = Vec::new();
    for ((_, rv), (_, sv)) in reference.vars().iter().zip(subject.vars()) {
        want.extend(host(rv.as_tensor())?);
        got.extend(host(sv.as_tensor())?);
    }
    Ok(close(
        format!("{} adamw step", m.name),
        &got,
        &want,
        tol,
        format!("{} weights", want.len()),
    ))
}

/// Greedy captions must be the same tokens; their log-probs close.
fn greedy(m: &TinyModel, reference: &Side, subject: &Side, sides: Sides) -> Result<Comparison> {
    let max_len = m.cfg.max_len;
    let r = mode(sides.reference, || {
        Ok(reference.model.greedy(&reference.x, max_len)?)
    })?;
    let s = mode(sides.subject, || {
        Ok(subject.model.greedy(&subject.x, max_len)?)
    })?;
    let differing: Vec<usize> = (0..r.tokens.len())
        .filter(|&i| r.tokens.get(i) != s.tokens.get(i))
        .collect();
    Ok(Comparison {
        name: format!("{} greedy tokens", m.name),
        largest: differing.len() as f64,
        allowed: 0.0,
        detail: if differing.is_empty() {
            format!("{} captions identical", r.tokens.len())
        } else {
            format!(
                "captions {differing:?} differ: cpu {:?}, device {:?}",
                r.tokens, s.tokens
            )
        },
    })
}

/// The subject's snapshot, loaded on the CPU, holds exactly the subject's weights.
fn snapshot(m: &TinyModel, subject: &Side, sides: Sides) -> Result<Comparison> {
    let bytes = subject.model.to_safetensors()?;
    let loaded = mode(sides.reference, || {
        Ok(Captioner::from_safetensors(&bytes, &m.cfg, &Device::Cpu)?)
    })?;
    let mut differing = Vec::new();
    let data = match loaded.varmap().data().lock() {
        Ok(d) => d.clone(),
        Err(p) => p.into_inner().clone(),
    };
    for (name, sv) in subject.vars() {
        let same = match data.get(&name) {
            Some(lv) => host(lv.as_tensor())? == host(sv.as_tensor())?,
            None => false,
        };
        if !same {
            differing.push(name);
        }
    }
    Ok(Comparison {
        name: format!("{} snapshot device -> cpu", m.name),
        largest: differing.len() as f64,
        allowed: 0.0,
        detail: if differing.is_empty() {
            format!("{} bytes, every parameter identical", bytes.len())
        } else {
            format!("parameters that changed on the way: {differing:?}")
        },
    })
}

/// Two training runs from one seed, each step's forward and backward pass on one new thread and
/// its optimizer step on another: the weights must come out byte-identical.
fn repeat_training(
    m: &TinyModel,
    device: &Device,
    sides: Sides,
    opts: &SelftestOptions,
) -> Result<Comparison> {
    let train = || -> Result<Vec<u8>> {
        let side = Side::new(m, device, opts.seed)?;
        let mut opt = AdamW::new(side.model.varmap(), AdamWParams::default())?;
        let mut dropout = CaprlRng::new(opts.seed ^ 0x5eed);
        for _ in 0..opts.train_steps {
            let mut grads = std::thread::scope(|s| {
                s.spawn(|| -> Result<GradStore> {
                    let (logp, mask) =
                        side.model
                            .token_logprobs(&side.x, &side.seqs, Some(&mut dropout))?;
                    let n = mask.sum_all()?.to_dtype(DType::F64)?.to_scalar::<f64>()?;
                    Ok((logp.sum_all()?.neg()? / n.max(1.0))?.backward()?)
                })
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p))
            })?;
            std::thread::scope(|s| {
                s.spawn(|| -> Result<()> {
                    clip_grad_norm(&mut grads, &opt.vars(), 1.0)?;
                    Ok(opt.step(&grads, 1e-2)?)
                })
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p))
            })?;
        }
        Ok(side.model.to_safetensors()?)
    };
    let (a, b) = mode(sides.subject, || Ok((train()?, train()?)))?;
    let differing = a.iter().zip(&b).filter(|(x, y)| x != y).count() + a.len().abs_diff(b.len());
    Ok(Comparison {
        name: format!("{} repeated training", m.name),
        largest: differing as f64,
        allowed: 0.0,
        detail: if differing == 0 {
            format!(
                "{} steps twice, {} snapshot bytes identical",
                opts.train_steps,
                a.len()
            )
        } else {
            format!("{differing} of {} snapshot bytes differ", a.len())
        },
    })
}
