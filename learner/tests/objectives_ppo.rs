//! PPO-style updates and async mode's corrections on a tiny model: one PPO pass at the
//! behaviour policy is the plain step, GSPO's per-caption ratio, decoupled PPO, truncated and
//! masked importance weights, and the KL estimators.

use caprl_common::config::{IsLevel, KlEstimator, OffPolicyCorrection, PpoRatio};
use caprl_data::Dataset;
use caprl_learner::off_policy::Correction;
use caprl_learner::pg::{ClipRange, LossNorm, RatioStats};
use caprl_learner::trainer::{PpoBatch, PpoOptions};
use caprl_learner::{PgTargets, StepOptions, Trainer};
use caprl_model::model::{batch_tokens, inputs_for_rows, Captioner, Device};
use caprl_model::optim::AdamWParams;

#[path = "support/objectives.rs"]
mod support;
use support::{loss_part, opts, samples, tiny_data, tiny_model, tiny_trainer, tiny_trainer_with};

/// The advantages of the four sampled captions in the tests that compare steps.
const ADVANTAGES: [f32; 4] = [0.4, -0.4, 1.0, -1.0];

/// Per-token `log π` of `seqs` under `model`, each cut to its sequence's length: what an actor
/// sends as the behaviour log-probs of its samples.
fn token_logp(
    model: &Captioner,
    data: &Dataset,
    rows: &[usize],
    seqs: &[Vec<u32>],
) -> Vec<Vec<f32>> {
    let x = inputs_for_rows(data, rows, model.config(), model.device()).unwrap();
    let toks = batch_tokens(seqs, model.device()).unwrap();
    let (logp, _) = model.token_logprobs(&x, &toks, None).unwrap();
    let logp: Vec<Vec<f32>> = logp.to_vec2().unwrap();
    logp.into_iter()
        .zip(seqs)
        .map(|(row, s)| row[..s.len()].to_vec())
        .collect()
}

/// [`samples`] with the per-token log-probs of the policy that sampled them.
fn sampled_batch(model: &Captioner, data: &Dataset) -> (Vec<usize>, Vec<Vec<u32>>, Vec<Vec<f32>>) {
    let (rows, seqs) = samples(model, data);
    let mu = token_logp(model, data, &rows, &seqs);
    (rows, seqs, mu)
}

/// A PPO batch of the four captions the policy `behaviour` sampled, none of them stale.
fn fresh_batch<'a>(
    rows: &'a [usize],
    seqs: &'a [Vec<u32>],
    advantages: &'a [f32],
    behaviour: &'a [Vec<f32>],
    norm: LossNorm,
) -> PpoBatch<'a> {
    PpoBatch {
        rows,
        seqs,
        advantages,
        behaviour,
        stale: &[false; 4],
        norm,
    }
}

fn ppo(epochs: u32, minibatches: u32) -> PpoOptions {
    PpoOptions {
        epochs,
        minibatches,
        clip: ClipRange {
            low: 0.2,
            high: 0.28,
        },
        ratio: PpoRatio::Token,
        proximal: None,
    }
}

/// Every weight of `model` in one flat list, in the var map's name order.
fn flat_weights(model: &Captioner) -> Vec<f32> {
    let vars = model.varmap().data().lock().unwrap();
    let mut names: Vec<&String> = vars.keys().collect();
    names.sort();
    names
        .iter()
        .flat_map(|n| {
            vars[*n]
                .as_tensor()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap()
        })
        .collect()
}

/// One PPO pass in one minibatch, at the policy that sampled the batch, is the plain
/// policy-gradient step: the same weights afterwards up to rounding (the ratio is 1 exactly).
#[test]
fn one_ppo_pass_at_the_behaviour_policy_is_the_plain_step() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tiny_data(tmp.path());
    let new = || tiny_trainer(&data, 2);
    let (mut plain, mut clipped) = (new(), new());
    let (rows, seqs, mu) = sampled_batch(&plain.model, &data);
    let a = ADVANTAGES;
    plain
        .pg_step(&data, &rows, &seqs, PgTargets::sequence(&a), opts(1e-2))
        .unwrap();
    let batch = fresh_batch(&rows, &seqs, &a, &mu, LossNorm::Tokens);
    let stats = clipped
        .ppo_update(&data, batch, ppo(1, 1), opts(1e-2))
        .unwrap();
    let before = flat_weights(&new().model);
    let (p, c) = (flat_weights(&plain.model), flat_weights(&clipped.model));
    let (moved, apart) = (max_apart(&p, &before), max_apart(&p, &c));
    assert!(
        moved > 1e-3,
        "the plain step did not move the weights ({moved})"
    );
    let r = stats.ratios.expect("ratio statistics");
    assert_eq!((r.min, r.max, r.clip_fraction), (1.0, 1.0, 0.0));
    // Adam's first step is about ±lr for every weight whatever the gradient's size, so a
    // rounding difference in a near-zero gradient shows at up to 1e-3 of the step.
    assert!(
        apart < 1e-5,
        "PPO's step differs from the plain one by {apart}"
    );
    assert_eq!(clipped.state.step, plain.state.step);
}

/// [`tiny_trainer`] whose first Adam step is proportional to the gradient wherever the
/// gradient is small (`eps` 1e-4, not 1e-8), so that comparing two steps' weights compares
/// their gradients: with the default, a near-zero gradient whose sign differs by rounding
/// moves its weight by ±lr either way.
fn comparing_trainer(data: &Dataset, seed: u64) -> Trainer {
    let adam = AdamWParams {
        eps: 1e-4,
        ..AdamWParams::default()
    };
    tiny_trainer_with(data, seed, adam)
}

/// The largest difference between two weight lists.
fn max_apart(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// The largest difference between the weights of two trainers' models.
fn weights_apart(a: &Trainer, b: &Trainer) -> f32 {
    max_apart(&flat_weights(&a.model), &flat_weights(&b.model))
}

/// Every ratio of a pass at the policy that sampled the batch is 1, up to rounding.
fn assert_ratios_are_one(r: &RatioStats) {
    assert!(
        (r.min - 1.0).abs() < 1e-6 && (r.max - 1.0).abs() < 1e-6,
        "{r:?}"
    );
}

/// `kind` at `level` with the config's defaults: `is_clip` 1, kept ratios `[0.5, 2]`.
fn correction(kind: OffPolicyCorrection, level: IsLevel) -> Correction {
    Correction::from_config(&caprl_common::config::RuntimeConfig {
        off_policy_correction: kind,
        is_level: level,
        ..Default::default()
    })
}

/// `μ` of an older policy for the first two sequences: `log μ = log π + 3` on every token, so
/// their caption ratio is `e^(−3|y|)`, far below any range.
fn older_behaviour(mu: &[Vec<f32>]) -> Vec<Vec<f32>> {
    mu.iter()
        .enumerate()
        .map(|(i, row)| {
            row.iter()
                .map(|x| if i < 2 { x + 3.0 } else { *x })
                .collect()
        })
        .collect()
}

/// Off-policy weights leave fresh captions alone (bit for bit the plain step), and masked IS
/// takes a caption whose ratio is out of range out of the update: the step equals the plain
/// step with that caption's multiplier 0; truncated IS scales it by its tiny ratio instead.
#[test]
fn off_policy_weights_leave_fresh_captions_alone_and_mask_or_truncate_stale_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tiny_data(tmp.path());
    let new = || comparing_trainer(&data, 5);
    let probe = new();
    let (rows, seqs, mu) = sampled_batch(&probe.model, &data);
    let a = ADVANTAGES;
    let plain = |a: &[f32]| {
        let mut t = new();
        t.pg_step(&data, &rows, &seqs, PgTargets::sequence(a), opts(1e-2))
            .unwrap();
        flat_weights(&t.model)
    };
    let weighted = |kind, behaviour: &[Vec<f32>], stale: &[bool]| {
        let mut t = new();
        let targets = PgTargets::OffPolicy {
            multipliers: &a,
            norm: LossNorm::Tokens,
            behaviour,
            stale,
            correction: correction(kind, IsLevel::Sequence),
        };
        let stats = t.pg_step(&data, &rows, &seqs, targets, opts(1e-2)).unwrap();
        (
            flat_weights(&t.model),
            stats.off_policy.expect("weight stats"),
        )
    };
    let (fresh, stats) = weighted(
        OffPolicyCorrection::MaskedIs,
        &older_behaviour(&mu),
        &[false; 4],
    );
    assert_eq!(fresh, plain(&a), "fresh captions were reweighted");
    assert_eq!(stats.stale_sequences, 0);

    let older = older_behaviour(&mu);
    let stale = [true, false, false, false];
    let (masked, stats) = weighted(OffPolicyCorrection::MaskedIs, &older, &stale);
    assert!(max_apart(&masked, &plain(&[0.0, -0.4, 1.0, -1.0])) < 1e-6);
    assert!(
        max_apart(&masked, &plain(&a)) > 1e-4,
        "the stale caption still moved the weights"
    );
    assert_eq!(
        (stats.stale_sequences, stats.cut_fraction, stats.mean),
        (1, 1.0, 0.0)
    );
    let (truncated, stats) = weighted(OffPolicyCorrection::TruncatedIs, &older, &stale);
    let rho = stats.mean as f32;
    assert!(rho > 0.0 && rho < 1e-3, "ρ = {rho}");
    assert!(max_apart(&truncated, &plain(&[0.4 * rho, -0.4, 1.0, -1.0])) < 1e-6);
}

/// Decoupled PPO, one pass in one minibatch: the clipped ratio is to the learner's own
/// weights (1 exactly), and the captions an older policy sampled are weighted by the
/// correction of `π_old/μ`, so the step is the plain step with off-policy weights.
#[test]
fn decoupled_ppo_takes_the_ratio_to_the_learner_and_weighs_the_lag() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tiny_data(tmp.path());
    let new = || comparing_trainer(&data, 6);
    let probe = new();
    let (rows, seqs, mu) = sampled_batch(&probe.model, &data);
    let older = older_behaviour(&mu);
    let a = ADVANTAGES;
    let stale = [true, true, false, false];
    let c = correction(OffPolicyCorrection::TruncatedIs, IsLevel::Token);
    let mut weighted = new();
    let targets = PgTargets::OffPolicy {
        multipliers: &a,
        norm: LossNorm::Tokens,
        behaviour: &older,
        stale: &stale,
        correction: c,
    };
    let want = weighted
        .pg_step(&data, &rows, &seqs, targets, opts(1e-2))
        .unwrap();
    let mut decoupled = new();
    let options = PpoOptions {
        proximal: Some(c),
        ..ppo(1, 1)
    };
    let batch = PpoBatch {
        rows: &rows,
        seqs: &seqs,
        advantages: &a,
        behaviour: &older,
        stale: &stale,
        norm: LossNorm::Tokens,
    };
    let got = decoupled
        .ppo_update(&data, batch, options, opts(1e-2))
        .unwrap();
    assert_ratios_are_one(&got.ratios.expect("ratio statistics"));
    let (w, g) = (want.off_policy.unwrap(), got.off_policy.unwrap());
    assert!(
        (w.mean - g.mean).abs() < 1e-6 && w.stale_sequences == 2,
        "{w:?} vs {g:?}"
    );
    assert!(weights_apart(&weighted, &decoupled) < 1e-5);
    // Coupled PPO takes the ratio to μ instead: the stale tokens' ratio e^−3 is below 1 − ε,
    // and caption 1's (negative advantage) are clipped.
    let mut coupled = new();
    let got = coupled
        .ppo_update(&data, batch, ppo(1, 1), opts(1e-2))
        .unwrap();
    let r = got.ratios.unwrap();
    assert!(r.clip_fraction > 0.0 && r.min < 0.06, "{r:?}");
    assert!(weights_apart(&coupled, &decoupled) > 1e-4);
}

/// GSPO, one pass in one minibatch at the behaviour policy: every caption's ratio is 1 and
/// each token weighs `1/|y|` of its caption, so the step is the plain step normalised per
/// sequence.
#[test]
fn one_gspo_pass_at_the_behaviour_policy_is_the_per_sequence_plain_step() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tiny_data(tmp.path());
    let new = || comparing_trainer(&data, 7);
    let (mut plain, mut gspo) = (new(), new());
    let (rows, seqs, mu) = sampled_batch(&plain.model, &data);
    let a = ADVANTAGES;
    let targets = PgTargets::Sequence {
        multipliers: &a,
        norm: LossNorm::Sequences,
    };
    plain
        .pg_step(&data, &rows, &seqs, targets, opts(1e-2))
        .unwrap();
    let options = PpoOptions {
        ratio: PpoRatio::Sequence,
        ..ppo(1, 1)
    };
    let batch = fresh_batch(&rows, &seqs, &a, &mu, LossNorm::Tokens);
    let stats = gspo.ppo_update(&data, batch, options, opts(1e-2)).unwrap();
    assert_ratios_are_one(&stats.ratios.unwrap());
    assert!(weights_apart(&plain, &gspo) < 1e-5);
}

/// K passes over M minibatches are one step and one policy version; the ratios move away from
/// 1 after the first update; the order of the minibatches repeats from the seed.
#[test]
fn ppo_passes_are_one_step_and_repeat_from_the_seed() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tiny_data(tmp.path());
    let run = || {
        let mut t = tiny_trainer(&data, 4);
        let (rows, seqs, mu) = sampled_batch(&t.model, &data);
        let a = [1.0f32, -1.0, 0.5, -0.5];
        let batch = fresh_batch(&rows, &seqs, &a, &mu, LossNorm::Sequences);
        let stats = t.ppo_update(&data, batch, ppo(4, 2), opts(5e-2)).unwrap();
        (t, stats)
    };
    let (a, stats) = run();
    assert_eq!((a.state.step, a.state.policy_version), (1, 1));
    assert!(!stats.skipped);
    let r = stats.ratios.unwrap();
    assert!(r.min < 1.0 && r.max > 1.0, "the policy never moved: {r:?}");
    assert!(
        (0.0..=1.0).contains(&r.clip_fraction) && r.approx_kl >= 0.0,
        "{r:?}"
    );
    let (b, _) = run();
    assert_eq!(
        a.model.to_safetensors().unwrap(),
        b.model.to_safetensors().unwrap()
    );
}

/// Each sampled-token estimator is 0 at the reference; k2 and k3 as loss terms pull a pushed
/// policy back toward it (their gradient at a token is `log π − log π_ref` and `1 − π_ref/π`).
#[test]
fn kl_estimators_are_zero_at_the_reference_and_k2_k3_pull_back() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tiny_data(tmp.path());
    let cfg = tiny_model(&data);
    let model = Captioner::new(&cfg, &Device::Cpu, 6).unwrap();
    let bytes = model.to_safetensors().unwrap();
    let reference = || Captioner::from_safetensors(&bytes, &cfg, &Device::Cpu).unwrap();
    let (rows, seqs) = samples(&model, &data);
    let zero = [0.0f32; 4];
    let with = |k| StepOptions {
        kl_coef: 1.0,
        kl_estimator: k,
        ..opts(2e-2)
    };
    for k in [KlEstimator::K1, KlEstimator::K2, KlEstimator::K3] {
        let mut t = Trainer::new(reference(), AdamWParams::default(), 6).unwrap();
        t.set_reference(reference());
        let at_reference = t
            .pg_step(&data, &rows, &seqs, PgTargets::sequence(&zero), with(k))
            .unwrap();
        assert!(
            loss_part(&at_reference, "kl").abs() < 1e-6,
            "{k:?} at the reference"
        );
        if k == KlEstimator::K1 {
            continue;
        }
        let push = [5.0f32; 4];
        for _ in 0..5 {
            t.pg_step(&data, &rows, &seqs, PgTargets::sequence(&push), opts(5e-2))
                .unwrap();
        }
        let mut t = Trainer::new(
            Captioner::from_safetensors(&t.model.to_safetensors().unwrap(), &cfg, &Device::Cpu)
                .unwrap(),
            AdamWParams::default(),
            6,
        )
        .unwrap();
        t.set_reference(reference());
        let mut step = || {
            let s = t
                .pg_step(&data, &rows, &seqs, PgTargets::sequence(&zero), with(k))
                .unwrap();
            loss_part(&s, "kl")
        };
        let away = step();
        assert!(
            away > 1e-4,
            "{k:?}: the push should move the policy ({away})"
        );
        let last = (0..10).map(|_| step()).last().unwrap();
        assert!(
            last < away,
            "{k:?} should shrink under its own penalty: {away} -> {last}"
        );
    }
}
