//! Dynamic sampling (DAPO, Yu et al. 2025, §3.2; `train.dynamic_sampling`): with a group
//! baseline (`mean`, `grpo`, `dr-grpo`), an image whose sampled captions all score the same
//! has every advantage 0 and carries no gradient, yet it takes a place in the batch and
//! dilutes the step. Such groups are dropped, and the batch is filled with the images of the
//! following batches of the epoch, decoded and scored in further collection rounds, until it
//! holds `batch_size` images with some spread (or the epoch or [`MAX_ROUNDS`] runs out; the
//! step then trains on what it has). Images beyond `batch_size` from the last round are left
//! out, as DAPO does; the dropped groups are counted per step (`groups_dropped`).

use std::collections::{BTreeMap, BTreeSet};

use caprl_wire::{DecodeKind, ScoredRollout};

/// Collection rounds per step at most (the first included), as DAPO's `max_num_gen_batches`.
pub const MAX_ROUNDS: usize = 8;

/// Two sampled captions whose rewards differ by less than this score "the same".
const SAME: f32 = 1e-6;

/// The images of `scored`, in order, each with whether its samples' rewards spread at all.
pub fn image_spread(scored: &[ScoredRollout]) -> Vec<(u32, bool)> {
    let mut range: BTreeMap<u32, (f32, f32)> = BTreeMap::new();
    let mut order = Vec::new();
    for s in scored {
        for (q, r) in s.rollout.sequences.iter().zip(&s.rewards) {
            if q.kind != DecodeKind::Sample {
                continue;
            }
            let e = range.entry(q.image_row).or_insert_with(|| {
                order.push(q.image_row);
                (f32::INFINITY, f32::NEG_INFINITY)
            });
            *e = (e.0.min(r.total), e.1.max(r.total));
        }
    }
    order
        .into_iter()
        .map(|row| {
            let (lo, hi) = range[&row];
            (row, hi - lo >= SAME)
        })
        .collect()
}

/// `scored` with only the sequences (and rewards) of images in `keep`; rollouts left with no
/// sequence are dropped.
pub fn keep_images(scored: Vec<ScoredRollout>, keep: &BTreeSet<u32>) -> Vec<ScoredRollout> {
    scored
        .into_iter()
        .filter_map(|mut s| {
            let (seqs, rewards): (Vec<_>, Vec<_>) = std::mem::take(&mut s.rollout.sequences)
                .into_iter()
                .zip(std::mem::take(&mut s.rewards))
                .filter(|(q, _)| keep.contains(&q.image_row))
                .unzip();
            s.rollout.sequences = seqs;
            s.rewards = rewards;
            (!s.rollout.sequences.is_empty()).then_some(s)
        })
        .collect()
}

/// How many images of `scored` have samples with some spread: those that count toward a
/// dynamically sampled batch.
pub fn images_with_spread(scored: &[ScoredRollout]) -> usize {
    image_spread(scored)
        .iter()
        .filter(|(_, spread)| *spread)
        .count()
}

/// A dynamically sampled batch: the rollouts of its images and the groups dropped.
#[derive(Debug, Default)]
pub struct Filled {
    pub scored: Vec<ScoredRollout>,
    pub groups_dropped: u64,
}

/// The step's batch from the rollouts of all its rounds, in order (the first round's are the
/// first `first_round`): images without spread dropped, the others kept up to `batch` images
/// in all. When no image of any round has spread, the first round as it is (its advantages are
/// all 0) rather than no step at all.
pub fn fill(mut scored: Vec<ScoredRollout>, batch: usize, first_round: usize) -> Filled {
    let mut keep = BTreeSet::new();
    let mut groups_dropped = 0;
    for (row, spread) in image_spread(&scored) {
        if !spread {
            groups_dropped += 1;
        } else if keep.len() < batch {
            keep.insert(row);
        }
    }
    if keep.is_empty() {
        scored.truncate(first_round);
        return Filled {
            scored,
            groups_dropped,
        };
    }
    Filled {
        scored: keep_images(scored, &keep),
        groups_dropped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use caprl_wire::{PolicyVersion, RewardVector, Rollout, Sequence, TaskId};

    /// A rollout of task `id` with, per image, its greedy caption and samples scoring `totals`.
    fn rollout(id: u64, images: &[(u32, &[f32])]) -> ScoredRollout {
        let mut sequences = Vec::new();
        let mut rewards = Vec::new();
        for &(row, totals) in images {
            let greedy = Sequence {
                image_row: row,
                kind: DecodeKind::Greedy,
                tokens: vec![1, 0],
                logprobs: vec![-1.0, -1.0],
            };
            sequences.push(greedy);
            rewards.push(RewardVector {
                total: 0.3,
                components: vec![],
            });
            for &t in totals {
                sequences.push(Sequence {
                    image_row: row,
                    kind: DecodeKind::Sample,
                    tokens: vec![2, 0],
                    logprobs: vec![-1.0, -1.0],
                });
                rewards.push(RewardVector {
                    total: t,
                    components: vec![],
                });
            }
        }
        ScoredRollout {
            rollout: Rollout {
                task_id: TaskId(id),
                data: Default::default(),
                policy_version: PolicyVersion(1),
                actor_id: "a".into(),
                sequences,
                decode_seconds: 0.0,
            },
            rewards,
        }
    }

    fn rows(scored: &[ScoredRollout]) -> Vec<u32> {
        let mut rows: Vec<u32> = scored
            .iter()
            .flat_map(|s| s.rollout.sequences.iter().map(|q| q.image_row))
            .collect();
        rows.dedup();
        rows
    }

    /// Nothing with spread in two rounds: the first round's rollouts, untouched.
    #[test]
    fn without_any_spread_the_first_round_is_the_batch() {
        let flat: &[f32] = &[0.0, 0.0];
        let scored = vec![
            rollout(0, &[(0, flat)]),
            rollout(1, &[(1, flat)]),
            rollout(2, &[(2, flat)]),
        ];
        let f = fill(scored.clone(), 4, 2);
        assert_eq!(f.groups_dropped, 3);
        assert_eq!(f.scored, scored[..2].to_vec());
    }

    #[test]
    fn images_whose_samples_all_score_the_same_have_no_spread() {
        let r = rollout(
            0,
            &[
                (3, &[0.5, 0.5, 0.5]),
                (4, &[0.5, 0.7, 0.5]),
                (5, &[0.0, 0.0]),
            ],
        );
        assert_eq!(image_spread(&[r]), vec![(3, false), (4, true), (5, false)]);
    }

    /// Round 1 keeps 2 of 4 images; round 2 drops one more and fills the batch of 4 with two
    /// of its three others, leaving the last out; every kept image keeps all its sequences.
    #[test]
    fn filling_drops_flat_groups_and_tops_up_to_the_batch_size() {
        let (flat, spread): (&[f32], &[f32]) = (&[1.0, 1.0], &[0.0, 1.0]);
        let mut scored = vec![
            rollout(0, &[(0, flat), (1, spread)]),
            rollout(1, &[(2, spread), (3, flat)]),
        ];
        assert_eq!(images_with_spread(&scored), 2);
        scored.extend([
            rollout(2, &[(4, spread), (5, flat)]),
            rollout(3, &[(6, spread), (7, spread)]),
        ]);
        assert_eq!(images_with_spread(&scored), 5);
        let f = fill(scored, 4, 2);
        assert_eq!(f.groups_dropped, 3);
        assert_eq!(rows(&f.scored), vec![1, 2, 4, 6]);
        let ids: Vec<u64> = f.scored.iter().map(|s| s.rollout.task_id.0).collect();
        assert_eq!(ids, vec![0, 1, 2, 3]);
        for s in &f.scored {
            assert_eq!(s.rollout.sequences.len(), s.rewards.len());
            assert_eq!(
                s.rollout.sequences.len(),
                3,
                "greedy + 2 samples per kept image"
            );
        }
    }
}
