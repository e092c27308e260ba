//! `rouge`: ROUGE-L against the image's references (Lin 2004, pycocoevalcap's β = 1.2).

use super::{Batch, Needs, Reward, RewardDef, Setup};
use crate::RewardError;

pub const DEF: RewardDef = RewardDef {
    name: "rouge",
    about: "ROUGE-L against the image's references",
    needs: Needs::NOTHING,
    build,
};

fn build(_: &Setup<'_>) -> Result<Box<dyn Reward>, RewardError> {
    Ok(Box::new(Rouge))
}

struct Rouge;

impl Reward for Rouge {
    fn score(&self, batch: &Batch<'_>) -> Result<Vec<f64>, RewardError> {
        Ok(batch
            .captions
            .iter()
            .map(|c| caprl_score::rouge_l(c.words(), c.refs))
            .collect())
    }
}
