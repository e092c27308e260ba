//! What a reward worker reads of the run config: the reward spec over the training split with
//! its document frequencies (`[reward]`), the text–image encoder when a reward reads it
//! (`[clip]`), and the message limit.

use std::path::Path;
use std::sync::Arc;

use caprl_common::config::{DfSource, RunConfig};
use caprl_data::Dataset;
use caprl_score::Distance;

use crate::{cached_training_df, rewards, ClipReward, RewardError, Rewarder, WorkerConfig};

impl WorkerConfig {
    /// The reward worker `id` of the run `cfg` over `data`. `exploration` is the distance of
    /// the diversity term when the objective wants one (the learner's objective decides).
    pub fn for_run(
        cfg: &RunConfig,
        data: &Dataset,
        id: String,
        exploration: Option<Distance>,
    ) -> Result<WorkerConfig, RewardError> {
        let items = &data.train.items;
        let started = std::time::Instant::now();
        let df = cached_training_df(data, items, cfg.reward.cider_eos);
        tracing::info!(
            "reward worker {id}: document frequencies of {} training images ({} n-grams) in {:.1} s",
            df.num_images(),
            df.len(),
            started.elapsed().as_secs_f64()
        );
        let (spec, python) = (&cfg.reward.spec, &cfg.reward.python);
        let mut rewarder = Rewarder::serving(data, items, spec, df, exploration, python)?;
        if cfg.reward.df == DfSource::Corpus {
            rewarder = rewarder.with_corpus_df();
        }
        if rewards::needs(spec).encoder {
            let path = Path::new(&cfg.clip.reward);
            let encoder = caprl_clip::open_encoder(path, &data.vocab).map_err(|source| {
                RewardError::OpenEncoder {
                    path: path.display().to_string(),
                    source: Box::new(source),
                }
            })?;
            let (tau, neighbours) = (cfg.clip.tau as f32, cfg.clip.neighbours as usize);
            let clip = ClipReward::new(encoder, data, items, tau, neighbours)?;
            rewarder = rewarder.with_encoder_rewards(clip);
        }
        Ok(WorkerConfig {
            id,
            rewarder: Arc::new(rewarder),
            max_message_bytes: cfg.nats.max_message_bytes as usize,
        })
    }
}
