//! The home of every per-objective decision: which decodes a rollout task asks for, whether
//! the objective trains a value head, whether async mode is allowed, whether reward workers
//! compute SLE's exploration term, and how scored rollouts become policy-gradient targets.
//!
//! Each objective implements [`Rule`] in the file that holds its formula ([`crate::scst`],
//! [`crate::sle`], ...); [`Objective::from_config`] has one arm per `train.objective`. A new
//! objective is its own file plus one arm there:
//!
//! ```
//! use caprl_common::config::RunConfig;
//! use caprl_common::wire::{DecodeKind, ScoredRollout};
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
//! // In `Objective::from_config`: `config::Objective::Reinforce => Box::new(Reinforce),`
//! let objective = Objective::new(Box::new(Reinforce));
//! let decodes = objective.decodes(&RunConfig::default());
//! assert_eq!((decodes.samples, decodes.greedy, decodes.beam), (5, false, 0));
//! assert!(objective.has_rl_phase() && !objective.uses_value_head());
//! ```

use caprl_common::config::{self, Mode, RewardName, RunConfig};
use caprl_common::wire::ScoredRollout;

use crate::targets::PgBatch;
use crate::{actor_critic, mc_pg, scst, sle, wtf, xe, LearnerError};

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
            config::Objective::Xe => Box::new(xe::Xe),
            config::Objective::Scst => Box::new(scst::Scst {
                baseline: t.baseline,
                max_tokens,
            }),
            config::Objective::Sle => Box::new(sle::Sle {
                alpha: t.sle_alpha as f32,
                baseline: t.baseline,
                max_tokens,
            }),
            config::Objective::McPg => Box::new(mc_pg::McPg {
                baseline: t.baseline,
            }),
            config::Objective::ActorCritic => Box::new(actor_critic::ActorCritic {
                baseline: t.baseline,
            }),
            config::Objective::Wtf => Box::new(wtf::Wtf {
                rl: false,
                baseline: t.wtf_baseline,
            }),
            config::Objective::WtfRl => Box::new(wtf::Wtf {
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
        d.ground_truth |= uses_clip(cfg);
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

    /// Refuses async mode for objectives that learn a value head: its targets are on-policy
    /// returns.
    pub fn check_mode(&self, mode: Mode) -> Result<(), LearnerError> {
        if self.uses_value_head() && mode != Mode::Sync {
            return Err(LearnerError::Invalid(format!(
                "train.objective = \"{}\" trains a value head on on-policy returns: set runtime.mode = \"sync\"",
                self.name()
            )));
        }
        Ok(())
    }

    /// See [`Rule::targets`].
    pub fn targets(&self, scored: &[ScoredRollout], version: u64) -> Result<PgBatch, LearnerError> {
        self.rule.targets(scored, version)
    }
}

/// Whether the reward spec reads the text–image encoder (and so wants ground-truth captions in
/// every rollout: the contrastive text pool and the discriminator's real examples).
pub fn uses_clip(cfg: &RunConfig) -> bool {
    cfg.reward.spec.needs_encoder()
}

/// Whether the reward spec has `disc`: the learner trains the discriminator (seed 004).
pub fn uses_disc(cfg: &RunConfig) -> bool {
    cfg.reward.spec.contains(RewardName::Disc)
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
        let o = Objective::from_config(&with("mc-pg", "greedy"));
        let err = o.check_mode(Mode::Async).unwrap_err().to_string();
        assert!(err.contains("runtime.mode = \"sync\""), "{err}");
        assert!(o.check_mode(Mode::Sync).is_ok());
        let scst = Objective::from_config(&with("scst", "greedy"));
        assert!(scst.check_mode(Mode::Async).is_ok());
    }
}
