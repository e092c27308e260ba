//! Reward computation: a weighted sum of named rewards per caption, through
//! the scoring engine, plus SLE's exploration term.
//!
//! References of every training image are interned once; an image's CIDEr-D tf-idf vectors
//! and norms are prepared when a rollout names it, once for all of the rollout's captions of
//! that image. Prepared for every image up front they took 1.2 GB at COCO's Karpathy size
//! (dense per-reference weights) and a third of the worker's start-up, for the handful of
//! images a step scores.
//!
//! **`<eos>` in CIDEr-D** (`reward.cider_eos`, on by default): self-critical.pytorch scores
//! its rewards with `<eos>` appended to every reference and to every sampled caption that
//! finished (see `caprl_score::eos`). When the document frequencies were counted
//! that way ([`Rewarder::training_df`] with `eos`), the rewarder scores the same way: the
//! prepared references end with [`EOS_MARK`], and a caption gets it iff its tokens contain
//! [`EOS`] (a caption cut at `max_len` does not). BLEU and ROUGE-L rewards stay plain. SLE's
//! CIDEr distance follows the CIDEr reward, as self-critical.pytorch's self-CIDEr does
//! (its `get_self_cider_scores` uses the same `array_to_str`): both samples carry the marker
//! iff they finished.

use std::collections::HashMap;

use caprl_common::config::{self, RewardName};
use caprl_data::{Dataset, Item};
use caprl_model::model::EOS;
use caprl_score::{with_eos, CiderD, Distance, DocFreq, Interner, PreparedRefs, EOS_MARK};
use caprl_wire::{DecodeKind, RewardVector, Rollout, ScoredRollout};

use crate::clip_reward::{ClipParts, ClipReward};
use crate::embed::EmbedReward;

/// Scores captions of the images of one split.
pub struct Rewarder {
    spec: Vec<(RewardName, f32)>,
    /// CIDEr-D over the training document frequencies (`reward.df = "train"`; also SLE's
    /// CIDEr distance).
    cider: CiderD,
    /// `reward.df = "corpus"`: the CIDEr-D reward counts its document frequencies over the
    /// references of each rollout's images instead ([`Rewarder::with_corpus_df`]).
    corpus_df: bool,
    /// CIDEr-D sees [`EOS_MARK`] (see the module docs).
    cider_eos: bool,
    /// Indexed by feature row; `None` for rows outside the split.
    refs: Vec<Option<ImageRefs>>,
    exploration: Option<Distance>,
    embed: Option<EmbedReward>,
    clip: Option<ClipReward>,
    /// The data set's vocabulary: a snapshot's discriminator must have been trained on it.
    vocab_hash: String,
    /// The data set's fingerprint: rollouts of another data set are refused.
    data: caprl_wire::DataFingerprint,
}

struct ImageRefs {
    tokens: Vec<Vec<u32>>,
}

/// Errors the reward worker reports instead of scoring.
#[derive(Debug, thiserror::Error)]
pub enum RewardError {
    #[error("reward `{}` was not prepared by this reward worker (the reward spec it started with did not name it): restart it with the learner's reward.spec", .0.as_str())]
    Unsupported(RewardName),
    #[error("reward `{}` needs a text–image encoder: set [clip] reward to a file from `caprl clip train` (or a Hugging Face CLIP directory)", .0.as_str())]
    NoEncoder(RewardName),
    #[error("reward `disc` needs the discriminator, which rides in the learner's policy snapshot; none is held yet (is the learner configured with the same rewards?)")]
    NoDiscriminator,
    #[error("clip reward: {0}")]
    Clip(#[from] caprl_common::clip::ClipError),
    #[error("fitting the embedding reward: {0}")]
    Embed(#[from] caprl_data::DataError),
    #[error("image row {0} has no references in the training split (task and data set disagree: is every role using the same data set?)")]
    UnknownRow(u32),
}

impl RewardError {
    /// Whether the rollout itself can never be scored (it names an image the data set does not
    /// have): it is rejected. Every other error is the worker's (configuration, a missing
    /// discriminator, a fault inside the encoder), and the rollout is handed back.
    pub fn is_bad_input(&self) -> bool {
        matches!(self, RewardError::UnknownRow(_))
    }
}

impl Rewarder {
    /// A rewarder for `items` with document frequencies `df` (the precomputed
    /// training table for SCST, as self-critical.pytorch does).
    /// `exploration` adds SLE's `diversity` component to sampled captions.
    ///
    /// CIDEr-D is scored with the `<eos>` marker exactly when `df` was counted with it
    /// ([`Rewarder::training_df`] with `eos = true`): the table decides, so the df and the
    /// scored sentences cannot disagree.
    pub fn new(
        data: &Dataset,
        items: &[Item],
        spec: &[(RewardName, f32)],
        df: DocFreq,
        exploration: Option<Distance>,
    ) -> Result<Self, RewardError> {
        let mut interner = Interner::with_words(data.vocab.words());
        let cider_eos = df.get(&[EOS_MARK]) > 0;
        let cider = CiderD::new(df);
        let max_row = items.iter().map(|it| it.row).max().unwrap_or(0);
        let mut refs: Vec<Option<ImageRefs>> = (0..=max_row).map(|_| None).collect();
        for it in items {
            let tokens = interner.intern_refs(&it.refs);
            refs[it.row] = Some(ImageRefs { tokens });
        }
        let embed = match spec.iter().any(|(n, _)| *n == RewardName::Embed) {
            true => Some(EmbedReward::fit(data, items)?),
            false => None,
        };
        Ok(Self {
            spec: spec.to_vec(),
            cider,
            corpus_df: false,
            cider_eos,
            refs,
            exploration,
            embed,
            clip: None,
            vocab_hash: data.vocab.hash().to_string(),
            data: caprl_wire::DataFingerprint(data.fingerprint().to_string()),
        })
    }

    /// Counts CIDEr-D's document frequencies over the references of each rollout's images (a
    /// task's `runtime.images_per_task`), each image once per caption of it, as
    /// self-critical.pytorch's `CiderD(df="corpus")` counts them over each batch it is given,
    /// instead of over the training split (`reward.df = "corpus"`).
    pub fn with_corpus_df(mut self) -> Self {
        self.corpus_df = true;
        self
    }

    /// The CIDEr-D scorer of `rollout`'s reward: the training one, or with `reward.df =
    /// "corpus"` one over the references of the rollout's images.
    fn reward_cider(&self, rollout: &Rollout) -> Result<Option<CiderD>, RewardError> {
        if !self.corpus_df || !self.spec.iter().any(|(n, _)| *n == RewardName::Cider) {
            return Ok(None);
        }
        // self-critical.pytorch gives its scorer one reference set per caption: an image counts
        // once for each of its captions in the rollout.
        let mut captions: std::collections::BTreeMap<u32, u32> = Default::default();
        for s in &rollout.sequences {
            *captions.entry(s.image_row).or_default() += 1;
        }
        let mut refs = Vec::with_capacity(captions.len());
        for &row in captions.keys() {
            let img = self.image(row)?;
            refs.push(
                img.tokens
                    .iter()
                    .map(|r| with_eos(r, self.cider_eos))
                    .collect(),
            );
        }
        let times: Vec<u32> = captions.into_values().collect();
        let df = DocFreq::from_repeated_refs(&refs, |i| times[i]);
        Ok(Some(CiderD::new(df)))
    }

    /// The fingerprint of the data set whose references the rewarder scores against.
    pub fn data(&self) -> &caprl_wire::DataFingerprint {
        &self.data
    }

    /// The hash of the vocabulary the rewarder's data set tokenises with.
    pub fn vocab_hash(&self) -> &str {
        &self.vocab_hash
    }

    /// Adds the encoder behind `clip`, `clip-i2t`, `clip-s` and `disc`.
    pub fn with_clip(mut self, clip: ClipReward) -> Self {
        self.clip = Some(clip);
        self
    }

    /// True when the spec needs a text–image encoder.
    pub fn needs_encoder(&self) -> bool {
        self.spec.iter().any(|(n, _)| n.needs_encoder())
    }

    /// True when the spec has `disc`, which needs the learner's discriminator.
    pub fn needs_discriminator(&self) -> bool {
        self.spec.iter().any(|(n, _)| *n == RewardName::Disc)
    }

    /// The clip rewards' encoder and caches, when configured.
    pub fn clip(&self) -> Option<&ClipReward> {
        self.clip.as_ref()
    }

    /// Document frequencies of the training references of `items`, interned in the
    /// vocabulary's id space (what [`Rewarder::new`] expects). With `eos` every reference
    /// ends with [`EOS_MARK`], as self-critical.pytorch's `prepro_ngrams.py` appends `<eos>`
    /// (`reward.cider_eos`); the df of every other n-gram is the same either way.
    pub fn training_df(data: &Dataset, items: &[Item], eos: bool) -> DocFreq {
        let mut interner = Interner::with_words(data.vocab.words());
        let refs: Vec<Vec<Vec<u32>>> = items
            .iter()
            .map(|it| {
                interner
                    .intern_refs(&it.refs)
                    .iter()
                    .map(|ids| with_eos(ids, eos))
                    .collect()
            })
            .collect();
        let words = (0..interner.len() as u32)
            .map(|id| interner.word(id).unwrap_or_default().to_string())
            .collect();
        DocFreq::from_refs(&refs).with_words(words)
    }

    fn image(&self, row: u32) -> Result<&ImageRefs, RewardError> {
        self.refs
            .get(row as usize)
            .and_then(Option::as_ref)
            .ok_or(RewardError::UnknownRow(row))
    }

    /// The CIDEr-D vectors of `img`'s references (with [`EOS_MARK`] when the rewarder
    /// scores with it).
    fn prepare(&self, cider: &CiderD, img: &ImageRefs) -> PreparedRefs {
        match self.cider_eos {
            true => cider.prepare(
                &img.tokens
                    .iter()
                    .map(|r| with_eos(r, true))
                    .collect::<Vec<_>>(),
            ),
            false => cider.prepare(&img.tokens),
        }
    }

    /// True when CIDEr-D is scored with the `<eos>` marker (see the module docs).
    pub fn cider_eos(&self) -> bool {
        self.cider_eos
    }

    /// The caption CIDEr-D scores: `tokens` up to the first [`EOS`], followed by
    /// [`EOS_MARK`] when the caption finished and the rewarder scores with `<eos>`.
    fn cider_caption(&self, tokens: &[u32]) -> Vec<u32> {
        let mut words = Vec::with_capacity(tokens.len() + 1);
        words.extend(tokens.iter().copied().take_while(|&t| t != EOS));
        if self.cider_eos && words.len() < tokens.len() {
            words.push(EOS_MARK);
        }
        words
    }

    /// The reward vector of one caption (tokens may end with EOS; one cut at `max_len` has
    /// none); `clip` holds its clip-family values when the spec needs them.
    pub fn score_caption(
        &self,
        row: u32,
        tokens: &[u32],
        clip: Option<&ClipParts>,
    ) -> Result<RewardVector, RewardError> {
        self.score_against(&self.cider, row, &mut None, tokens, clip)
    }

    /// [`Rewarder::score_caption`] with CIDEr-D scorer `cider` and `prepared`, image `row`'s
    /// CIDEr-D vectors, made here when the spec needs them and `None`, and kept for the image's
    /// next caption.
    fn score_against(
        &self,
        cider: &CiderD,
        row: u32,
        prepared: &mut Option<PreparedRefs>,
        tokens: &[u32],
        clip: Option<&ClipParts>,
    ) -> Result<RewardVector, RewardError> {
        let img = self.image(row)?;
        let cand: Vec<u32> = tokens.iter().copied().take_while(|&t| t != EOS).collect();
        let mut bleu: Option<[f64; 4]> = None;
        let mut total = 0.0f32;
        let mut components = Vec::with_capacity(self.spec.len());
        for (name, weight) in &self.spec {
            let value = match name {
                RewardName::Cider => {
                    let prepared = prepared.get_or_insert_with(|| self.prepare(cider, img));
                    cider.score(prepared, &self.cider_caption(tokens))
                }
                RewardName::Rouge => caprl_score::rouge_l(&cand, &img.tokens),
                RewardName::Bleu1 | RewardName::Bleu2 | RewardName::Bleu3 | RewardName::Bleu4 => {
                    let b =
                        *bleu.get_or_insert_with(|| caprl_score::bleu_sentence(&cand, &img.tokens));
                    let k = match name {
                        RewardName::Bleu1 => 0,
                        RewardName::Bleu2 => 1,
                        RewardName::Bleu3 => 2,
                        _ => 3,
                    };
                    b[k]
                }
                RewardName::Embed => match &self.embed {
                    Some(e) => e.score(row, tokens).ok_or(RewardError::UnknownRow(row))? as f64,
                    None => return Err(RewardError::Unsupported(*name)),
                },
                RewardName::Clip | RewardName::ClipI2t | RewardName::ClipS | RewardName::Disc => {
                    let c = clip.ok_or(RewardError::NoEncoder(*name))?;
                    (match name {
                        RewardName::Clip => c.bicont,
                        RewardName::ClipI2t => c.i2t,
                        RewardName::ClipS => c.clip_s,
                        _ => c.disc.ok_or(RewardError::NoDiscriminator)?,
                    }) as f64
                }
            } as f32;
            total += weight * value;
            components.push((name.as_str().to_string(), value));
        }
        Ok(RewardVector { total, components })
    }

    /// Scores every sequence of a rollout; sampled captions of one image also get
    /// SLE's exploration term when enabled.
    pub fn score(&self, rollout: Rollout) -> Result<ScoredRollout, RewardError> {
        let clip = match (self.needs_encoder(), &self.clip) {
            (false, _) => vec![None; rollout.sequences.len()],
            (true, Some(c)) => c.score(&rollout)?,
            (true, None) => {
                let name = self
                    .spec
                    .iter()
                    .map(|(n, _)| *n)
                    .find(|n| n.needs_encoder());
                return Err(RewardError::NoEncoder(name.unwrap_or(RewardName::Clip)));
            }
        };
        let corpus = self.reward_cider(&rollout)?;
        let cider = corpus.as_ref().unwrap_or(&self.cider);
        // Each image's references prepared once for all of its captions in the rollout.
        let mut prepared: HashMap<u32, Option<PreparedRefs>> = HashMap::new();
        let mut rewards = Vec::with_capacity(rollout.sequences.len());
        for (s, c) in rollout.sequences.iter().zip(&clip) {
            if self.needs_encoder() && c.is_none() {
                return Err(RewardError::UnknownRow(s.image_row));
            }
            let p = prepared.entry(s.image_row).or_default();
            rewards.push(self.score_against(cider, s.image_row, p, &s.tokens, c.as_ref())?);
        }
        if let Some(kind) = self.exploration {
            let mut groups: std::collections::BTreeMap<u32, Vec<usize>> = Default::default();
            for (i, s) in rollout.sequences.iter().enumerate() {
                if s.kind == DecodeKind::Sample {
                    groups.entry(s.image_row).or_default().push(i);
                }
            }
            for idx in groups.values() {
                let caps: Vec<Vec<u32>> = idx
                    .iter()
                    .map(|&i| {
                        let tokens = &rollout.sequences[i].tokens;
                        match kind {
                            Distance::Cider => self.cider_caption(tokens),
                            Distance::Bleu => {
                                tokens.iter().copied().take_while(|&t| t != EOS).collect()
                            }
                        }
                    })
                    .collect();
                let e = exploration_terms(&caprl_score::pairwise_distances(
                    &caps,
                    kind,
                    Some(&self.cider),
                ));
                for (&i, e) in idx.iter().zip(e) {
                    rewards[i].components.push((config::DIVERSITY.into(), e));
                }
            }
        }
        Ok(ScoredRollout { rollout, rewards })
    }
}

/// SLE's exploration term of each sample (paper 002, eq. 15 and §4):
/// `eⱼ = (2/s)Σₖ(d(ỹⱼ,ỹₖ) − d̄)` with `d̄ = (1/s²)ΣⱼΣₖ d(ỹⱼ,ỹₖ)` over all `s²` pairs.
pub fn exploration_terms(d: &[Vec<f64>]) -> Vec<f32> {
    let s = d.len();
    if s == 0 {
        return Vec::new();
    }
    let d_bar = d.iter().flatten().sum::<f64>() / (s * s) as f64;
    d.iter()
        .map(|row| ((2.0 / s as f64) * row.iter().map(|x| x - d_bar).sum::<f64>()) as f32)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exploration_terms_match_a_hand_example() {
        let d = vec![
            vec![0.0, 0.1, 0.9],
            vec![0.1, 0.0, 0.9],
            vec![0.9, 0.9, 0.0],
        ];
        let e = exploration_terms(&d);
        let d_bar = 3.8 / 9.0;
        assert!((e[0] as f64 - (2.0 / 3.0) * (1.0 - 3.0 * d_bar)).abs() < 1e-6);
        assert!((e[2] as f64 - (2.0 / 3.0) * (1.8 - 3.0 * d_bar)).abs() < 1e-6);
        assert!(e[2] > 0.0 && e[0] < 0.0);
    }
}
