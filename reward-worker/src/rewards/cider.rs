//! `cider`: CIDEr-D against the image's references (Vedantam et al. 2015, with
//! self-critical.pytorch's `<eos>` handling and, with `reward.df = "corpus"`, its per-batch
//! document frequencies).

use std::collections::{BTreeMap, HashMap};

use caprl_score::{with_eos, CiderD, DocFreq, PreparedRefs};

use super::{Batch, Needs, Reward, RewardDef, Setup};
use crate::RewardError;

pub const DEF: RewardDef = RewardDef {
    name: "cider",
    about: "CIDEr-D against the image's references",
    needs: Needs::NOTHING,
    build,
};

fn build(_: &Setup<'_>) -> Result<Box<dyn Reward>, RewardError> {
    Ok(Box::new(Cider))
}

struct Cider;

impl Reward for Cider {
    fn score(&self, batch: &Batch<'_>) -> Result<Vec<f64>, RewardError> {
        let settings = batch.cider;
        let corpus = settings.corpus_df.then(|| corpus_scorer(batch));
        let cider = corpus.as_ref().unwrap_or(&settings.training);
        // Each image's references prepared once for all of its captions in the rollout.
        let mut prepared: HashMap<u32, PreparedRefs> = HashMap::new();
        let values = batch
            .captions
            .iter()
            .map(|c| {
                let refs = prepared.entry(c.row).or_insert_with(|| match settings.eos {
                    true => {
                        cider.prepare(&c.refs.iter().map(|r| with_eos(r, true)).collect::<Vec<_>>())
                    }
                    false => cider.prepare(c.refs),
                });
                cider.score(refs, &settings.sentence(c))
            })
            .collect();
        Ok(values)
    }
}

/// CIDEr-D with document frequencies counted over the references of the batch's images, each
/// image once per caption of it, as self-critical.pytorch's `CiderD(df="corpus")` counts them
/// over the one reference set per caption its scorer is given.
fn corpus_scorer(batch: &Batch<'_>) -> CiderD {
    let mut captions: BTreeMap<u32, (u32, &[Vec<u32>])> = BTreeMap::new();
    for c in &batch.captions {
        captions.entry(c.row).or_insert((0, c.refs)).0 += 1;
    }
    let eos = batch.cider.eos;
    let refs: Vec<Vec<Vec<u32>>> = captions
        .values()
        .map(|(_, refs)| refs.iter().map(|r| with_eos(r, eos)).collect())
        .collect();
    let times: Vec<u32> = captions.values().map(|(n, _)| *n).collect();
    CiderD::new(DocFreq::from_repeated_refs(&refs, |i| times[i]))
}
