//! The diverse-beam and bad-ending flags that `caprl eval` and `caprl caption` share, resolved
//! against the checkpoint's `[decode]` keys.

use anyhow::{bail, Result};
use caprl_common::config::DecodeConfig;
use caprl_model::model::BeamRule;

#[derive(Debug, clap::Args)]
pub struct DiverseBeamArgs {
    /// Diverse beam search: groups the beam is split into (default: decode.beam_groups of the
    /// checkpoint's config).
    #[arg(long, value_name = "G")]
    pub beam_groups: Option<usize>,
    /// Diverse beam search: penalty per earlier group's choice of the same word (default:
    /// decode.diversity_lambda of the checkpoint's config).
    #[arg(long, value_name = "LAMBDA")]
    pub diversity_lambda: Option<f32>,
    /// Never end a caption right after "a", "the", "of", ... (also on when the checkpoint's
    /// config has decode.remove_bad_endings).
    #[arg(long)]
    pub remove_bad_endings: bool,
}

/// The flags over the config's keys.
#[derive(Debug, Clone, Copy)]
pub struct DiverseBeam {
    pub groups: usize,
    pub lambda: f32,
    pub remove_bad_endings: bool,
}

impl DiverseBeamArgs {
    /// Each flag, or its key in `decode` when not given; 0 groups, groups that do not divide
    /// a `beam` wider than 1 and a negative or non-finite λ are errors.
    pub fn resolve(&self, decode: &DecodeConfig, beam: usize) -> Result<DiverseBeam> {
        let out = DiverseBeam {
            groups: self.beam_groups.unwrap_or(decode.beam_groups as usize),
            lambda: self
                .diversity_lambda
                .unwrap_or(decode.diversity_lambda as f32),
            remove_bad_endings: self.remove_bad_endings || decode.remove_bad_endings,
        };
        // With --beam 1 (greedy) the groups are not used: only their count and λ are checked.
        let width = if beam > 1 { beam } else { out.groups.max(1) };
        match BeamRule::broken(width, out.groups, f64::from(out.lambda)) {
            None | Some(BeamRule::NoWidth) => {}
            Some(BeamRule::NoGroups) => {
                bail!("--beam-groups 0: give 1 (plain beam search) or more")
            }
            Some(BeamRule::GroupsDoNotDivide) => bail!(
                "--beam {beam} is not a multiple of the beam groups {} (--beam-groups, default \
                 decode.beam_groups): give a --beam-groups that divides --beam, 1 = plain beam search",
                out.groups
            ),
            Some(BeamRule::BadLambda) => bail!(
                "--diversity-lambda {}: λ must be a finite number >= 0",
                out.lambda
            ),
        }
        Ok(out)
    }
}
