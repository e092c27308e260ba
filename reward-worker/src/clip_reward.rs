//! The contrastive CLIP rewards of seed 004 and the discriminator's `P_D`, on a frozen encoder.
//!
//! `clip` is the bidirectional decoupled contrastive reward `r_bicont` of eq. 2:
//!
//! `r_i2t(x_c) = τ log( e^{s(x_c,i_c)/τ} / Σ_{x ∈ 𝒯∖x_c} e^{s(x,i_c)/τ} )`,
//! `r_t2i(x_c) = τ log( e^{s(x_c,i_c)/τ} / Σ_{i ∈ ℐ∖i_c} e^{s(x_c,i)/τ} )`,
//! `r_bicont = r_i2t + r_t2i`, with `s` the cosine of the embeddings and the positive pair
//! excluded from each denominator (decoupled contrastive loss). The text pool 𝒯 is every beam,
//! greedy and ground-truth caption of the rollout's images; the image pool ℐ is those images
//! plus their `k` nearest images, mined once at start from the image embeddings. With τ → 0
//! each term tends to the positive similarity minus the best rival's (the greedy caption, when
//! it is the most similar: SCST with a greedy baseline on the similarity reward).
//!
//! `clip-i2t` is `r_i2t` alone; `clip-s` is CLIP-S = `w·max(cos, 0)` with `w = 2.5`
//! (CLIP-Caption-Reward); `disc` is `P_D(x)` of the discriminator the learner trains online.

use std::sync::RwLock;

use caprl_common::clip::disc::Pairs;
use caprl_common::clip::{retrieval, Discriminator, Embeddings, Encoder};
use caprl_common::data::{Dataset, Item};
use caprl_common::wire::{DecodeKind, Rollout};

/// CLIP-S weight `w`.
pub const CLIP_S_WEIGHT: f32 = 2.5;

/// The clip-family values of one caption.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ClipParts {
    pub bicont: f32,
    pub i2t: f32,
    pub clip_s: f32,
    /// `P_D`, when a discriminator is held.
    pub disc: Option<f32>,
}

/// Frozen encoder, cached image embeddings and mined neighbours of the training split.
pub struct ClipReward {
    encoder: Box<dyn Encoder>,
    images: Embeddings,
    /// Feature row → index into `images`.
    index_of: Vec<Option<usize>>,
    neighbours: Vec<Vec<usize>>,
    tau: f32,
    disc: RwLock<Option<(u64, Discriminator)>>,
}

/// `τ·log(e^{s⁺/τ} / Σ e^{sⱼ/τ}) = s⁺ − τ·LSE(sⱼ/τ)` over the negatives `sⱼ` (the positive is
/// not among them). With no negative at all there is nothing to contrast: `s⁺`.
pub fn contrast(s_pos: f32, negatives: &[f32], tau: f32) -> f32 {
    let Some(m) = negatives.iter().copied().reduce(f32::max) else {
        return s_pos;
    };
    let lse = m / tau
        + negatives
            .iter()
            .map(|s| ((s - m) / tau).exp())
            .sum::<f32>()
            .ln();
    s_pos - tau * lse
}

impl ClipReward {
    /// Embeds the images of `items` and mines each one's `k` nearest images.
    pub fn new(
        encoder: Box<dyn Encoder>,
        data: &Dataset,
        items: &[Item],
        tau: f32,
        k: usize,
    ) -> caprl_common::clip::Result<Self> {
        let rows: Vec<usize> = items.iter().map(|it| it.row).collect();
        let images = encoder.embed_images(data, &rows)?;
        let neighbours = retrieval::nearest(&images, k)?;
        let mut index_of = vec![None; rows.iter().max().map_or(0, |m| m + 1)];
        for (i, &r) in rows.iter().enumerate() {
            index_of[r] = Some(i);
        }
        Ok(Self {
            encoder,
            images,
            index_of,
            neighbours,
            tau,
            disc: RwLock::new(None),
        })
    }

    /// The policy version of the discriminator held, if any.
    pub fn disc_version(&self) -> Option<u64> {
        self.disc.read().ok()?.as_ref().map(|(v, _)| *v)
    }

    /// Scores with `disc` (from policy snapshot `version`) from now on.
    pub fn set_discriminator(&self, version: u64, disc: Discriminator) {
        if let Ok(mut d) = self.disc.write() {
            *d = Some((version, disc));
        }
    }

    fn index(&self, row: u32) -> Option<usize> {
        self.index_of.get(row as usize).copied().flatten()
    }

    /// The clip-family values of every sequence of `rollout` (`None` for a row outside the
    /// split), with `disc` filled when a discriminator is held.
    pub fn score(&self, rollout: &Rollout) -> caprl_common::clip::Result<Vec<Option<ClipParts>>> {
        let texts = self.embed(rollout)?;
        self.score_embedded(rollout, &texts)
    }

    /// The text embeddings of every sequence of `rollout`.
    pub fn embed(&self, rollout: &Rollout) -> caprl_common::clip::Result<Embeddings> {
        let seqs = &rollout.sequences;
        self.encoder
            .embed_captions(&seqs.iter().map(|s| s.tokens.clone()).collect::<Vec<_>>())
    }

    /// [`ClipReward::score`] with the text embeddings already computed (`texts[i]` of
    /// sequence `i`): dot products, two log-sum-exps and the discriminator's MLP per caption.
    pub fn score_embedded(
        &self,
        rollout: &Rollout,
        texts: &Embeddings,
    ) -> caprl_common::clip::Result<Vec<Option<ClipParts>>> {
        let seqs = &rollout.sequences;
        let pool: Vec<usize> = (0..seqs.len())
            .filter(|&i| {
                matches!(
                    seqs[i].kind,
                    DecodeKind::Beam | DecodeKind::Greedy | DecodeKind::GroundTruth
                )
            })
            .collect();
        let mut image_pool: Vec<usize> = Vec::new();
        for s in seqs {
            if let Some(i) = self.index(s.image_row) {
                image_pool.push(i);
                image_pool.extend(&self.neighbours[i]);
            }
        }
        image_pool.sort_unstable();
        image_pool.dedup();
        // s(x, i) of every pool caption x against each image of the rollout, computed once per
        // image: the text rivals of every caption of that image.
        let mut pool_sims: std::collections::BTreeMap<usize, Vec<f32>> = Default::default();
        for s in seqs {
            if let Some(i) = self.index(s.image_row) {
                pool_sims.entry(i).or_insert_with(|| {
                    pool.iter()
                        .map(|&x| texts.dot(x, &self.images, i))
                        .collect()
                });
            }
        }
        let mut out = Vec::with_capacity(seqs.len());
        let mut text_negs = Vec::with_capacity(pool.len());
        let mut image_negs = Vec::with_capacity(image_pool.len());
        for (c, s) in seqs.iter().enumerate() {
            let Some(ic) = self.index(s.image_row) else {
                out.push(None);
                continue;
            };
            let s_pos = texts.dot(c, &self.images, ic);
            text_negs.clear();
            text_negs.extend(
                pool.iter()
                    .zip(&pool_sims[&ic])
                    .filter(|(&x, _)| x != c)
                    .map(|(_, &sim)| sim),
            );
            image_negs.clear();
            image_negs.extend(
                image_pool
                    .iter()
                    .filter(|&&i| i != ic)
                    .map(|&i| texts.dot(c, &self.images, i)),
            );
            let i2t = contrast(s_pos, &text_negs, self.tau);
            let t2i = contrast(s_pos, &image_negs, self.tau);
            out.push(Some(ClipParts {
                bicont: i2t + t2i,
                i2t,
                clip_s: CLIP_S_WEIGHT * s_pos.max(0.0),
                disc: None,
            }));
        }
        if let Some((_, disc)) = self.disc.read().ok().as_deref().and_then(Option::as_ref) {
            let known: Vec<usize> = (0..seqs.len()).filter(|&c| out[c].is_some()).collect();
            let t = gather(texts, &known, |c| c);
            let i = gather(&self.images, &known, |c| {
                self.index(seqs[c].image_row).unwrap_or(0)
            });
            let p = disc.probabilities(&Pairs {
                texts: &t,
                images: &i,
            })?;
            for (&c, p) in known.iter().zip(p) {
                if let Some(parts) = out[c].as_mut() {
                    parts.disc = Some(p);
                }
            }
        }
        Ok(out)
    }
}

/// Rows `f(k)` of `e` for each `k` of `keys`, as a new table.
fn gather(e: &Embeddings, keys: &[usize], f: impl Fn(usize) -> usize) -> Embeddings {
    let mut data = Vec::with_capacity(keys.len() * e.dim);
    for &k in keys {
        data.extend_from_slice(e.row(f(k)));
    }
    Embeddings { dim: e.dim, data }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contrast_without_rivals_is_the_similarity() {
        assert_eq!(contrast(0.3, &[], 0.1), 0.3);
    }
}
