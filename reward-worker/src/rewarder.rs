//! Reward computation: a weighted sum of the spec's rewards (each from the table in
//! [`crate::rewards`]) per caption, plus SLE's exploration term.
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
//! [`EOS`](caprl_model::model::EOS) (a caption cut at `max_len` does not;
//! [`CiderSettings::sentence`]). BLEU and ROUGE-L rewards stay plain. SLE's
//! CIDEr distance follows the CIDEr reward, as self-critical.pytorch's self-CIDEr does
//! (its `get_self_cider_scores` uses the same `array_to_str`): both samples carry the marker
//! iff they finished.

use caprl_common::config::{self, RewardSpec};
use caprl_data::{Dataset, Item};
use caprl_score::{with_eos, CiderD, Distance, DocFreq, Interner, EOS_MARK};
use caprl_wire::{RewardVector, Rollout, ScoredRollout};

use crate::clip_reward::ClipReward;
use crate::rewards::python::{PythonReward, PythonServer, PREFIX};
use crate::rewards::{self, Batch, Caption, CiderSettings, Diversity, Named, Needs, Reward, Setup};

/// Scores captions of the images of one split.
pub struct Rewarder {
    /// The spec's rewards with their weights, in its order.
    terms: Vec<Term>,
    /// What the terms read besides the captions, together.
    needs: Needs,
    /// How CIDEr-D is scored (the `cider` reward and SLE's CIDEr distance).
    cider: CiderSettings,
    /// Indexed by feature row; `None` for rows outside the split.
    refs: Vec<Option<Vec<Vec<u32>>>>,
    exploration: Option<Distance>,
    clip: Option<ClipReward>,
    /// The data set's vocabulary: a snapshot's discriminator must have been trained on it.
    vocab_hash: String,
    /// The data set's fingerprint: rollouts of another data set are refused.
    data: caprl_wire::DataFingerprint,
}

struct Term {
    /// The name in the spec (and in the run log).
    name: String,
    weight: f32,
    reward: Box<dyn Reward>,
}

/// Errors the reward worker reports instead of scoring.
#[derive(Debug, thiserror::Error)]
pub enum RewardError {
    #[error(transparent)]
    Spec(#[from] config::ConfigError),
    #[error("reward `{0}` needs a text–image encoder: set [clip] reward to a file from `caprl clip train` (or a Hugging Face CLIP directory)")]
    NoEncoder(&'static str),
    #[error("reward `disc` needs the discriminator, which rides in the learner's policy snapshot; none is held yet (is the learner configured with the same rewards?)")]
    NoDiscriminator,
    #[error("opening the reward encoder [clip] reward = {path}")]
    OpenEncoder {
        path: String,
        #[source]
        source: Box<caprl_clip::ClipError>,
    },
    #[error("clip reward: {0}")]
    Clip(#[from] caprl_clip::ClipError),
    #[error("fitting the embedding reward: {0}")]
    Embed(#[from] caprl_data::DataError),
    #[error("image row {0} has no references in the training split (task and data set disagree: is every role using the same data set?)")]
    UnknownRow(u32),
    #[error("the Python rewards of reward.python = {module:?} cannot be served: {message}")]
    PythonStart { module: String, message: String },
    #[error("reward `{function}` of {module} failed on the rollout of {task}: {message}\nthe reward worker stops: fix the function and start the run again (nothing is lost: the rollout stays queued)")]
    Python {
        function: String,
        module: String,
        task: String,
        message: String,
    },
    #[error("reward `{function}` of {module}, on the rollout of {task}: {message}; the rollout is handed back and a new Python process serves the next one")]
    PythonGone {
        function: String,
        module: String,
        task: String,
        message: String,
    },
}

impl RewardError {
    /// Whether the rollout itself can never be scored (it names an image the data set does not
    /// have): it is rejected. Every other error is the worker's (configuration, a missing
    /// discriminator, a fault inside the encoder), and the rollout is handed back.
    pub fn is_bad_input(&self) -> bool {
        matches!(self, RewardError::UnknownRow(_))
    }

    /// Whether the reward itself is broken, alike for every rollout (a Python module that does
    /// not load, a function that raises or returns what is not one finite number per caption):
    /// the worker stops with it rather than hand the rollout back forever, and no restart helps.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            RewardError::Python { .. } | RewardError::PythonStart { .. }
        )
    }
}

impl Rewarder {
    /// A rewarder for `items` scoring `spec`'s rewards, with document frequencies `df` (the
    /// precomputed training table for SCST, as self-critical.pytorch does).
    /// `exploration` adds SLE's `diversity` component to sampled captions.
    ///
    /// CIDEr-D is scored with the `<eos>` marker exactly when `df` was counted with it
    /// ([`Rewarder::training_df`] with `eos = true`): the table decides, so the df and the
    /// scored sentences cannot disagree.
    pub fn new(
        data: &Dataset,
        items: &[Item],
        spec: &RewardSpec,
        df: DocFreq,
        exploration: Option<Distance>,
    ) -> Result<Self, RewardError> {
        Rewarder::serving(data, items, spec, df, exploration, "")
    }

    /// [`Rewarder::new`], with the `py:<function>` terms of `spec` served from `python` (the
    /// module of `reward.python`) by a child process started here.
    pub fn serving(
        data: &Dataset,
        items: &[Item],
        spec: &RewardSpec,
        df: DocFreq,
        exploration: Option<Distance>,
        python: &str,
    ) -> Result<Self, RewardError> {
        let mut interner = Interner::with_words(data.vocab.words());
        let eos = df.get(&[EOS_MARK]) > 0;
        let max_row = items.iter().map(|it| it.row).max().unwrap_or(0);
        let mut refs: Vec<Option<Vec<Vec<u32>>>> = vec![None; max_row + 1];
        for it in items {
            refs[it.row] = Some(interner.intern_refs(&it.refs));
        }
        let setup = Setup { data, items };
        let named = rewards::resolve(spec)?;
        let functions: Vec<String> = named
            .iter()
            .filter_map(|n| match n {
                Named::Python(f) => Some(f.to_string()),
                Named::Builtin(_) => None,
            })
            .collect();
        let server = match (functions.is_empty(), python.is_empty()) {
            (true, _) => None,
            (false, true) => {
                return Err(RewardError::PythonStart {
                    module: String::new(),
                    message: format!(
                        "reward.spec names {} and reward.python names no module",
                        functions
                            .iter()
                            .map(|f| format!("{PREFIX}{f}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                })
            }
            (false, false) => Some(PythonServer::start(python, functions, data, items)?),
        };
        let mut terms = Vec::with_capacity(named.len());
        for (named, (name, weight)) in named.iter().zip(spec.terms()) {
            let reward: Box<dyn Reward> = match (named, &server) {
                (Named::Builtin(def), _) => (def.build)(&setup)?,
                (Named::Python(function), Some(server)) => Box::new(PythonReward {
                    server: std::sync::Arc::clone(server),
                    function: function.to_string(),
                }),
                (Named::Python(_), None) => unreachable!("a Python term starts the server"),
            };
            terms.push(Term {
                name: name.to_string(),
                weight: *weight,
                reward,
            });
        }
        Ok(Self {
            terms,
            needs: rewards::needs(spec),
            cider: CiderSettings {
                training: CiderD::new(df),
                eos,
                corpus_df: false,
            },
            refs,
            exploration,
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
        self.cider.corpus_df = true;
        self
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
    pub fn with_encoder_rewards(mut self, clip: ClipReward) -> Self {
        self.clip = Some(clip);
        self
    }

    /// True when the spec has `disc`, which needs the learner's discriminator.
    pub fn needs_discriminator(&self) -> bool {
        self.needs.discriminator
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

    fn image(&self, row: u32) -> Result<&[Vec<u32>], RewardError> {
        self.refs
            .get(row as usize)
            .and_then(Option::as_deref)
            .ok_or(RewardError::UnknownRow(row))
    }

    /// True when CIDEr-D is scored with the `<eos>` marker (see the module docs).
    pub fn cider_eos(&self) -> bool {
        self.cider.eos
    }

    /// The reward vector of one caption of image `row` (tokens may end with EOS; one cut at
    /// `max_len` has none); `clip` holds its clip-family values when the spec needs them.
    #[cfg(any(test, feature = "test-support"))]
    pub fn score_caption(
        &self,
        row: u32,
        tokens: &[u32],
        clip: Option<&crate::ClipParts>,
    ) -> Result<RewardVector, RewardError> {
        let caption = Caption {
            row,
            kind: caprl_wire::DecodeKind::Greedy,
            tokens,
            refs: self.image(row)?,
            clip,
        };
        let mut rewards = self.score_batch(&Batch {
            task: "-".to_string(),
            captions: vec![caption],
            cider: &self.cider,
        })?;
        Ok(rewards.remove(0))
    }

    /// The reward vector of every caption of `batch`: each term scores the whole batch once.
    fn score_batch(&self, batch: &Batch<'_>) -> Result<Vec<RewardVector>, RewardError> {
        let mut rewards: Vec<RewardVector> = (0..batch.captions.len())
            .map(|_| RewardVector {
                total: 0.0,
                components: Vec::with_capacity(self.terms.len()),
            })
            .collect();
        for term in &self.terms {
            let values = term.reward.score(batch)?;
            assert_eq!(values.len(), rewards.len(), "reward `{}`", term.name);
            for (reward, value) in rewards.iter_mut().zip(values) {
                let value = value as f32;
                reward.total += term.weight * value;
                reward.components.push((term.name.clone(), value));
            }
        }
        Ok(rewards)
    }

    /// Scores every sequence of a rollout; sampled captions of one image also get
    /// SLE's exploration term when enabled.
    pub fn score(&self, rollout: Rollout) -> Result<ScoredRollout, RewardError> {
        let clip = match (self.needs.encoder, &self.clip) {
            (false, _) => vec![None; rollout.sequences.len()],
            (true, Some(c)) => c.score(&rollout)?,
            (true, None) => {
                let name = self
                    .terms
                    .iter()
                    .find_map(|t| rewards::find(&t.name).filter(|d| d.needs.encoder))
                    .map_or("clip", |d| d.name);
                return Err(RewardError::NoEncoder(name));
            }
        };
        let mut captions = Vec::with_capacity(rollout.sequences.len());
        for (s, c) in rollout.sequences.iter().zip(&clip) {
            if self.needs.encoder && c.is_none() {
                return Err(RewardError::UnknownRow(s.image_row));
            }
            captions.push(Caption {
                row: s.image_row,
                kind: s.kind,
                tokens: &s.tokens,
                refs: self.image(s.image_row)?,
                clip: c.as_ref(),
            });
        }
        let batch = Batch {
            task: rollout.task_id.to_string(),
            captions,
            cider: &self.cider,
        };
        let mut rewards = self.score_batch(&batch)?;
        if let Some(distance) = self.exploration {
            let terms = Diversity(distance).terms(&batch);
            for (reward, term) in rewards.iter_mut().zip(terms) {
                if let Some(e) = term {
                    reward.components.push((config::DIVERSITY.into(), e));
                }
            }
        }
        Ok(ScoredRollout { rollout, rewards })
    }
}
