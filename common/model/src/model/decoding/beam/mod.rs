//! Beam search of width `b`, batched over images; finished inputs leave the batch.
//!
//! Each step every live beam `y` of an input proposes `y + w` with score
//! `log p(y) + log π(w | y, I)`; the best `b` non-EOS proposals stay live, EOS proposals ranked
//! before them become hypotheses. An input stops once it has `b` hypotheses and (without length
//! normalisation) no live beam can still beat the worst of them. At the length limit each live
//! beam ends with EOS if EOS is its best next token, else as it is.
//! Length normalisation scores a hypothesis by `log p(y) / |y|`; trigram blocking forbids a
//! token that would repeat a trigram already in the beam; bad endings forbid EOS after the words
//! they list. With [`Lookahead`] the ranking mixes in the value head's estimate of each
//! proposal's state.
//!
//! Diverse beam search (Vijayakumar et al. 2016; self-critical.pytorch's `beam_search` with
//! `group_size` and `diversity_lambda`) splits the beam into `G` groups of `b / G`, each a beam
//! search as above with its own hypotheses. At every step the groups choose in turn, and group
//! `g` ranks by `log p(y) − λ · Σ_t h_t(w_t)`, the Hamming diversity penalty of `diversity.rs`
//! (`h_t(w)`: how often groups `0..g` chose `w` at step `t`). One group is plain beam search.

mod proposals;

use self::proposals::{propose, StepLogProbs};
use super::bad_endings::BadEndings;
use super::decoder::Decoder;
use super::diversity::hamming_penalty;
use super::greedy::argmax;
use crate::model::captioner::Captioner;
use crate::model::device::on_rayon;
use crate::model::error::{ModelError, Result};
use crate::model::inputs::Inputs;
use crate::model::seam::DecodeState;
use crate::model::tokens::{BOS, EOS};
use crate::model::value_head::ValueHead;

/// Beam search settings (`[decode]` beam, length_norm, block_trigrams, beam_groups,
/// diversity_lambda, remove_bad_endings).
#[derive(Debug, Clone, PartialEq)]
pub struct BeamOptions {
    pub width: usize,
    pub max_len: usize,
    pub length_norm: bool,
    pub block_trigrams: bool,
    /// Groups of diverse beam search, `G ≥ 1` dividing `width`; 1 = plain beam search.
    pub groups: usize,
    /// Weight `λ ≥ 0` of the diversity penalty between groups.
    pub diversity_lambda: f32,
    /// Words after which EOS may not be proposed.
    pub bad_endings: BadEndings,
}

impl BeamOptions {
    /// Plain beam search of `width` beams: one group, scores not length-normalised, no blocked
    /// trigrams, no bad endings.
    pub fn plain(width: usize, max_len: usize) -> Self {
        Self {
            width,
            max_len,
            length_norm: false,
            block_trigrams: false,
            groups: 1,
            diversity_lambda: 0.0,
            bad_endings: BadEndings::none(),
        }
    }
}

/// One finished beam.
#[derive(Debug, Clone, PartialEq)]
pub struct Hypothesis {
    /// Tokens without BOS; EOS included when emitted.
    pub tokens: Vec<u32>,
    /// `log π(w_t | w_<t, I)` of each token.
    pub logprobs: Vec<f32>,
    /// `log p(y | I) = Σ_t log π(w_t)`.
    pub logp: f32,
    /// The ranking score: `logp`, or `logp / |y|` with length normalisation (no diversity
    /// penalty).
    pub score: f32,
}

#[derive(Clone)]
struct Beam {
    tokens: Vec<u32>,
    logprobs: Vec<f32>,
    logp: f64,
    /// `logp` less the diversity penalties of its words: what its group ranks it by.
    penalised: f64,
}

/// A hypothesis with the score its group ranked it by (its penalised `logp`).
struct Finished {
    rank: f32,
    hyp: Hypothesis,
}

impl Beam {
    /// The beam every group starts from: no words yet.
    const EMPTY: Beam = Beam {
        tokens: Vec::new(),
        logprobs: Vec::new(),
        logp: 0.0,
        penalised: 0.0,
    };

    fn finish(&self, length_norm: bool, lookahead: Option<&Lookahead>, value: f32) -> Finished {
        let n = self.tokens.len().max(1) as f64;
        let score = |logp: f64| {
            let base = if length_norm { logp / n } else { logp };
            match lookahead {
                Some(la) => la.lambda as f64 * base + (1.0 - la.lambda as f64) * value as f64,
                None => base,
            }
        };
        Finished {
            rank: score(self.penalised) as f32,
            hyp: Hypothesis {
                tokens: self.tokens.clone(),
                logprobs: self.logprobs.clone(),
                logp: self.logp as f32,
                score: score(self.logp) as f32,
            },
        }
    }

    /// This beam followed by `w` of log-prob `lp`, its ranking score lowered by `penalty`.
    fn extend(&self, w: u32, lp: f64, penalty: f64) -> Beam {
        let mut b = self.clone();
        b.tokens.push(w);
        b.logprobs.push(lp as f32);
        b.logp += lp;
        b.penalised += lp - penalty;
        b
    }

    /// Tokens that would repeat a trigram of this beam.
    fn blocked(&self) -> Vec<u32> {
        let t = &self.tokens;
        let n = t.len();
        if n < 2 {
            return Vec::new();
        }
        let (a, b) = (t[n - 2], t[n - 1]);
        t.windows(3)
            .filter(|w| w[0] == a && w[1] == b)
            .map(|w| w[2])
            .collect()
    }
}

/// Lookahead inference (paper 001, Ren et al. 2017): proposals are ranked by
/// `λ·log p(y + w) + (1 − λ)·v(s_{y+w})`, where `v` is the value head on the decoder state after
/// reading `w`. The value is computed for the `2b` proposals of each input that the policy ranks
/// best (one extra decoder step on them), not for the whole vocabulary.
pub struct Lookahead<'a> {
    pub value: &'a ValueHead,
    /// `λ` in [0, 1]; 1 is plain beam search.
    pub lambda: f32,
}

/// One group's proposals at a step: `(score, beam, word)`, the best `2k` by score.
struct Proposals {
    /// Index of the group among all inputs' groups (`input · G + group`).
    slot: usize,
    /// The step's row of its first beam.
    row0: usize,
    cur: Vec<Beam>,
    cand: Vec<(f64, usize, u32)>,
}

/// What a group chose at a step.
struct Choice {
    next: Vec<Beam>,
    parents: Vec<u32>,
    live: bool,
}

/// How the beams still live when a decode reaches `max_len` finish: each ends with EOS if that
/// is its most likely next word, and the state after its last word values it (lookahead).
struct AtLimit<'a, 'l> {
    /// The step's row of the group's first beam.
    row0: usize,
    lps: &'a StepLogProbs<'a>,
    length_norm: bool,
    lookahead: Option<&'a Lookahead<'l>>,
}

impl AtLimit<'_, '_> {
    fn finish<'s>(&self, cur: &[Beam], live: &(dyn DecodeState<'s> + 's)) -> Result<Vec<Finished>> {
        let values = match self.lookahead {
            Some(la) => {
                let h = live.decoder_state()?.narrow(0, self.row0, cur.len())?;
                la.value.forward(&h)?.to_vec1::<f32>()?
            }
            None => vec![0.0; cur.len()],
        };
        let v = self.lps.v;
        let mut out = Vec::with_capacity(cur.len());
        for (j, (b, value)) in cur.iter().zip(values).enumerate() {
            let r = self.row0 + j;
            let f: Vec<f32> = (0..v as u32).map(|w| self.lps.lp(r, w) as f32).collect();
            let hyp = if argmax(&f) == EOS as usize {
                b.extend(EOS, self.lps.lp(r, EOS), 0.0)
            } else {
                b.clone()
            };
            out.push(hyp.finish(self.length_norm, self.lookahead, value));
        }
        Ok(out)
    }
}

/// What every group's choice at one step of beam search reads.
struct GroupStep<'s, 'a, 'l> {
    opts: &'s BeamOptions,
    lps: &'s StepLogProbs<'a>,
    /// Beams per group.
    k: usize,
    lookahead: Option<&'s Lookahead<'l>>,
    /// Inputs in the batch.
    inputs: usize,
}

/// How a group keeps its `k` best proposals of a step.
struct ChoiceRule<'a, 'l> {
    k: usize,
    length_norm: bool,
    lookahead: Option<&'a Lookahead<'l>>,
    lps: &'a StepLogProbs<'a>,
    /// The diversity penalty of each word for this group (diverse beam search).
    penalty: Option<&'a [f64]>,
}

impl ChoiceRule<'_, '_> {
    /// Takes `ranked` proposals (ranking score, beam, word, value) best first until `k` beams
    /// go on; those that end in EOS join `finished`, every chosen word joins `chosen` (the
    /// input's words of this step, for the next groups' penalty). The group stays live unless
    /// nothing goes on or its `k` finished hypotheses cannot be beaten.
    fn choose(
        &self,
        p: &Proposals,
        mut ranked: Vec<(f64, usize, u32, f32)>,
        chosen: &mut Vec<u32>,
        finished: &mut Vec<Finished>,
    ) -> Choice {
        let k = self.k;
        ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
        let mut next = Vec::with_capacity(k);
        let mut parents = Vec::with_capacity(k);
        for &(_, j, w, value) in &ranked {
            if next.len() == k {
                break;
            }
            let penalty = self.penalty.map_or(0.0, |d| d[w as usize]);
            let nb = p.cur[j].extend(w, self.lps.lp(p.row0 + j, w), penalty);
            chosen.push(w);
            if w == EOS {
                finished.push(nb.finish(self.length_norm, self.lookahead, value));
            } else {
                parents.push((p.row0 + j) as u32);
                next.push(nb);
            }
        }
        finished.sort_by(|a, b| b.rank.total_cmp(&a.rank));
        let enough = finished.len() >= k;
        // Scores only fall as beams grow, unless normalised or mixed with a value.
        let monotone = !self.length_norm && self.lookahead.is_none();
        let cannot_improve = monotone
            && next
                .iter()
                .map(|b| b.penalised)
                .fold(f64::NEG_INFINITY, f64::max)
                <= finished.get(k - 1).map_or(f64::INFINITY, |h| h.rank as f64);
        let live = !(next.is_empty() || (enough && (!monotone || cannot_improve)));
        Choice {
            next,
            parents,
            live,
        }
    }
}

/// Proposals `(logp, beam, word)` with their ranking score and value, `(score, beam, word,
/// value)`: with lookahead `λ·logp + (1−λ)·v` and the value the next of `values` (taken from
/// `at` on), else `logp` and 0.
fn with_rank(
    cand: Vec<(f64, usize, u32)>,
    values: Option<&[f32]>,
    at: &mut usize,
    lookahead: Option<&Lookahead>,
) -> Vec<(f64, usize, u32, f32)> {
    cand.into_iter()
        .map(|(logp, j, w)| match (values, lookahead) {
            (Some(vals), Some(la)) => {
                let value = vals[*at];
                *at += 1;
                let lambda = la.lambda as f64;
                (lambda * logp + (1.0 - lambda) * value as f64, j, w, value)
            }
            _ => (logp, j, w, 0.0),
        })
        .collect()
}

/// Each input's hypotheses: the `k` best of each of its `groups` (by the rank its group gave
/// them), then all of them best first by score.
fn best_of_groups(finished: Vec<Vec<Finished>>, groups: usize, k: usize) -> Vec<Vec<Hypothesis>> {
    let mut out = Vec::with_capacity(finished.len() / groups);
    let mut slots = finished.into_iter().peekable();
    while slots.peek().is_some() {
        let mut hyps: Vec<Hypothesis> = Vec::with_capacity(groups * k);
        for mut f in slots.by_ref().take(groups) {
            f.sort_by(|a, b| b.rank.total_cmp(&a.rank));
            f.truncate(k);
            hyps.extend(f.into_iter().map(|f| f.hyp));
        }
        hyps.sort_by(|a, b| b.score.total_cmp(&a.score));
        out.push(hyps);
    }
    out
}

impl Decoder {
    /// The `width` best hypotheses of each image, best first by [`Hypothesis::score`]; with
    /// `groups > 1`, the `width / groups` best of each group (by its penalised score).
    pub fn beam(&self, x: &Inputs, opts: &BeamOptions) -> Result<Vec<Vec<Hypothesis>>> {
        self.beam_search(x, opts, None)
    }

    /// Beam search with lookahead inference: hypotheses ranked (and their `score` set) by
    /// `λ·log p + (1 − λ)·v`; see [`Lookahead`].
    pub fn beam_lookahead(
        &self,
        x: &Inputs,
        opts: &BeamOptions,
        lookahead: &Lookahead,
    ) -> Result<Vec<Vec<Hypothesis>>> {
        if !(0.0..=1.0).contains(&lookahead.lambda) {
            return Err(ModelError::Input(format!(
                "decode.lookahead_lambda = {}: must be in [0, 1]",
                lookahead.lambda
            )));
        }
        self.beam_search(x, opts, Some(lookahead))
    }

    fn beam_search(
        &self,
        x: &Inputs,
        opts: &BeamOptions,
        lookahead: Option<&Lookahead>,
    ) -> Result<Vec<Vec<Hypothesis>>> {
        on_rayon(&self.device, || self.beam_search_here(x, opts, lookahead))
    }

    fn beam_search_here(
        &self,
        x: &Inputs,
        opts: &BeamOptions,
        lookahead: Option<&Lookahead>,
    ) -> Result<Vec<Vec<Hypothesis>>> {
        check_options(opts)?;
        let groups = opts.groups;
        let k = opts.width / groups;
        let n = x.batch_size()?;
        let v = self.cfg.vocab_size;
        let mut live_state = self.steps.start(x)?;
        if groups > 1 {
            // Every group of an input starts from the input's own state.
            let rows: Vec<u32> = (0..n as u32)
                .flat_map(|i| std::iter::repeat_n(i, groups))
                .collect();
            live_state = live_state.select(&rows)?;
        }
        // Live beams of each group (slot `input · G + group`), in the order of their rows.
        let mut beams: Vec<Vec<Beam>> = vec![vec![Beam::EMPTY]; n * groups];
        let mut finished: Vec<Vec<Finished>> = (0..n * groups).map(|_| Vec::new()).collect();
        let mut active: Vec<usize> = (0..n * groups).collect();
        for t in 0..=opts.max_len {
            let inputs: Vec<u32> = active
                .iter()
                .flat_map(|&s| beams[s].iter().map(|b| *b.tokens.last().unwrap_or(&BOS)))
                .collect();
            let logits = self.step_logits(&mut *live_state, &inputs)?;
            let no_eos = active
                .iter()
                .flat_map(|&s| &beams[s])
                .map(|b| opts.bad_endings.forbids_eos_after(b.tokens.last().copied()))
                .collect();
            let lps = StepLogProbs::new(&logits, v, no_eos);
            let mut row = 0;
            let mut all: Vec<Proposals> = Vec::with_capacity(active.len());
            for &s in &active {
                let cur = std::mem::take(&mut beams[s]);
                if t == opts.max_len {
                    let at_limit = AtLimit {
                        row0: row,
                        lps: &lps,
                        length_norm: opts.length_norm,
                        lookahead,
                    };
                    finished[s].extend(at_limit.finish(&cur, &*live_state)?);
                    row += cur.len();
                    continue;
                }
                let rows_here = cur.len();
                all.push(Proposals {
                    slot: s,
                    row0: row,
                    cur,
                    cand: Vec::new(),
                });
                row += rows_here;
            }
            let step = GroupStep {
                opts,
                lps: &lps,
                k,
                lookahead,
                inputs: n,
            };
            let choices = self.choose_by_group(&step, &mut all, &*live_state, &mut finished)?;
            let mut parents: Vec<u32> = Vec::new();
            let mut still: Vec<usize> = Vec::new();
            for (p, c) in all.iter().zip(choices) {
                let Some(c) = c.filter(|c| c.live) else {
                    continue;
                };
                parents.extend(c.parents);
                beams[p.slot] = c.next;
                still.push(p.slot);
            }
            if still.is_empty() || t == opts.max_len {
                break;
            }
            live_state = live_state.select(&parents)?;
            active = still;
        }
        Ok(best_of_groups(finished, groups, k))
    }

    /// Each group's choice of next beams from its proposals `all` at one step, group after
    /// group: a group's diversity penalty counts the words the input's earlier groups chose
    /// at this step. Beams that end go to their slot's `finished`.
    fn choose_by_group<'a>(
        &self,
        step: &GroupStep,
        all: &mut [Proposals],
        live: &(dyn DecodeState<'a> + 'a),
        finished: &mut [Vec<Finished>],
    ) -> Result<Vec<Option<Choice>>> {
        let (opts, lps, k, lookahead) = (step.opts, step.lps, step.k, step.lookahead);
        let (groups, v) = (opts.groups, lps.v);
        let lambda = opts.diversity_lambda as f64;
        // The words each input's groups chose at this step so far, for the penalty.
        let mut chosen: Vec<Vec<u32>> = vec![Vec::new(); step.inputs];
        let mut choices: Vec<Option<Choice>> = (0..all.len()).map(|_| None).collect();
        for g in 0..groups {
            let mine: Vec<usize> = (0..all.len())
                .filter(|&a| all[a].slot % groups == g)
                .collect();
            let penalties: Vec<Option<Vec<f64>>> = mine
                .iter()
                .map(|&a| hamming_penalty(&chosen[all[a].slot / groups], lambda, v))
                .collect();
            for (&a, pen) in mine.iter().zip(&penalties) {
                propose(&mut all[a], lps, k, opts.block_trigrams, pen.as_deref());
            }
            let values = match lookahead {
                Some(la) => {
                    let props: Vec<&Proposals> = mine.iter().map(|&a| &all[a]).collect();
                    Some(self.proposal_values(live, &props, la)?)
                }
                None => None,
            };
            let mut at = 0;
            for (&a, pen) in mine.iter().zip(&penalties) {
                let p = &mut all[a];
                let ranked = with_rank(
                    std::mem::take(&mut p.cand),
                    values.as_deref(),
                    &mut at,
                    lookahead,
                );
                let rule = ChoiceRule {
                    k,
                    length_norm: opts.length_norm,
                    lookahead,
                    lps,
                    penalty: pen.as_deref(),
                };
                let s = p.slot;
                choices[a] =
                    Some(rule.choose(p, ranked, &mut chosen[s / groups], &mut finished[s]));
            }
        }
        Ok(choices)
    }

    /// `v` of the state after each proposal's word, in proposal order, one batched step.
    fn proposal_values<'a>(
        &self,
        live: &(dyn DecodeState<'a> + 'a),
        props: &[&Proposals],
        la: &Lookahead,
    ) -> Result<Vec<f32>> {
        let mut parents = Vec::new();
        let mut words = Vec::new();
        for p in props {
            for &(_, j, w) in &p.cand {
                parents.push((p.row0 + j) as u32);
                words.push(w);
            }
        }
        if parents.is_empty() {
            return Ok(Vec::new());
        }
        let h = self.peek_hidden(live, &parents, &words)?;
        Ok(la.value.forward(&h)?.to_vec1::<f32>()?)
    }
}

/// What is wrong with a beam's width, groups and diversity λ taken together: the one rule of
/// beam settings, which the config (at load), `caprl eval`/`caption` (their flags) and beam
/// search itself apply, each in its own words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BeamRule {
    /// A width of 0.
    NoWidth,
    /// 0 groups.
    NoGroups,
    /// Groups that do not divide the width: each group gets `width / groups` beams.
    GroupsDoNotDivide,
    /// A negative or non-finite λ.
    BadLambda,
}

impl BeamRule {
    /// The first rule `width`, `groups` and `lambda` break, if any.
    pub fn broken(width: usize, groups: usize, lambda: f64) -> Option<BeamRule> {
        if width == 0 {
            Some(BeamRule::NoWidth)
        } else if groups == 0 {
            Some(BeamRule::NoGroups)
        } else if !width.is_multiple_of(groups) {
            Some(BeamRule::GroupsDoNotDivide)
        } else if !(lambda >= 0.0 && lambda.is_finite()) {
            Some(BeamRule::BadLambda)
        } else {
            None
        }
    }
}

/// The width, groups and λ make sense together, or an error naming the keys to change.
fn check_options(opts: &BeamOptions) -> Result<()> {
    let lambda = f64::from(opts.diversity_lambda);
    let why = match BeamRule::broken(opts.width, opts.groups, lambda) {
        None => return Ok(()),
        Some(BeamRule::NoWidth) => "decode.beam = 0: the beam width must be >= 1".to_string(),
        Some(BeamRule::NoGroups | BeamRule::GroupsDoNotDivide) => format!(
            "decode.beam = {} is not a multiple of decode.beam_groups = {}: each group gets \
             beam / beam_groups beams (set beam_groups to a divisor of beam, 1 = plain beam search)",
            opts.width, opts.groups
        ),
        Some(BeamRule::BadLambda) => format!(
            "decode.diversity_lambda = {}: must be a finite number >= 0",
            opts.diversity_lambda
        ),
    };
    Err(ModelError::Input(why))
}

impl Captioner {
    /// [`Decoder::beam`] on weights prepared for this call.
    pub fn beam(&self, x: &Inputs, opts: &BeamOptions) -> Result<Vec<Vec<Hypothesis>>> {
        self.decoder()?.beam(x, opts)
    }
}
