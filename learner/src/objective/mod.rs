//! The home of every per-objective decision: which decodes a rollout task asks for, whether
//! the objective trains a value head, whether async mode is allowed, whether reward workers
//! compute SLE's exploration term, and how scored rollouts become policy-gradient targets.
//!
//! Each objective implements [`Rule`] in the file that holds its formula ([`scst`],
//! [`sle`], ...); [`Objective::from_config`] has one arm per `train.objective`. A new
//! objective is its own file plus one arm there:
//!
//! ```
//! use caprl_common::config::RunConfig;
//! use caprl_wire::{DecodeKind, ScoredRollout};
//! use caprl_learner::objective::{Decodes, Objective, Rule};
//! use caprl_learner::targets::{per_image_samples, PgBatch};
//! use caprl_learner::LearnerError;
//!
//! /// REINFORCE without a baseline: `∇L = −r(wˢ)·∇log p(wˢ)`.
//! struct Reinforce;
//!
//! impl Rule for Reinforce {
//!     fn name(&self) -> &'static str {
//!         "reinforce"
//!     }
//!     fn decodes(&self, cfg: &RunConfig) -> Decodes {
//!         Decodes { samples: cfg.train.samples, ..Decodes::default() }
//!     }
//!     fn targets(&self, scored: &[ScoredRollout], version: u64) -> Result<PgBatch, LearnerError> {
//!         per_image_samples(scored, version, |g| Ok(g.rewards.clone()), None)
//!     }
//! }
//!
//! // In `Objective::from_config`: `config::ObjectiveName::Reinforce => Box::new(Reinforce),`
//! let objective = Objective::new(Box::new(Reinforce));
//! let decodes = objective.decodes(&RunConfig::default());
//! assert_eq!((decodes.samples, decodes.greedy, decodes.beam), (5, false, 0));
//! assert!(objective.has_rl_phase() && !objective.uses_value_head());
//! ```

use std::path::Path;

use caprl_common::config::{self, spelled, ConfigError, Mode, RunConfig};
use caprl_reward_worker::{rewards, ClipReward};
use caprl_wire::check::{allowed_by, first_violation, first_violation_of, ruled, Rules};
use caprl_wire::ScoredRollout;

use crate::driver::DriverOptions;
use crate::off_policy;
use crate::run::setup;
use crate::targets::PgBatch;
use crate::LearnerError;

pub mod actor_critic;
pub mod mc_pg;
pub mod params;
pub mod scst;
pub mod sle;
pub mod wtf;
pub mod xe;

/// What actors decode for every image of a rollout task.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Decodes {
    /// Multinomial samples per image.
    pub samples: u32,
    /// A greedy caption per image (a baseline, or a rival in the contrastive text pool).
    pub greedy: bool,
    /// Beam width of one beam caption per image; 0 = none.
    pub beam: u32,
    /// Monte-Carlo completions per prefix of each sample; 0 = none.
    pub mc_rollouts: u32,
    /// One ground-truth caption per image rides along.
    pub ground_truth: bool,
}

/// One objective's decisions. Only `name`, `decodes` and `targets` are required; the rest
/// default to a plain sequence-level policy gradient.
pub trait Rule: Send + Sync {
    /// The name as written in `train.objective`.
    fn name(&self) -> &'static str;

    /// The decodes this objective learns from (ground truth is added for encoder rewards).
    fn decodes(&self, cfg: &RunConfig) -> Decodes;

    /// The step's sequences and their multipliers (or value targets) from the scored rollouts
    /// of policy `version`, in task-id order.
    fn targets(&self, scored: &[ScoredRollout], version: u64) -> Result<PgBatch, LearnerError>;

    /// Whether there is an RL phase after XE at all (`xe` has none).
    fn has_rl_phase(&self) -> bool {
        true
    }

    /// Whether the objective trains a value head ([`crate::critic`]) on per-token targets
    /// ([`PgBatch::values`]) instead of weighting whole sequences by their multipliers.
    fn uses_value_head(&self) -> bool {
        false
    }

    /// Whether reward workers compute SLE's exploration term (reward component `diversity`).
    fn wants_exploration(&self) -> bool {
        false
    }

    /// Whether each sampled caption is compared with the other samples of its image (a group
    /// baseline: mean, grpo, dr-grpo). That needs two samples per image, and it is what
    /// dynamic sampling filters on: a group whose samples all score the same carries no
    /// gradient.
    fn compares_samples_in_group(&self) -> bool {
        false
    }

    /// Whether PPO's clipped ratio applies: one multiplier per sampled caption, whose
    /// behaviour log-probs the rollout carries.
    fn supports_ppo(&self) -> bool {
        false
    }

    /// Whether the objective learns from the text–image encoder's rewards (`clip`, `disc`):
    /// `caprl run` then sets them up, and a spec without them is refused.
    fn needs_encoder_reward(&self) -> bool {
        false
    }

    /// The objective's own config checks beyond the ones every config gets (see
    /// [`Objective::check`] for those every objective shares).
    fn check(&self, _cfg: &RunConfig) -> Result<(), ConfigError> {
        Ok(())
    }
}

/// The refusal of `key`'s `value`, saying what is `allowed`.
pub fn refuse(key: &str, value: String, allowed: &str) -> Result<(), ConfigError> {
    Err(ConfigError::OutOfRange {
        key: key.to_string(),
        value,
        allowed: allowed.to_string(),
    })
}

/// Which checkpoint of the RL phase is kept as `best-rl`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BestCheckpoint {
    /// The one with the highest validation CIDEr-D.
    HighestCider,
    /// The newest one.
    Latest,
}

/// The configured objective: every per-objective question of the learner and the roles.
pub struct Objective {
    rule: Box<dyn Rule>,
}

impl Objective {
    /// The objective of `train.objective`, with its settings from `[train]`.
    pub fn from_config(cfg: &RunConfig) -> Objective {
        let t = &cfg.train;
        let max_tokens = cfg.data.max_len as usize + 1;
        let rule: Box<dyn Rule> = match t.objective {
            config::ObjectiveName::Xe => Box::new(xe::Xe),
            config::ObjectiveName::Scst => Box::new(scst::Scst {
                baseline: t.baseline,
                max_tokens,
            }),
            config::ObjectiveName::Sle => Box::new(sle::Sle {
                alpha: t.sle_alpha as f32,
                baseline: t.baseline,
                max_tokens,
            }),
            config::ObjectiveName::McPg => Box::new(mc_pg::McPg {
                baseline: t.baseline,
            }),
            config::ObjectiveName::ActorCritic => Box::new(actor_critic::ActorCritic {
                baseline: t.baseline,
            }),
            config::ObjectiveName::Wtf => Box::new(wtf::Wtf {
                rl: false,
                baseline: t.wtf_baseline,
            }),
            config::ObjectiveName::WtfRl => Box::new(wtf::Wtf {
                rl: true,
                baseline: t.wtf_baseline,
            }),
        };
        Objective::new(rule)
    }

    /// An objective from its rule (how tests and examples plug in one of their own).
    pub fn new(rule: Box<dyn Rule>) -> Objective {
        Objective { rule }
    }

    /// The name as written in the config (`scst`, `mc-pg`, ...).
    pub fn name(&self) -> &'static str {
        self.rule.name()
    }

    /// What actors decode per image: the rule's decodes, plus a ground-truth caption whenever
    /// the reward spec reads the text–image encoder (the contrastive text pool and the
    /// discriminator's real examples).
    pub fn decodes(&self, cfg: &RunConfig) -> Decodes {
        let mut d = self.rule.decodes(cfg);
        d.ground_truth |= uses_encoder(cfg);
        d
    }

    pub fn has_rl_phase(&self) -> bool {
        self.rule.has_rl_phase()
    }

    pub fn uses_value_head(&self) -> bool {
        self.rule.uses_value_head()
    }

    pub fn wants_exploration(&self) -> bool {
        self.rule.wants_exploration()
    }

    /// Refuses the settings this objective cannot train with: a group baseline with one
    /// sample, PPO or dynamic sampling where they mean nothing, async mode for a value head
    /// (its targets are on-policy returns), an encoder objective without an encoder reward,
    /// after the rule's own ([`Rule::check`]). Every config the CLI loads passes here.
    pub fn check(&self, cfg: &RunConfig) -> Result<(), ConfigError> {
        self.rule.check(cfg)?;
        let (t, name) = (&cfg.train, self.name());
        if self.rule.compares_samples_in_group() && t.samples < 2 {
            refuse(
                "train.samples",
                t.samples.to_string(),
                ">= 2 when baseline is mean, grpo or dr-grpo (each sample is compared with the \
                 others of its image)",
            )?;
        }
        if t.ppo_epochs > 0 && !self.rule.supports_ppo() {
            refuse(
                "train.ppo_epochs",
                format!("{} with objective \"{name}\"", t.ppo_epochs),
                "0 unless objective = scst or sle (PPO's ratio needs the sampled captions' \
                 behaviour log-probs and one multiplier per caption)",
            )?;
        }
        if t.dynamic_sampling && !self.rule.compares_samples_in_group() {
            refuse(
                "train.dynamic_sampling",
                format!(
                    "true with objective \"{name}\" and baseline \"{}\"",
                    spelled(&t.baseline)
                ),
                "false unless objective = scst or sle with a group baseline (mean, grpo, \
                 dr-grpo: only then does a group whose samples score the same carry no gradient)",
            )?;
        }
        if self.uses_value_head() && cfg.runtime.mode != Mode::Sync {
            refuse(
                "runtime.mode",
                format!(
                    "\"{}\" with objective \"{name}\"",
                    spelled(&cfg.runtime.mode)
                ),
                "\"sync\" for objectives that train a value head (mc-pg, actor-critic: their \
                 targets are on-policy returns)",
            )?;
        }
        if self.rule.needs_encoder_reward() && !uses_encoder(cfg) {
            refuse(
                "reward.spec",
                cfg.reward.spec.to_string(),
                "a spec with clip, clip-i2t, clip-s or disc for objective wtf / wtf-rl \
                 (paper 004: clip=0.94,disc=0.06)",
            )?;
        }
        Ok(())
    }

    /// Whether `caprl run` should set up the encoder rewards itself (train the two dual
    /// encoders, use paper 004's spec) when the user gave none.
    pub fn needs_encoder_reward(&self) -> bool {
        self.rule.needs_encoder_reward()
    }

    /// Which RL checkpoint becomes `best-rl`: the newest under an encoder reward (paper 004
    /// trains for distinctiveness, which costs CIDEr-D, so picking by CIDEr-D would undo it),
    /// else the highest validation CIDEr-D.
    pub fn best_rl_checkpoint(&self, cfg: &RunConfig) -> BestCheckpoint {
        match uses_encoder(cfg) {
            true => BestCheckpoint::Latest,
            false => BestCheckpoint::HighestCider,
        }
    }

    /// See [`Rule::targets`].
    pub fn targets(&self, scored: &[ScoredRollout], version: u64) -> Result<PgBatch, LearnerError> {
        self.rule.targets(scored, version)
    }
}

/// A run config checked by every rule the learner's side owns, on top of the loading checks of
/// [`RunConfig::load`]: the objectives' settings ([`params::CHECKS`]), the training run's keys,
/// the off-policy corrections', the `[clip]` rewards', the rewards' table ([`rewards::check`]),
/// the objective ([`Objective::check`]) and the driver's ([`DriverOptions::CHECKS`]). What
/// training runs with. It reads as the [`RunConfig`] it holds and cannot be changed, so what
/// was checked is what runs; a changed copy is checked again ([`CheckedConfig::into_inner`],
/// [`CheckedConfig::new`]).
#[derive(Debug, Clone)]
pub struct CheckedConfig(RunConfig);

impl CheckedConfig {
    /// `cfg`, checked by every rule the learner's side owns.
    pub fn new(cfg: RunConfig) -> Result<CheckedConfig, ConfigError> {
        if let Some(v) = first_violation_of(&settings_rules(&cfg)) {
            return Err(v.into());
        }
        rewards::check(&cfg)?;
        Objective::from_config(&cfg).check(&cfg)?;
        if let Some(v) = first_violation(DriverOptions::CHECKS, &DriverOptions::of(&cfg)) {
            return Err(v.into());
        }
        Ok(CheckedConfig(cfg))
    }

    /// The config, to change it (and check it again).
    pub fn into_inner(self) -> RunConfig {
        self.0
    }
}

/// The range and cross-key rules of the learner's side checked before the objective's.
fn settings_rules(cfg: &RunConfig) -> Vec<Box<dyn Rules + '_>> {
    vec![
        ruled(params::CHECKS, cfg),
        ruled(setup::CHECKS, cfg),
        ruled(off_policy::CHECKS, &cfg.runtime),
        ruled(ClipReward::CHECKS, &cfg.clip),
    ]
}

/// What every rule about `key` (`section.key`) allows, the loader's
/// ([`caprl_common::config::allowed_for`]) and the learner's side's, joined by "; "; `None`
/// when no rule is about it.
pub fn allowed_for(key: &str) -> Option<String> {
    let cfg = RunConfig::default();
    let mut rules = settings_rules(&cfg);
    rules.push(ruled(DriverOptions::CHECKS, DriverOptions::of(&cfg)));
    let owned = allowed_by(&rules, key);
    let all: Vec<String> = caprl_common::config::allowed_for(key)
        .into_iter()
        .chain(owned)
        .collect();
    (!all.is_empty()).then(|| all.join("; "))
}

impl std::ops::Deref for CheckedConfig {
    type Target = RunConfig;

    fn deref(&self) -> &RunConfig {
        &self.0
    }
}

/// The run config of `file` (or the defaults) with `sets` applied, validated and checked
/// ([`CheckedConfig`]): the config every command of the CLI runs with. A `--set` value of the
/// wrong type names what the key allows, whichever side owns its rule.
pub fn load_checked(file: Option<&Path>, sets: &[String]) -> Result<CheckedConfig, ConfigError> {
    let cfg = RunConfig::load(file, sets).map_err(|e| match e {
        ConfigError::BadOverride {
            key,
            value,
            message,
        } if !message.contains(" allows ") => {
            let hint = allowed_for(&key).map(|a| format!(" ({key} allows {a})"));
            let message = message + &hint.unwrap_or_default();
            ConfigError::BadOverride {
                key,
                value,
                message,
            }
        }
        e => e,
    })?;
    CheckedConfig::new(cfg)
}

/// Whether the reward spec reads the text–image encoder (and so wants ground-truth captions in
/// every rollout: the contrastive text pool and the discriminator's real examples).
pub fn uses_encoder(cfg: &RunConfig) -> bool {
    rewards::needs(&cfg.reward.spec).encoder
}

/// Whether the reward spec has `disc`: the learner trains the discriminator (paper 004).
pub fn uses_disc(cfg: &RunConfig) -> bool {
    rewards::needs(&cfg.reward.spec).discriminator
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(objective: &str, baseline: &str) -> RunConfig {
        RunConfig::from_toml_str(
            &format!("[train]\nobjective = \"{objective}\"\nbaseline = \"{baseline}\"\n"),
            "test",
        )
        .unwrap()
    }

    /// The decodes each objective asked for before they moved here (`roles::driver_options`).
    #[test]
    fn each_objective_asks_for_its_decodes() {
        let d = |o, b| Objective::from_config(&with(o, b)).decodes(&with(o, b));
        let sampled = |greedy, mc_rollouts| Decodes {
            samples: 5,
            greedy,
            mc_rollouts,
            ..Decodes::default()
        };
        assert_eq!(d("scst", "greedy"), sampled(true, 0));
        assert_eq!(d("scst", "mean"), sampled(false, 0));
        assert_eq!(d("sle", "greedy"), sampled(true, 0));
        assert_eq!(d("sle", "mean"), sampled(false, 0));
        assert_eq!(d("scst", "grpo"), sampled(false, 0));
        assert_eq!(d("mc-pg", "greedy"), sampled(false, 3));
        assert_eq!(d("actor-critic", "greedy"), sampled(false, 0));
        assert_eq!(d("xe", "greedy"), sampled(false, 0));
    }

    #[test]
    fn names_match_the_config_spelling() {
        for name in ["xe", "scst", "sle", "mc-pg", "actor-critic"] {
            assert_eq!(Objective::from_config(&with(name, "greedy")).name(), name);
        }
    }

    #[test]
    fn value_head_objectives_refuse_async_mode() {
        let in_mode = |objective, mode: Mode| {
            let mut cfg = with(objective, "greedy");
            cfg.runtime.mode = mode;
            Objective::from_config(&cfg).check(&cfg)
        };
        let err = in_mode("mc-pg", Mode::Async).unwrap_err().to_string();
        assert!(
            err.contains("runtime.mode")
                && err.contains("\"sync\" for objectives that train a value head"),
            "{err}"
        );
        assert!(in_mode("mc-pg", Mode::Sync).is_ok());
        assert!(in_mode("scst", Mode::Async).is_ok());
    }
}
