//! The `reward.spec` key: a weighted sum of named rewards, `cider=1,bleu4=0.5`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::error::ConfigError;

/// The reward component that carries SLE's exploration term `eⱼ` (paper 002): reward workers
/// add it for objective `sle`, the learner reads it back.
pub const DIVERSITY: &str = "diversity";

/// The name of one reward in a spec: lower-case letters, digits and `-` (a reward of the reward
/// workers' table, `caprl_reward_worker::rewards`, which checks a spec before a run starts), or
/// `py:` and a Python function name (a function of `reward.python`). This type only holds the
/// spelling.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RewardName(String);

impl RewardName {
    /// The name as written in a spec.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for RewardName {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let builtin = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        };
        let python = |f: &str| {
            f.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                && f.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        };
        let spelt = match s.strip_prefix("py:") {
            Some(function) => python(function),
            None => builtin(s),
        };
        match spelt {
            true => Ok(RewardName(s.to_string())),
            false => Err(ConfigError::BadRewardSpec {
                spec: s.to_string(),
                reason: "a reward name is lower-case letters, digits and `-` (see `caprl config \
                         default` for the rewards there are), or `py:` and a Python function name"
                    .to_string(),
            }),
        }
    }
}

impl PartialEq<&str> for RewardName {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl fmt::Display for RewardName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A parsed reward spec: `total = Σ weight_i · reward_i`.
///
/// Invariants (checked by [`RewardSpec::parse`]): at least one term, no name
/// twice, every weight finite and >= 0, not all weights zero. Whether each name is a reward the
/// workers have is checked against their table, not here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RewardSpec {
    terms: Vec<(RewardName, f32)>,
}

impl RewardSpec {
    /// Parses `name=weight[,name=weight...]`; whitespace around items is ignored.
    pub fn parse(spec: &str) -> Result<RewardSpec, ConfigError> {
        let bad = |reason: String| ConfigError::BadRewardSpec {
            spec: spec.to_string(),
            reason,
        };
        let mut terms: Vec<(RewardName, f32)> = Vec::new();
        for item in spec.split(',') {
            let item = item.trim();
            if item.is_empty() {
                return Err(bad(
                    "empty term; write `name=weight` items separated by commas".to_string(),
                ));
            }
            let (name, weight) = item
                .split_once('=')
                .ok_or_else(|| bad(format!("`{item}` has no `=weight`")))?;
            let name: RewardName = name.trim().parse()?;
            let weight_text = weight.trim();
            let weight: f32 = weight_text
                .parse()
                .map_err(|_| bad(format!("weight `{weight_text}` of {name} is not a number")))?;
            if !weight.is_finite() || weight < 0.0 {
                return Err(ConfigError::BadRewardWeight {
                    name: name.to_string(),
                    weight: weight_text.to_string(),
                });
            }
            if terms.iter().any(|(n, _)| n == &name) {
                return Err(bad(format!("{name} appears twice")));
            }
            terms.push((name, weight));
        }
        if terms.iter().all(|(_, w)| *w == 0.0) {
            return Err(bad("all weights are zero".to_string()));
        }
        Ok(RewardSpec { terms })
    }

    /// The `(reward, weight)` terms in the order written.
    pub fn terms(&self) -> &[(RewardName, f32)] {
        &self.terms
    }

    /// Whether the spec contains `name` with any weight.
    pub fn contains(&self, name: &str) -> bool {
        self.terms.iter().any(|(n, _)| n.as_str() == name)
    }
}

impl Default for RewardSpec {
    /// `cider=1`.
    fn default() -> Self {
        RewardSpec {
            terms: vec![(RewardName("cider".to_string()), 1.0)],
        }
    }
}

impl FromStr for RewardSpec {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RewardSpec::parse(s)
    }
}

impl TryFrom<String> for RewardSpec {
    type Error = ConfigError;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        RewardSpec::parse(&s)
    }
}

impl From<RewardSpec> for String {
    fn from(spec: RewardSpec) -> String {
        spec.to_string()
    }
}

impl fmt::Display for RewardSpec {
    /// Canonical form: `name=weight` joined by commas, weights in shortest
    /// round-trip form (`cider=1,bleu4=0.5`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (name, weight)) in self.terms.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{name}={weight}")?;
        }
        Ok(())
    }
}
