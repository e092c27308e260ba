//! One step of beam search as its groups see it: the step's log-probabilities of every live
//! beam, and each group's best proposals (trigram blocking, bad endings and the diversity
//! penalty applied).

use std::cmp::Ordering;

use super::Proposals;
use crate::model::decoding::log_softmax::host_log_sum_exp;
use crate::model::device::PARALLEL_MIN_LOGITS;
use crate::model::tokens::EOS;

/// One step's log-probabilities `log π(w | y)` of every live beam, read from its logits
/// `[rows, v]` and each row's log-sum-exp: the rows are never copied or widened to f64 (at a
/// 10,000-word vocabulary, building them was a large share of a beam step).
pub(super) struct StepLogProbs<'a> {
    logits: &'a [f32],
    pub(super) v: usize,
    lse: Vec<f64>,
    /// Rows where bad endings forbid EOS (its log-prob is −∞).
    no_eos: Vec<bool>,
}

impl<'a> StepLogProbs<'a> {
    /// The log-sum-exp of every row, on rayon's threads when there are several and enough rows
    /// (each row is computed the same way either way); `no_eos` per row.
    pub(super) fn new(logits: &'a [f32], v: usize, no_eos: Vec<bool>) -> Self {
        use rayon::prelude::*;
        let lse: Vec<f64> =
            if rayon::current_num_threads() > 1 && logits.len() >= PARALLEL_MIN_LOGITS {
                logits
                    .par_chunks_exact(v)
                    .map(|l| host_log_sum_exp(l, 1.0))
                    .collect()
            } else {
                logits
                    .chunks_exact(v)
                    .map(|l| host_log_sum_exp(l, 1.0))
                    .collect()
            };
        StepLogProbs {
            logits,
            v,
            lse,
            no_eos,
        }
    }

    fn row(&self, r: usize) -> &'a [f32] {
        &self.logits[r * self.v..(r + 1) * self.v]
    }

    /// `log π(w)` of row `r`.
    pub(super) fn lp(&self, r: usize, w: u32) -> f64 {
        if w == EOS && self.no_eos[r] {
            return f64::NEG_INFINITY;
        }
        self.row(r)[w as usize] as f64 - self.lse[r]
    }
}

/// Fills `p.cand` with its best `2k` proposals `(score, beam, word)`: every word of every beam
/// but trigram repeats and forbidden ones, scored by the beam's penalised `log p` plus the
/// word's `log π` less its diversity `penalty`. Ranked by score, then beam, then word.
///
/// Each beam keeps its own best `2k` in a small sorted list while it reads its row once (the
/// best `2k` of the group are among them); the group's are then chosen from those `k · 2k`.
pub(super) fn propose(
    p: &mut Proposals,
    lps: &StepLogProbs,
    k: usize,
    block_trigrams: bool,
    penalty: Option<&[f64]>,
) {
    let m = 2 * k;
    let mut cand: Vec<(f64, usize, u32)> = Vec::with_capacity(p.cur.len() * m);
    let mut best: Vec<(f64, usize, u32)> = Vec::with_capacity(m + 1);
    for (j, b) in p.cur.iter().enumerate() {
        let r = p.row0 + j;
        let blocked = if block_trigrams {
            b.blocked()
        } else {
            Vec::new()
        };
        let (row, lse) = (lps.row(r), lps.lse[r]);
        best.clear();
        // Once the list is full, a logit below `floor` cannot make the list (a bound a little
        // under the exact one, so that only the f64 test below decides); words are skipped on
        // an f32 comparison. Diversity penalties differ per word: no bound then.
        let mut floor = f32::NEG_INFINITY;
        for (w, &x) in row.iter().enumerate() {
            if x < floor {
                continue;
            }
            let l = x as f64 - lse;
            let score = match penalty {
                Some(d) => b.penalised + l - d[w],
                None => b.penalised + l,
            };
            // Words are read in order, so a tie with the list's last entry ranks below it.
            if best.len() == m && score.partial_cmp(&best[m - 1].0) != Some(Ordering::Greater) {
                continue;
            }
            let w = w as u32;
            if l <= -1e8 || (w == EOS && lps.no_eos[r]) || blocked.contains(&w) {
                continue;
            }
            let at = best.partition_point(|c| c.0 >= score);
            best.insert(at, (score, j, w));
            best.truncate(m);
            if best.len() == m && penalty.is_none() {
                floor = logit_floor(best[m - 1].0 - b.penalised + lse);
            }
        }
        cand.extend_from_slice(&best);
    }
    if cand.len() > m {
        cand.select_nth_unstable_by(m - 1, ranked);
        cand.truncate(m);
    }
    p.cand = cand;
}

/// An f32 at or below every logit `x` with `x as f64 > bound` (rounding margins included).
fn logit_floor(bound: f64) -> f32 {
    let bound = bound - 1e-6 * (1.0 + bound.abs());
    let f = bound as f32;
    if f as f64 > bound {
        f.next_down()
    } else {
        f
    }
}

/// Higher score first, then lower beam, then lower word.
fn ranked(a: &(f64, usize, u32), b: &(f64, usize, u32)) -> Ordering {
    b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2))
}
