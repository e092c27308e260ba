//! The contrastive CLIP rewards of paper 004 and the discriminator's `P_D`, on a frozen encoder.
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

use caprl_clip::{matmul, retrieval, transpose, DiscScorer, Embeddings, Encoder};
use caprl_common::config::ClipConfig;
use caprl_data::{Dataset, Item};
use caprl_wire::check::{fails, Check};
use caprl_wire::{DecodeKind, Rollout};

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
    disc: RwLock<Option<(u64, DiscScorer)>>,
}

/// `τ·log(e^{s⁺/τ} / Σ e^{sⱼ/τ}) = s⁺ − τ·LSE(sⱼ/τ)` over the negatives `sⱼ` (the positive is
/// not among them). With no negative at all there is nothing to contrast: `s⁺`.
pub fn contrast(s_pos: f32, negatives: &[f32], tau: f32) -> f32 {
    contrast_except(s_pos, negatives, None, tau)
}

/// [`contrast`] over the similarities `sims` but the one at `skip` (the positive's own).
fn contrast_except(s_pos: f32, sims: &[f32], skip: Option<usize>, tau: f32) -> f32 {
    match crate::lse::log_sum_exp(sims, skip, tau) {
        Some(lse) => s_pos - tau * lse,
        None => s_pos,
    }
}

impl ClipReward {
    /// The rules of the `[clip]` keys the rewards read.
    #[rustfmt::skip]
    pub const CHECKS: &[Check<ClipConfig>] = &[
        Check { key: "clip.tau", allowed: "a finite number > 0", violation: |c| fails(c.tau, |x| x > 0.0 && x.is_finite()) },
    ];

    /// Embeds the images of `items` and mines each one's `k` nearest images.
    pub fn new(
        encoder: Box<dyn Encoder>,
        data: &Dataset,
        items: &[Item],
        tau: f32,
        k: usize,
    ) -> caprl_clip::Result<Self> {
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

    /// Scores with `disc` (the discriminator of policy snapshot `version`, see
    /// [`caprl_clip::Discriminator::scorer`]) from now on.
    pub fn set_discriminator(&self, version: u64, disc: DiscScorer) {
        if let Ok(mut d) = self.disc.write() {
            *d = Some((version, disc));
        }
    }

    fn index(&self, row: u32) -> Option<usize> {
        self.index_of.get(row as usize).copied().flatten()
    }

    /// The clip-family values of every sequence of `rollout` (`None` for a row outside the
    /// split), with `disc` filled when a discriminator is held.
    pub fn score(&self, rollout: &Rollout) -> caprl_clip::Result<Vec<Option<ClipParts>>> {
        let texts = self.embed(rollout)?;
        self.score_embedded(rollout, &texts)
    }

    /// The text embeddings of every sequence of `rollout`.
    pub fn embed(&self, rollout: &Rollout) -> caprl_clip::Result<Embeddings> {
        let seqs = &rollout.sequences;
        self.encoder
            .embed_captions(&seqs.iter().map(|s| s.tokens.clone()).collect::<Vec<_>>())
    }

    /// [`ClipReward::score`] with the text embeddings already computed (`texts[i]` of
    /// sequence `i`): one product of the rollout's captions with its image pool, two
    /// log-sum-exps and the discriminator's MLP per caption.
    pub fn score_embedded(
        &self,
        rollout: &Rollout,
        texts: &Embeddings,
    ) -> caprl_clip::Result<Vec<Option<ClipParts>>> {
        let seqs = &rollout.sequences;
        let pool: Vec<usize> = (0..seqs.len())
            .filter(|&i| {
                matches!(
                    seqs[i].kind,
                    DecodeKind::Beam | DecodeKind::Greedy | DecodeKind::GroundTruth
                )
            })
            .collect();
        let own: Vec<Option<usize>> = seqs.iter().map(|s| self.index(s.image_row)).collect();
        let mut image_pool: Vec<usize> = Vec::new();
        for &i in own.iter().flatten() {
            image_pool.push(i);
            image_pool.extend(&self.neighbours[i]);
        }
        image_pool.sort_unstable();
        image_pool.dedup();
        let column = |i: usize| image_pool.binary_search(&i).unwrap_or(0);
        // s(x, i) of every caption x against every pool image i, by image and by caption.
        let n = seqs.len();
        let n_img = image_pool.len();
        let texts_t = transpose(&texts.data, texts.dim);
        let by_image = matmul(&gather(&self.images, &image_pool).data, &texts_t, texts.dim);
        let by_caption = transpose(&by_image, n);
        // The text rivals of each rollout image: its row, cut to the pool when some captions
        // (samples) are outside it.
        let in_pool: Vec<Option<usize>> = {
            let mut at = vec![None; n];
            for (k, &x) in pool.iter().enumerate() {
                at[x] = Some(k);
            }
            at
        };
        let cut: std::collections::BTreeMap<usize, Vec<f32>> = if pool.len() == n {
            Default::default()
        } else {
            own.iter()
                .flatten()
                .map(|&i| {
                    let p = column(i);
                    (p, pool.iter().map(|&x| by_image[p * n + x]).collect())
                })
                .collect()
        };
        let mut out = Vec::with_capacity(n);
        for (c, ic) in own.iter().enumerate() {
            let Some(ic) = *ic else {
                out.push(None);
                continue;
            };
            let p = column(ic);
            let image_row = &by_caption[c * n_img..(c + 1) * n_img];
            let s_pos = image_row[p];
            let text_row = cut
                .get(&p)
                .map_or(&by_image[p * n..(p + 1) * n], Vec::as_slice);
            let i2t = contrast_except(s_pos, text_row, in_pool[c], self.tau);
            let t2i = contrast_except(s_pos, image_row, Some(p), self.tau);
            out.push(Some(ClipParts {
                bicont: i2t + t2i,
                i2t,
                clip_s: CLIP_S_WEIGHT * s_pos.max(0.0),
                disc: None,
            }));
        }
        if let Some((_, disc)) = self.disc.read().ok().as_deref().and_then(Option::as_ref) {
            // Every caption is scored (one of an unknown image against the first image) and
            // only the known ones keep their value.
            let mut images: Vec<usize> = own.iter().flatten().copied().collect();
            images.sort_unstable();
            images.dedup();
            let image_of: Vec<usize> = own
                .iter()
                .map(|i| i.and_then(|i| images.binary_search(&i).ok()).unwrap_or(0))
                .collect();
            if !images.is_empty() {
                let p = disc.probabilities(&texts_t, &gather(&self.images, &images), &image_of)?;
                for (parts, p) in out.iter_mut().zip(p) {
                    if let Some(parts) = parts {
                        parts.disc = Some(p);
                    }
                }
            }
        }
        Ok(out)
    }
}

/// Rows `rows` of `e`, as a new table.
fn gather(e: &Embeddings, rows: &[usize]) -> Embeddings {
    let mut data = Vec::with_capacity(rows.len() * e.dim);
    for &r in rows {
        data.extend_from_slice(e.row(r));
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
