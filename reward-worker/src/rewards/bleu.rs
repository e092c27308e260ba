//! `bleu1` … `bleu4`: sentence BLEU-n against the image's references (Papineni et al. 2002, with
//! pycocoevalcap's closest-length brevity penalty).

use super::{Batch, Needs, Reward, RewardDef, Setup};
use crate::RewardError;

const fn def(name: &'static str, about: &'static str, build: Build) -> RewardDef {
    RewardDef {
        name,
        about,
        needs: Needs::NOTHING,
        build,
    }
}

type Build = fn(&Setup<'_>) -> Result<Box<dyn Reward>, RewardError>;

pub const DEFS: [RewardDef; 4] = [
    def("bleu1", "sentence BLEU-1", |_| Ok(Box::new(Bleu(1)))),
    def("bleu2", "sentence BLEU-2", |_| Ok(Box::new(Bleu(2)))),
    def("bleu3", "sentence BLEU-3", |_| Ok(Box::new(Bleu(3)))),
    def("bleu4", "sentence BLEU-4", |_| Ok(Box::new(Bleu(4)))),
];

/// BLEU up to n-grams of this order.
struct Bleu(usize);

impl Reward for Bleu {
    fn score(&self, batch: &Batch<'_>) -> Result<Vec<f64>, RewardError> {
        Ok(batch
            .captions
            .iter()
            .map(|c| caprl_score::bleu_sentence(c.words(), c.refs)[self.0 - 1])
            .collect())
    }
}
