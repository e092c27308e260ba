//! The rewards a `reward.spec` can name, one file each, listed once in [`BUILTIN`].
//!
//! A reward is a [`RewardDef`]: its name in the spec, one line for the help text, what it reads
//! besides the captions ([`Needs`]) and how to build it for a data set. Built, it is a
//! [`Reward`]: one call per rollout, one value per caption. Everything else — the spec's weights,
//! the `total`, the run log's components, the checks that a spec names only rewards there are —
//! is the [`Rewarder`](crate::Rewarder)'s and reads this table.
//!
//! Adding a reward: a file here with a `pub const DEF: RewardDef` and a [`Reward`] impl, its
//! `mod` line below and its line in [`BUILTIN`]. The default config's comment on `reward.spec`
//! lists the table (a test holds it to it). A reward written in Python needs no Rust at all:
//! `py:<function>` names a function of the module `reward.python` ([`python`]). SLE's
//! exploration term ([`Diversity`]) is not in the table: `reward.spec` does not name it;
//! objective `sle` adds it to sampled captions, compared within each image's samples.

mod bleu;
mod cider;
mod clip;
mod diversity;
mod embed;
pub mod python;
mod rouge;

use caprl_common::config::{ConfigError, RewardSpec, RunConfig};
use caprl_data::{Dataset, Item};
use caprl_model::model::EOS;
use caprl_score::{CiderD, EOS_MARK};

use crate::clip_reward::ClipParts;
use crate::RewardError;

pub use diversity::{exploration_terms, Diversity};
pub use embed::EmbedReward;

/// Every reward a spec can name, in the order the help text lists them.
pub const BUILTIN: &[RewardDef] = &[
    cider::DEF,
    bleu::DEFS[0],
    bleu::DEFS[1],
    bleu::DEFS[2],
    bleu::DEFS[3],
    rouge::DEF,
    clip::BICONT,
    clip::I2T,
    clip::CLIP_S,
    clip::DISC,
    embed::DEF,
];

/// What a reward reads besides the captions and the references of their images.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Needs {
    /// The text–image encoder of `[clip] reward` (its values arrive in [`Caption::clip`]).
    pub encoder: bool,
    /// The discriminator the learner trains and ships in its policy snapshots.
    pub discriminator: bool,
}

impl Needs {
    /// Nothing besides the captions and their references.
    pub const NOTHING: Needs = Needs {
        encoder: false,
        discriminator: false,
    };

    fn or(self, other: Needs) -> Needs {
        Needs {
            encoder: self.encoder || other.encoder,
            discriminator: self.discriminator || other.discriminator,
        }
    }
}

/// One reward a spec can name.
#[derive(Debug, Clone, Copy)]
pub struct RewardDef {
    /// Its name in `reward.spec`.
    pub name: &'static str,
    /// One line for the help text and the docs.
    pub about: &'static str,
    pub needs: Needs,
    /// The reward for the training split of a data set.
    pub build: fn(&Setup<'_>) -> Result<Box<dyn Reward>, RewardError>,
}

/// What a reward is built from.
pub struct Setup<'a> {
    pub data: &'a Dataset,
    /// The training split's images, references and feature rows.
    pub items: &'a [Item],
}

/// A built reward: scores a whole rollout at once.
pub trait Reward: Send + Sync {
    /// One value per caption of `batch`, in its order.
    fn score(&self, batch: &Batch<'_>) -> Result<Vec<f64>, RewardError>;
}

/// The captions of one rollout, with what the rewards compare them with.
pub struct Batch<'a> {
    /// The rollout's task id, for messages.
    pub task: String,
    pub captions: Vec<Caption<'a>>,
    /// The CIDEr-D settings of the run, shared by the `cider` reward and SLE's CIDEr distance.
    pub cider: &'a CiderSettings,
}

/// One caption to score.
pub struct Caption<'a> {
    /// The feature row of its image.
    pub row: u32,
    /// How it was decoded (sampled, greedy, beam, a ground-truth caption).
    pub kind: caprl_wire::DecodeKind,
    /// The tokens as decoded: they end with [`EOS`] when the caption finished, and without it
    /// when it was cut at `data.max_len`.
    pub tokens: &'a [u32],
    /// The references of its image, as word ids of the vocabulary.
    pub refs: &'a [Vec<u32>],
    /// Its clip-family values, when a reward of the spec needs the encoder.
    pub clip: Option<&'a ClipParts>,
}

impl Caption<'_> {
    /// The caption's words: its tokens up to the first [`EOS`].
    pub fn words(&self) -> &[u32] {
        let n = self.tokens.iter().take_while(|&&t| t != EOS).count();
        &self.tokens[..n]
    }

    /// Whether the caption ended with [`EOS`] (one cut at `data.max_len` did not).
    pub fn finished(&self) -> bool {
        self.words().len() < self.tokens.len()
    }
}

/// How CIDEr-D is scored in this run.
pub struct CiderSettings {
    /// CIDEr-D over the training split's document frequencies.
    pub training: CiderD,
    /// References and finished captions end with [`EOS_MARK`] (`reward.cider_eos`; decided by
    /// whether the document frequencies were counted with it).
    pub eos: bool,
    /// `reward.df = "corpus"`: the `cider` reward counts its document frequencies over each
    /// rollout's references instead of the training split's.
    pub corpus_df: bool,
}

impl CiderSettings {
    /// The words CIDEr-D scores of `caption`: followed by [`EOS_MARK`] when it finished and the
    /// run scores with `<eos>`.
    pub fn sentence(&self, caption: &Caption<'_>) -> Vec<u32> {
        let mut words = caption.words().to_vec();
        if self.eos && caption.finished() {
            words.push(EOS_MARK);
        }
        words
    }
}

/// The reward called `name`.
pub fn find(name: &str) -> Option<&'static RewardDef> {
    BUILTIN.iter().find(|d| d.name == name)
}

/// The names of every reward, comma-separated, for error messages.
pub fn names() -> String {
    BUILTIN
        .iter()
        .map(|d| d.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A reward of a spec: one of [`BUILTIN`] or a Python function.
#[derive(Debug, Clone, Copy)]
pub enum Named<'a> {
    Builtin(&'static RewardDef),
    /// `py:<function>`: the function's name.
    Python(&'a str),
}

impl Named<'_> {
    /// What the reward reads besides the captions (a Python function gets what [`Batch`] holds).
    pub fn needs(&self) -> Needs {
        match self {
            Named::Builtin(def) => def.needs,
            Named::Python(_) => Needs::NOTHING,
        }
    }
}

/// The rewards `spec` names, in its order; an unknown name is refused, listing the ones there are.
pub fn resolve(spec: &RewardSpec) -> Result<Vec<Named<'_>>, ConfigError> {
    spec.terms()
        .iter()
        .map(|(name, _)| {
            if let Some(function) = name.as_str().strip_prefix(python::PREFIX) {
                return Ok(Named::Python(function));
            }
            find(name.as_str())
                .map(Named::Builtin)
                .ok_or_else(|| ConfigError::UnknownReward {
                    name: name.to_string(),
                    allowed: format!(
                        "{}, {}<function> (see reward.python)",
                        names(),
                        python::PREFIX
                    ),
                })
        })
        .collect()
}

/// What the rewards of `spec` read, together (unknown names read nothing: [`resolve`] refuses
/// them).
pub fn needs(spec: &RewardSpec) -> Needs {
    spec.terms()
        .iter()
        .filter_map(|(name, _)| find(name.as_str()))
        .fold(Needs::default(), |all, d| all.or(d.needs))
}

/// Checks the run's reward settings: every name of `reward.spec` is a reward there is, an
/// encoder is configured when one of them reads it, and a module when one is a Python function.
pub fn check(cfg: &RunConfig) -> Result<(), ConfigError> {
    let named = resolve(&cfg.reward.spec)?;
    if needs(&cfg.reward.spec).encoder && cfg.clip.reward.is_empty() {
        let readers: Vec<&str> = BUILTIN
            .iter()
            .filter(|d| d.needs.encoder)
            .map(|d| d.name)
            .collect();
        return Err(ConfigError::OutOfRange {
            key: "clip.reward".to_string(),
            value: "\"\"".to_string(),
            allowed: format!(
                "an encoder path when the reward spec has {} (train one with `caprl clip train`)",
                readers.join(", ")
            ),
        });
    }
    let python = named.iter().any(|n| matches!(n, Named::Python(_)));
    if python && cfg.reward.python.is_empty() {
        return Err(ConfigError::OutOfRange {
            key: "reward.python".to_string(),
            value: "\"\"".to_string(),
            allowed: format!(
                "the module (a name on PYTHONPATH or a .py file) whose functions reward.spec \
                 names as {}<function>",
                python::PREFIX
            ),
        });
    }
    Ok(())
}
