//! The objectives' own settings in `[train]` — SLE's α, the Monte-Carlo rollouts, the entropy
//! and KL terms, PPO's passes, ratio and clip range — with their ranges and cross-key rules,
//! checked with every objective's config ([`super::CheckedConfig`]) before the objective's own
//! rules. The rest of the config is checked where it is loaded
//! ([`caprl_common::config::RunConfig::load`]).

use caprl_common::config::{KlEstimator, KlIn, PpoProximal, PpoRatio, RunConfig};
use caprl_wire::check::{fails, outside, Check};

#[rustfmt::skip]
pub const CHECKS: &[Check<RunConfig>] = &[
    Check { key: "train.sle_alpha", allowed: "[0, 1]", violation: |c| fails(c.train.sle_alpha, |x| (0.0..=1.0).contains(&x)) },
    Check { key: "train.mc_rollouts", allowed: ">= 1", violation: |c| outside(c.train.mc_rollouts, 1..) },
    Check { key: "train.entropy_coef", allowed: "a finite number >= 0", violation: |c| fails(c.train.entropy_coef, |x| x >= 0.0 && x.is_finite()) },
    Check { key: "train.kl_coef", allowed: "a finite number >= 0", violation: |c| fails(c.train.kl_coef, |x| x >= 0.0 && x.is_finite()) },
    Check {
        key: "train.kl_estimator",
        allowed: "k1, k2 or k3 when kl_in = \"reward\" (the exact KL needs the whole distribution, which a sampled caption does not carry)",
        violation: |c| (c.train.kl_in == KlIn::Reward && c.train.kl_estimator == KlEstimator::Full).then(|| "full with kl_in = reward".to_string()),
    },
    Check { key: "train.ppo_epochs", allowed: "0..=64", violation: |c| outside(c.train.ppo_epochs, 0..=64) },
    Check {
        key: "train.ppo_ratio",
        allowed: "token unless ppo_epochs >= 1 (GSPO's ratio belongs to a PPO update)",
        violation: |c| (c.train.ppo_ratio == PpoRatio::Sequence && c.train.ppo_epochs == 0).then(|| "sequence with ppo_epochs = 0".to_string()),
    },
    Check {
        key: "train.ppo_proximal",
        allowed: "behaviour unless ppo_epochs >= 1 (decoupled PPO is a PPO update)",
        violation: |c| (c.train.ppo_proximal == PpoProximal::Learner && c.train.ppo_epochs == 0).then(|| "learner with ppo_epochs = 0".to_string()),
    },
    Check { key: "train.ppo_minibatches", allowed: "1..=1024", violation: |c| outside(c.train.ppo_minibatches, 1..=1024) },
    Check { key: "train.clip_low", allowed: "(0, 1)", violation: |c| fails(c.train.clip_low, |x| x > 0.0 && x < 1.0) },
    Check { key: "train.clip_high", allowed: "a finite number > 0", violation: |c| fails(c.train.clip_high, |x| x > 0.0 && x.is_finite()) },
];
