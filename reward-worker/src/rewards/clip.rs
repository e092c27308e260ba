//! The rewards that read the text–image encoder of `[clip] reward` (paper 004): `clip`, the
//! bidirectional decoupled contrastive reward `r_bicont` (eq. 2); `clip-i2t`, its image-to-text
//! half; `clip-s`, CLIP-S (Hessel et al. 2021); `disc`, the discriminator probability `p_D`.
//! The encoder's values of every caption are computed once per rollout
//! ([`ClipReward`](crate::ClipReward)); each reward reads its own.

use super::{Batch, Needs, Reward, RewardDef, Setup};
use crate::clip_reward::ClipParts;
use crate::RewardError;

const ENCODER: Needs = Needs {
    encoder: true,
    ..Needs::NOTHING
};

pub const BICONT: RewardDef = RewardDef {
    name: "clip",
    about: "bidirectional contrastive reward of the text-image encoder (paper 004, eq. 2)",
    needs: ENCODER,
    build: |_| Ok(Box::new(Part("clip", |p| Some(p.bicont)))),
};

pub const I2T: RewardDef = RewardDef {
    name: "clip-i2t",
    about: "image-to-text half of the contrastive reward",
    needs: ENCODER,
    build: |_| Ok(Box::new(Part("clip-i2t", |p| Some(p.i2t)))),
};

pub const CLIP_S: RewardDef = RewardDef {
    name: "clip-s",
    about: "CLIP-S: 2.5 x the cosine of caption and image embeddings, floored at 0",
    needs: ENCODER,
    build: |_| Ok(Box::new(Part("clip-s", |p| Some(p.clip_s)))),
};

pub const DISC: RewardDef = RewardDef {
    name: "disc",
    about: "probability the learner's discriminator gives the caption (paper 004)",
    needs: Needs {
        encoder: true,
        discriminator: true,
    },
    build: |_: &Setup<'_>| Ok(Box::new(Part("disc", |p| p.disc))),
};

/// One of the encoder's values of each caption; `None` only for `disc` before the learner's
/// first discriminator arrived.
struct Part(&'static str, fn(&ClipParts) -> Option<f32>);

impl Reward for Part {
    fn score(&self, batch: &Batch<'_>) -> Result<Vec<f64>, RewardError> {
        let Part(name, value) = *self;
        batch
            .captions
            .iter()
            .map(|c| {
                let parts = c.clip.ok_or(RewardError::NoEncoder(name))?;
                value(parts)
                    .map(f64::from)
                    .ok_or(RewardError::NoDiscriminator)
            })
            .collect()
    }
}
