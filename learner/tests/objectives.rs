//! The RL objectives on a tiny model: the policy gradient is the paper's formula, a step moves
//! probability toward better-than-baseline samples, the value head of mc-pg / actor-critic
//! learns without touching the decoder, checkpoints carry it, and non-finite rewards skip.

use candle_core::Tensor;
use caprl_data::Dataset;
use caprl_learner::advantage::{self, Baseline};
use caprl_learner::critic::{self, Critic};
use caprl_learner::pg::LossNorm;
use caprl_learner::{checkpoint, pg, PgTargets, StepOptions, Trainer};
use caprl_model::model::{batch_tokens, inputs_for_rows, Captioner, Device, TeacherForced};
use caprl_model::optim::AdamWParams;

#[path = "support/objectives.rs"]
mod support;
use support::{loss_part, opts, samples, seq_logp, tiny_data, tiny_model, tiny_trainer};

/// The teacher-forced pass of `seqs` under `model`, with the tokens, their mask and the
/// taken tokens' log-probs gathered from the full log-softmax.
struct ForcedPass {
    tf: TeacherForced,
    toks: Tensor,
    mask: Tensor,
    logp: Tensor,
}

/// The [`ForcedPass`] of `seqs`, the captions of images `rows`, under `model`.
fn forced_pass(model: &Captioner, data: &Dataset, rows: &[usize], seqs: &[Vec<u32>]) -> ForcedPass {
    let x = inputs_for_rows(data, rows, model.config(), model.device()).unwrap();
    let toks = batch_tokens(seqs, model.device()).unwrap();
    let tf = model.teacher_forced(&x, &toks, None).unwrap();
    let mask = model.token_mask(&toks).unwrap();
    let logp = tf
        .logprobs_full
        .gather(&toks.unsqueeze(2).unwrap(), 2)
        .unwrap()
        .squeeze(2)
        .unwrap();
    ForcedPass {
        tf,
        toks,
        mask,
        logp,
    }
}

/// [`tiny_trainer`] with a fresh value head.
fn critic_trainer(data: &Dataset, seed: u64) -> Trainer {
    let mut trainer = tiny_trainer(data, seed);
    trainer.ensure_critic(AdamWParams::default()).unwrap();
    trainer
}

/// SCST on the output layer: `∂L/∂b_logit = −Σᵢ Aᵢ Σₜ mᵢₜ (onehot(wᵢₜ) − πᵢₜ) / Σ m`.
#[test]
fn scst_gradient_equals_the_hand_computed_formula() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tiny_data(tmp.path());
    let model = Captioner::new(&tiny_model(&data), &Device::Cpu, 1).unwrap();
    let (rows, seqs) = samples(&model, &data);
    let rewards = [0.9f32, 0.1, 0.4, 0.6];
    let mut a = advantage::advantages(Baseline::Greedy, &rewards[..2], Some(0.5));
    a.extend(advantage::advantages(
        Baseline::Greedy,
        &rewards[2..],
        Some(0.5),
    ));
    assert_eq!(a.len(), 4);

    let pass = forced_pass(&model, &data, &rows, &seqs);
    let loss = pg::loss(&pass.logp, &pass.mask, &a, LossNorm::Tokens).unwrap();
    let grads = loss.backward().unwrap();
    let bias = {
        let vars = model.varmap().data().lock().unwrap();
        vars.get("logit.bias").unwrap().as_tensor().clone()
    };
    let got = grads.get(&bias).unwrap().to_vec1::<f32>().unwrap();

    let probs = pass
        .tf
        .logprobs_full
        .exp()
        .unwrap()
        .to_vec3::<f32>()
        .unwrap();
    let m = pass.mask.to_vec2::<f32>().unwrap();
    let toks = pass.toks.to_vec2::<u32>().unwrap();
    let total: f32 = m.iter().flatten().sum();
    let v = got.len();
    let mut want = vec![0f32; v];
    for i in 0..toks.len() {
        for t in 0..toks[i].len() {
            if m[i][t] == 0.0 {
                continue;
            }
            for (w, slot) in want.iter_mut().enumerate() {
                let onehot = if toks[i][t] as usize == w { 1.0 } else { 0.0 };
                *slot -= a[i] * (onehot - probs[i][t][w]) / total;
            }
        }
    }
    for (w, (g, h)) in got.iter().zip(&want).enumerate() {
        assert!(
            (g - h).abs() < 1e-5,
            "word {w}: autograd {g} vs formula {h}"
        );
    }
    assert!(want.iter().any(|x| x.abs() > 1e-4), "a degenerate check");
}

#[test]
fn one_step_raises_a_better_sample_and_lowers_a_worse_one() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tiny_data(tmp.path());
    let mut trainer = tiny_trainer(&data, 2);
    let (rows, seqs) = samples(&trainer.model, &data);
    // Samples 0 and 1 of image 0: one above the greedy baseline, one below.
    let (rows, seqs) = (rows[..2].to_vec(), seqs[..2].to_vec());
    assert_ne!(seqs[0], seqs[1], "need two different samples");
    let a = advantage::advantages(Baseline::Greedy, &[1.0, 0.0], Some(0.5));
    let before = seq_logp(&trainer.model, &data, &rows, &seqs);
    let stats = trainer
        .pg_step(&data, &rows, &seqs, PgTargets::sequence(&a), opts(1e-2))
        .unwrap();
    assert!(!stats.skipped);
    let after = seq_logp(&trainer.model, &data, &rows, &seqs);
    assert!(
        after[0] > before[0],
        "better sample: {before:?} -> {after:?}"
    );
    assert!(
        after[1] < before[1],
        "worse sample: {before:?} -> {after:?}"
    );
}

#[test]
fn the_value_loss_sends_no_gradient_into_the_decoder() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tiny_data(tmp.path());
    let model = Captioner::new(&tiny_model(&data), &Device::Cpu, 3).unwrap();
    let critic = Critic::new(24, &Device::Cpu, AdamWParams::default(), 3).unwrap();
    let (rows, seqs) = samples(&model, &data);
    let pass = forced_pass(&model, &data, &rows, &seqs);
    let t = pass.toks.dim(1).unwrap();
    let y: Vec<Vec<f32>> = seqs.iter().map(|s| vec![0.7; s.len()]).collect();
    let y = critic::targets_tensor(&y, t, &Device::Cpu).unwrap();
    let v = critic.head.forward(&pass.tf.hidden).unwrap();
    let loss = critic::value_loss(&v, &y, &pass.mask).unwrap();
    let grads = loss.backward().unwrap();
    for (name, var) in model.varmap().data().lock().unwrap().iter() {
        assert!(
            grads.get(var.as_tensor()).is_none(),
            "decoder parameter {name} got a gradient from the value loss"
        );
    }
    let head_grads = critic
        .head
        .varmap()
        .all_vars()
        .iter()
        .filter(|v| grads.get(v.as_tensor()).is_some())
        .count();
    assert_eq!(head_grads, 4, "every value-head parameter is trained");

    // And the policy term sends none into the head: the advantage is detached.
    let adv = critic::advantages(&y, &v).unwrap();
    let grads = pg::token_loss(&pass.logp, &pass.mask, &adv)
        .unwrap()
        .backward()
        .unwrap();
    for var in critic.head.varmap().all_vars() {
        assert!(grads.get(var.as_tensor()).is_none());
    }
}

#[test]
fn the_value_head_fits_its_targets_and_rides_in_checkpoints() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tiny_data(tmp.path());
    let mut trainer = critic_trainer(&data, 4);
    let (rows, seqs) = samples(&trainer.model, &data);
    let targets: Vec<Vec<f32>> = seqs
        .iter()
        .enumerate()
        .map(|(i, s)| vec![0.25 * i as f32; s.len()])
        .collect();
    let mut value_losses = Vec::new();
    for _ in 0..60 {
        let stats = trainer
            .pg_step(&data, &rows, &seqs, PgTargets::Critic(&targets), opts(1e-6))
            .unwrap();
        value_losses.push(loss_part(&stats, "value"));
    }
    let (first, last) = (value_losses[0], *value_losses.last().unwrap());
    assert!(
        last < 0.2 * first,
        "value loss should fall: {first} -> {last}"
    );

    let root = tmp.path().join("ck");
    trainer.save(&root, 2, &[]).unwrap();
    let ck = checkpoint::latest_valid(&root).unwrap().unwrap();
    let (cfg, adam) = (tiny_model(&data), AdamWParams::default());
    let restored = Trainer::restore(&ck, &cfg, &Device::Cpu, adam, 4).unwrap();
    let h = Tensor::ones((3, 24), candle_core::DType::F32, &Device::Cpu).unwrap();
    let v1 = trainer.critic.as_ref().unwrap().head.forward(&h).unwrap();
    let v2 = restored.critic.as_ref().unwrap().head.forward(&h).unwrap();
    assert_eq!(v1.to_vec1::<f32>().unwrap(), v2.to_vec1::<f32>().unwrap());
}

#[test]
fn non_finite_rewards_skip_the_batch_and_are_counted() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tiny_data(tmp.path());
    let mut trainer = critic_trainer(&data, 5);
    let (rows, seqs) = samples(&trainer.model, &data);
    let before = trainer.model.to_safetensors().unwrap();

    let a = [0.5, f32::NAN, 0.1, -0.2];
    let s = trainer
        .pg_step(&data, &rows, &seqs, PgTargets::sequence(&a), opts(1e-2))
        .unwrap();
    assert!(s.skipped);
    let mut q: Vec<Vec<f32>> = seqs.iter().map(|s| vec![0.3; s.len()]).collect();
    q[2][0] = f32::INFINITY;
    let s = trainer
        .pg_step(&data, &rows, &seqs, PgTargets::Critic(&q), opts(1e-2))
        .unwrap();
    assert!(s.skipped);
    assert_eq!(trainer.state.skipped_batches, 2);
    assert_eq!(trainer.state.step, 0);
    assert_eq!(trainer.model.to_safetensors().unwrap(), before);
}

#[test]
fn the_kl_penalty_is_zero_at_the_reference_and_pulls_back_toward_it() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tiny_data(tmp.path());
    let cfg = tiny_model(&data);
    let mut trainer = tiny_trainer(&data, 6);
    let bytes = trainer.model.to_safetensors().unwrap();
    let reference = || Captioner::from_safetensors(&bytes, &cfg, &Device::Cpu).unwrap();
    trainer.set_reference(reference());
    let (rows, seqs) = samples(&trainer.model, &data);
    let zero = [0.0f32; 4];
    // One step with no advantage, so that only the KL term moves the policy; its KL.
    let measure = |t: &mut Trainer| {
        let kl_opts = StepOptions {
            kl_coef: 1.0,
            ..opts(5e-2)
        };
        let s = t
            .pg_step(&data, &rows, &seqs, PgTargets::sequence(&zero), kl_opts)
            .unwrap();
        loss_part(&s, "kl")
    };
    let kl0 = measure(&mut trainer);
    assert!(kl0.abs() < 1e-6, "KL to itself is {kl0}");
    // Push the policy away with a large advantage, then let the KL alone pull it back.
    let push = [5.0f32, 5.0, 5.0, 5.0];
    for _ in 0..5 {
        trainer
            .pg_step(&data, &rows, &seqs, PgTargets::sequence(&push), opts(5e-2))
            .unwrap();
    }
    // A fresh optimizer, so that no momentum of the push is left.
    let pushed = trainer.model.to_safetensors().unwrap();
    let mut trainer = Trainer::new(
        Captioner::from_safetensors(&pushed, &cfg, &Device::Cpu).unwrap(),
        AdamWParams::default(),
        6,
    )
    .unwrap();
    trainer.set_reference(reference());
    let away = measure(&mut trainer);
    assert!(away > 1e-4, "the push should move the policy: KL {away}");
    let mut last = away;
    for _ in 0..10 {
        last = measure(&mut trainer);
    }
    assert!(
        last < away,
        "KL should shrink under its own penalty: {away} -> {last}"
    );
}

/// The entropy term equals `−Σ π log π` averaged over unmasked steps.
#[test]
fn entropy_matches_its_definition() {
    let lp = Tensor::from_slice(
        &[0.5f32.ln(), 0.5f32.ln(), 0.9f32.ln(), 0.1f32.ln()],
        (1, 2, 2),
        &Device::Cpu,
    )
    .unwrap();
    let mask = Tensor::from_slice(&[1.0f32, 1.0], (1, 2), &Device::Cpu).unwrap();
    let h = pg::entropy(&lp, &mask).unwrap().to_scalar::<f32>().unwrap();
    let want = (std::f32::consts::LN_2 + -(0.9 * 0.9f32.ln() + 0.1 * 0.1f32.ln())) / 2.0;
    assert!((h - want).abs() < 1e-6, "{h} vs {want}");
}
