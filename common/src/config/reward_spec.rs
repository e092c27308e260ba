//! The `reward.spec` key: a weighted sum of named rewards, `cider=1,bleu4=0.5`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::error::ConfigError;

/// The reward component that carries SLE's exploration term `eⱼ` (paper 002): reward workers
/// add it for objective `sle`, the learner reads it back.
pub const DIVERSITY: &str = "diversity";

/// A reward the reward workers know how to compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RewardName {
    /// CIDEr-D against the image's references.
    Cider,
    Bleu1,
    Bleu2,
    Bleu3,
    Bleu4,
    /// ROUGE-L.
    Rouge,
    /// Bidirectional decoupled contrastive reward `r_bicont` (paper 004, eq. 2).
    Clip,
    /// Image-to-text half of the contrastive reward.
    ClipI2t,
    /// CLIP-S: scaled cosine of caption and image embeddings.
    ClipS,
    /// Discriminator probability `p_D` (paper 004).
    Disc,
    /// Joint-embedding cosine reward (paper 001).
    Embed,
}

impl RewardName {
    /// `clip`, `clip-i2t`, `clip-s` and `disc` read a text–image encoder (`[clip] reward`).
    pub fn needs_encoder(self) -> bool {
        matches!(
            self,
            RewardName::Clip | RewardName::ClipI2t | RewardName::ClipS | RewardName::Disc
        )
    }

    /// Every reward, in the order the help text lists them.
    pub const ALL: [RewardName; 11] = [
        RewardName::Cider,
        RewardName::Bleu1,
        RewardName::Bleu2,
        RewardName::Bleu3,
        RewardName::Bleu4,
        RewardName::Rouge,
        RewardName::Clip,
        RewardName::ClipI2t,
        RewardName::ClipS,
        RewardName::Disc,
        RewardName::Embed,
    ];

    /// The name as written in a spec.
    pub fn as_str(self) -> &'static str {
        match self {
            RewardName::Cider => "cider",
            RewardName::Bleu1 => "bleu1",
            RewardName::Bleu2 => "bleu2",
            RewardName::Bleu3 => "bleu3",
            RewardName::Bleu4 => "bleu4",
            RewardName::Rouge => "rouge",
            RewardName::Clip => "clip",
            RewardName::ClipI2t => "clip-i2t",
            RewardName::ClipS => "clip-s",
            RewardName::Disc => "disc",
            RewardName::Embed => "embed",
        }
    }

    fn allowed_list() -> String {
        RewardName::ALL.map(RewardName::as_str).join(", ")
    }
}

impl FromStr for RewardName {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RewardName::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| ConfigError::UnknownReward {
                name: s.to_string(),
                allowed: RewardName::allowed_list(),
            })
    }
}

impl fmt::Display for RewardName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A parsed reward spec: `total = Σ weight_i · reward_i`.
///
/// Invariants (checked by [`RewardSpec::parse`]): at least one term, no name
/// twice, every weight finite and >= 0, not all weights zero.
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
            if terms.iter().any(|(n, _)| *n == name) {
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

    /// Whether any term reads the text–image encoder (`clip`, `clip-i2t`, `clip-s`, `disc`).
    pub fn needs_encoder(&self) -> bool {
        self.terms.iter().any(|(n, _)| n.needs_encoder())
    }

    /// Whether the spec contains `name` with any weight.
    pub fn contains(&self, name: RewardName) -> bool {
        self.terms.iter().any(|(n, _)| *n == name)
    }
}

impl Default for RewardSpec {
    /// `cider=1`.
    fn default() -> Self {
        RewardSpec {
            terms: vec![(RewardName::Cider, 1.0)],
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
