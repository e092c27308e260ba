//! The `[decode]` section ([`DecodeConfig`]): how captions are sampled and searched, its
//! defaults and its rules ([`DecodeConfig::CHECKS`]: the beam settings are [`BeamRule`]'s, the
//! decoder's one rule of them; temperature, top-k and top-p are [`Sampling`]'s, the type that
//! carries them to every task).

use serde::{Deserialize, Serialize};

use super::decoding::BeamRule;
use caprl_wire::check::{fails, Check};
use caprl_wire::Sampling;

/// `[decode]`: sampling and beam search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DecodeConfig {
    /// Sampling temperature; > 0.
    pub temperature: f64,
    /// Keep only the k most likely words when sampling; 0 = off.
    pub top_k: u32,
    /// Nucleus (top-p) sampling: keep the likeliest words up to this probability mass (after
    /// top-k); (0, 1], 1 = off.
    pub top_p: f64,
    /// Beam width; >= 1.
    pub beam: u32,
    /// Diverse beam search: groups the beam is split into; >= 1, divides `beam`; 1 = off.
    pub beam_groups: u32,
    /// Diverse beam search: penalty per earlier group's choice of the same word; >= 0.
    pub diversity_lambda: f64,
    /// Never end a caption right after a function word ("a", "the", "of", ...) in greedy,
    /// sampled and beam decodes (self-critical.pytorch's `--remove_bad_endings`).
    pub remove_bad_endings: bool,
    /// Divide beam scores by length.
    pub length_norm: bool,
    /// Forbid repeated trigrams in beam search.
    pub block_trigrams: bool,
    /// Actor-critic lookahead: `score = λ·logπ + (1-λ)·v`; [0, 1].
    pub lookahead_lambda: f64,
}

impl Default for DecodeConfig {
    fn default() -> Self {
        DecodeConfig {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            beam: 3,
            beam_groups: 1,
            diversity_lambda: 0.5,
            remove_bad_endings: false,
            length_norm: false,
            block_trigrams: false,
            lookahead_lambda: 1.0,
        }
    }
}

/// Whether the beam settings of `d` break `rule`.
fn breaks(d: &DecodeConfig, rule: BeamRule) -> bool {
    BeamRule::broken(d.beam as usize, d.beam_groups as usize, d.diversity_lambda) == Some(rule)
}

impl DecodeConfig {
    /// The beam settings' rules ([`BeamRule`]) and the lookahead's; the sampling keys' are
    /// [`Sampling::CHECKS`], run on [`DecodeConfig::sampling`].
    #[rustfmt::skip]
    pub const CHECKS: &'static [Check<DecodeConfig>] = &[
        Check { key: "decode.beam", allowed: ">= 1", violation: |d| breaks(d, BeamRule::NoWidth).then(|| "0".into()) },
        Check { key: "decode.beam_groups", allowed: ">= 1 (1 = plain beam search)", violation: |d| breaks(d, BeamRule::NoGroups).then(|| "0".into()) },
        Check {
            key: "decode.beam_groups",
            allowed: "a divisor of decode.beam (each group gets beam / beam_groups beams)",
            violation: |d| breaks(d, BeamRule::GroupsDoNotDivide).then(|| format!("{} with beam = {}", d.beam_groups, d.beam)),
        },
        Check { key: "decode.diversity_lambda", allowed: "a finite number >= 0", violation: |d| fails(d.diversity_lambda, |_| !breaks(d, BeamRule::BadLambda)) },
        Check { key: "decode.lookahead_lambda", allowed: "[0, 1]", violation: |d| fails(d.lookahead_lambda, |x| (0.0..=1.0).contains(&x)) },
    ];

    /// The distribution samples are drawn from.
    pub fn sampling(&self) -> Sampling {
        Sampling {
            temperature: self.temperature as f32,
            top_k: self.top_k,
            top_p: self.top_p as f32,
        }
    }
}
