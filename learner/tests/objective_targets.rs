//! Scored rollouts become each objective's policy-gradient targets, worked by hand; and a new
//! objective plugs in with nothing but its own rule.

use caprl_common::config::{RunConfig, DIVERSITY};
use caprl_learner::objective::{Decodes, Objective, Rule};
use caprl_learner::pg::LossNorm;
use caprl_learner::targets::{per_image_samples, PgBatch};
use caprl_learner::LearnerError;
use caprl_wire::{
    DecodeKind, PolicyVersion, RewardVector, Rollout, ScoredRollout, Sequence, TaskId,
};

fn seq(row: u32, kind: DecodeKind, tokens: &[u32]) -> Sequence {
    Sequence {
        image_row: row,
        kind,
        tokens: tokens.to_vec(),
        logprobs: vec![-0.5; tokens.len()],
    }
}

fn reward(total: f32, diversity: Option<f32>) -> RewardVector {
    let mut components = vec![("cider".to_string(), total)];
    if let Some(e) = diversity {
        components.push((DIVERSITY.to_string(), e));
    }
    RewardVector { total, components }
}

/// Image 7: a greedy caption (reward 0.5) and two samples (1.0, 0.2), from policy `version`.
fn one_image(version: u64, diversity: bool) -> ScoredRollout {
    let e = |x| diversity.then_some(x);
    ScoredRollout {
        rollout: Rollout {
            task_id: TaskId(1),
            data: Default::default(),
            policy_version: PolicyVersion(version),
            actor_id: "a".into(),
            sequences: vec![
                seq(7, DecodeKind::Greedy, &[1, 2]),
                seq(7, DecodeKind::Sample, &[3, 4, 5]),
                seq(7, DecodeKind::Sample, &[6]),
                seq(7, DecodeKind::GroundTruth, &[8, 9]),
            ],
            decode_seconds: 0.0,
        },
        rewards: vec![
            reward(0.5, None),
            reward(1.0, e(0.3)),
            reward(0.2, e(-0.3)),
            reward(0.9, None),
        ],
    }
}

fn objective(toml: &str) -> Objective {
    Objective::from_config(&RunConfig::from_toml_str(toml, "test").unwrap())
}

#[test]
fn scst_weights_samples_by_reward_minus_the_greedy_reward() {
    let o = objective("[train]\nobjective = \"scst\"\n");
    let pg = o.targets(&[one_image(3, false)], 5).unwrap();
    assert_eq!(pg.seqs, vec![vec![3, 4, 5], vec![6]]);
    assert_eq!(pg.multipliers, vec![1.0 - 0.5, 0.2 - 0.5]);
    assert_eq!(pg.lags, vec![2, 2]);
    assert_eq!(pg.behaviour, vec![vec![-0.5; 3], vec![-0.5]]);
    assert_eq!(pg.norm, LossNorm::Tokens);
    assert!((pg.mean_reward - 0.6).abs() < 1e-6);
    assert!((pg.components["cider"] - 0.6).abs() < 1e-6);
}

/// Rewards 1.0 and 0.2: leave-one-out 1.0 − 0.2 and 0.2 − 1.0; GRPO (mean 0.6, sample std
/// 0.4·√2) and Dr. GRPO (±0.4, no scaling), each with its loss normalisation.
#[test]
fn group_estimators_compare_the_samples_of_one_image() {
    let one = |baseline: &str| {
        let o = objective(&format!(
            "[train]\nobjective = \"scst\"\nbaseline = \"{baseline}\"\n"
        ));
        o.targets(&[one_image(3, false)], 5).unwrap()
    };
    let close = |got: &[f32], want: &[f32]| {
        got.len() == want.len() && got.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-5)
    };
    for name in ["mean", "rloo"] {
        let pg = one(name);
        assert!(
            close(&pg.multipliers, &[0.8, -0.8]),
            "{name}: {:?}",
            pg.multipliers
        );
        assert_eq!(pg.norm, LossNorm::Tokens);
    }
    let grpo = one("grpo");
    let z = 0.4 / (0.4 * 2f32.sqrt() + 1e-4);
    assert!(close(&grpo.multipliers, &[z, -z]), "{:?}", grpo.multipliers);
    assert_eq!(grpo.norm, LossNorm::Sequences);
    let dr = one("dr-grpo");
    assert!(close(&dr.multipliers, &[0.4, -0.4]), "{:?}", dr.multipliers);
    // data.max_len (16) words + EOS.
    assert_eq!(dr.norm, LossNorm::Constant(17));
}

#[test]
fn sle_mixes_quality_and_the_diversity_component() {
    let o = objective("[train]\nobjective = \"sle\"\nsle_alpha = 0.75\n");
    let pg = o.targets(&[one_image(5, true)], 5).unwrap();
    let want = [0.75 * 0.5 + 0.25 * 0.3, 0.75 * -0.3 + 0.25 * -0.3];
    for (m, w) in pg.multipliers.iter().zip(want) {
        assert!((m - w).abs() < 1e-6, "{:?}", pg.multipliers);
    }
    assert!(o.wants_exploration());
}

#[test]
fn sle_quality_term_takes_the_configured_estimator() {
    let o = objective("[train]\nobjective = \"sle\"\nsle_alpha = 0.75\nbaseline = \"mean\"\n");
    let pg = o.targets(&[one_image(5, true)], 5).unwrap();
    let want = [0.75 * 0.8 + 0.25 * 0.3, 0.75 * -0.8 + 0.25 * -0.3];
    for (m, w) in pg.multipliers.iter().zip(want) {
        assert!((m - w).abs() < 1e-6, "{:?}", pg.multipliers);
    }
}

#[test]
fn sle_without_a_greedy_caption_says_what_is_missing() {
    let mut scored = one_image(5, true);
    scored.rollout.sequences[0].kind = DecodeKind::Beam;
    let o = objective("[train]\nobjective = \"sle\"\n");
    let err = o.targets(&[scored], 5).unwrap_err().to_string();
    assert!(err.contains("greedy caption"), "{err}");
}

#[test]
fn actor_critic_targets_are_the_return_at_every_token() {
    let o = objective("[train]\nobjective = \"actor-critic\"\n");
    let pg = o.targets(&[one_image(5, false)], 5).unwrap();
    assert!(o.uses_value_head());
    assert_eq!(pg.values, vec![vec![1.0; 3], vec![0.2]]);
}

#[test]
fn wtf_rl_trains_on_ground_truth_without_importance_lag() {
    let o = objective(
        "[train]\nobjective = \"wtf-rl\"\nwtf_baseline = \"none\"\n\
         [reward]\nspec = \"clip=1\"\n[clip]\nreward = \"enc.safetensors\"\n",
    );
    let pg = o.targets(&[one_image(3, false)], 5).unwrap();
    assert_eq!(pg.seqs, vec![vec![8, 9]]);
    assert_eq!(pg.multipliers, vec![0.9]);
    assert_eq!(pg.lags, vec![0]);
}

/// A test-only objective: REINFORCE with the batch's best sample as the only trained one.
/// Nothing outside this rule knows about it.
struct BestOnly;

impl Rule for BestOnly {
    fn name(&self) -> &'static str {
        "best-only"
    }

    fn decodes(&self, cfg: &RunConfig) -> Decodes {
        Decodes {
            samples: cfg.train.samples,
            beam: 2,
            ..Decodes::default()
        }
    }

    fn targets(&self, scored: &[ScoredRollout], version: u64) -> Result<PgBatch, LearnerError> {
        per_image_samples(
            scored,
            version,
            |g| {
                let best = g.rewards.iter().copied().fold(f32::MIN, f32::max);
                Ok(g.rewards
                    .iter()
                    .map(|&r| (r == best) as u8 as f32)
                    .collect())
            },
            None,
        )
    }
}

#[test]
fn a_new_objective_needs_only_its_rule() {
    let o = Objective::new(Box::new(BestOnly));
    let cfg = RunConfig::from_toml_str("[reward]\nspec = \"cider=1\"\n", "test").unwrap();
    let d = o.decodes(&cfg);
    assert_eq!(
        (d.samples, d.beam, d.greedy, d.ground_truth),
        (5, 2, false, false)
    );
    assert!(o.has_rl_phase() && !o.uses_value_head());
    let mut in_async = cfg.clone();
    in_async.runtime.mode = caprl_common::config::Mode::Async;
    assert!(o.check(&in_async).is_ok());
    // It takes no PPO passes (the default `supports_ppo`), and says so by its name.
    in_async.train.ppo_epochs = 2;
    let err = o.check(&in_async).unwrap_err().to_string();
    assert!(err.contains("with objective \"best-only\""), "{err}");
    let pg = o.targets(&[one_image(5, false)], 5).unwrap();
    assert_eq!(pg.multipliers, vec![1.0, 0.0]);
    assert_eq!(o.name(), "best-only");
}
