//! What an objective needs of the config, checked by the objective itself
//! ([`Objective::check`] through [`load_checked`], the loader of every CLI command): each
//! refusal names the key, the value and what is allowed.

use caprl_common::config::Baseline;
use caprl_learner::objective::{load_checked, Objective};

fn refused_with(sets: &[&str]) -> String {
    let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
    match load_checked(None, &sets) {
        Ok(_) => panic!("{sets:?} was accepted"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn sle_and_mean_baseline_need_two_samples() {
    let sle = load_checked(
        None,
        &["train.objective=sle".into(), "train.samples=1".into()],
    );
    let msg = sle.expect_err("sle with one sample").to_string();
    assert!(
        msg.contains("train.samples") && msg.contains("sle"),
        "{msg}"
    );
    let mean = load_checked(
        None,
        &["train.baseline=mean".into(), "train.samples=1".into()],
    );
    let msg = mean.expect_err("mean with one sample").to_string();
    assert!(
        msg.contains("train.samples") && msg.contains("mean"),
        "{msg}"
    );
    let greedy = load_checked(None, &["train.samples=1".into()]);
    assert!(greedy.is_ok());
}

#[test]
fn group_baselines_need_two_samples_and_wtf_keeps_its_own() {
    for baseline in ["rloo", "grpo", "dr-grpo"] {
        let msg = refused_with(&[&format!("train.baseline={baseline}"), "train.samples=1"]);
        assert!(
            msg.contains("train.samples") && msg.contains("grpo"),
            "{msg}"
        );
    }
    let msg = refused_with(&[
        "train.objective=wtf-rl",
        "train.baseline=dr-grpo",
        "reward.spec=\"clip=1\"",
        "clip.reward=\"enc.safetensors\"",
    ]);
    assert!(
        msg.contains("train.baseline")
            && msg.contains("\"dr-grpo\" with objective \"wtf-rl\"")
            && msg.contains("train.wtf_baseline"),
        "{msg}"
    );
    let cfg = load_checked(None, &["train.baseline=rloo".into()]).unwrap();
    assert_eq!(cfg.train.baseline, Baseline::Mean);
}

#[test]
fn ppo_dynamic_sampling_and_async_mode_are_refused_where_the_objective_cannot_use_them() {
    let cases: [(&[&str], &str, &str); 4] = [
        (
            &["train.ppo_epochs=2", "train.objective=mc-pg"],
            "train.ppo_epochs",
            "2 with objective \"mc-pg\"",
        ),
        (
            &["train.dynamic_sampling=true"],
            "train.dynamic_sampling",
            "true with objective \"scst\" and baseline \"greedy\"",
        ),
        (
            &["train.objective=actor-critic", "runtime.mode=async"],
            "runtime.mode",
            "\"async\" with objective \"actor-critic\"",
        ),
        (
            &["train.objective=wtf-rl"],
            "reward.spec",
            "clip=0.94,disc=0.06",
        ),
    ];
    for (sets, key, says) in cases {
        let msg = refused_with(sets);
        assert!(msg.contains(key) && msg.contains(says), "{sets:?}: {msg}");
    }
    for sets in [
        &["train.ppo_epochs=2", "train.objective=sle"][..],
        &["train.dynamic_sampling=true", "train.baseline=grpo"],
        &["train.objective=mc-pg", "runtime.mode=sync"],
    ] {
        let sets: Vec<String> = sets.iter().map(|s| s.to_string()).collect();
        let cfg = load_checked(None, &sets).unwrap_or_else(|e| panic!("{sets:?}: {e}"));
        assert!(Objective::from_config(&cfg).check(&cfg).is_ok());
    }
}

/// SLE's α, the entropy and KL terms and PPO's settings are the objectives' rules
/// ([`caprl_learner::objective::params`]): each refusal names the key, what it was and what is
/// allowed.
#[test]
fn the_objectives_settings_are_checked_with_the_objective() {
    let cases: [(&[&str], &str, &str); 10] = [
        (&["train.sle_alpha=2"], "train.sle_alpha", "[0, 1]"),
        (&["train.entropy_coef=-0.5"], "train.entropy_coef", ">= 0"),
        (&["train.kl_coef=inf"], "train.kl_coef", ">= 0"),
        (
            &["train.ppo_ratio=\"sequence\""],
            "sequence with ppo_epochs = 0",
            "GSPO",
        ),
        (
            &["train.ppo_proximal=\"learner\""],
            "learner with ppo_epochs = 0",
            "decoupled PPO",
        ),
        (&["train.ppo_epochs=65"], "train.ppo_epochs", "0..=64"),
        (
            &["train.ppo_minibatches=0"],
            "train.ppo_minibatches",
            "1..=1024",
        ),
        (&["train.clip_low=1"], "train.clip_low", "(0, 1)"),
        (&["train.clip_high=0"], "train.clip_high", "> 0"),
        (
            &["train.kl_in=reward"],
            "train.kl_estimator",
            "k1, k2 or k3 when kl_in = \"reward\"",
        ),
    ];
    for (sets, key, says) in cases {
        let msg = refused_with(sets);
        assert!(msg.contains(key) && msg.contains(says), "{sets:?}: {msg}");
    }
    let ok = load_checked(
        None,
        &[
            "train.ppo_epochs=4".into(),
            "train.ppo_minibatches=2".into(),
            "train.clip_high=0.28".into(),
            "train.kl_estimator=k3".into(),
            "train.kl_in=reward".into(),
            "runtime.stale_rollouts=reweight".into(),
        ],
    );
    assert!(ok.is_ok(), "{ok:?}");
}
