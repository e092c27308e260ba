//! `diversity`: SLE's exploration term (paper 002, eq. 15 and §4), the reward component objective
//! `sle` adds to every sampled caption. It is not a `reward.spec` term: each sample is compared
//! with the other samples of its image (`reward.distance`), so greedy, beam and ground-truth
//! captions get none.

use std::collections::BTreeMap;

use caprl_score::Distance;
use caprl_wire::DecodeKind;

use super::Batch;

/// The exploration term under distance `.0`.
pub struct Diversity(pub Distance);

impl Diversity {
    /// The term of each caption of `batch`, `None` for those not sampled.
    pub fn terms(&self, batch: &Batch<'_>) -> Vec<Option<f32>> {
        let mut groups: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (i, c) in batch.captions.iter().enumerate() {
            if c.kind == DecodeKind::Sample {
                groups.entry(c.row).or_default().push(i);
            }
        }
        let mut terms = vec![None; batch.captions.len()];
        for idx in groups.values() {
            let caps: Vec<Vec<u32>> = idx
                .iter()
                .map(|&i| {
                    let caption = &batch.captions[i];
                    match self.0 {
                        Distance::Cider => batch.cider.sentence(caption),
                        Distance::Bleu => caption.words().to_vec(),
                    }
                })
                .collect();
            let distances =
                caprl_score::pairwise_distances(&caps, self.0, Some(&batch.cider.training));
            for (&i, e) in idx.iter().zip(exploration_terms(&distances)) {
                terms[i] = Some(e);
            }
        }
        terms
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
