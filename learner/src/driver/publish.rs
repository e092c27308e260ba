//! The learner's snapshots on the bus: the policy (and the discriminator riding along)
//! serialised and published when due, and how the trainer's versions map to the bus's.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use caprl_clip::Discriminator;
use caprl_common::bus::SnapshotMeta;
use caprl_common::snapshot;
use caprl_common::telemetry::metrics as tm;
use caprl_common::telemetry::stages::{self, Stage};
use caprl_model::model::Captioner;
use caprl_wire::{DataFingerprint, TaskId};

use super::Driver;
use crate::error::Doing;
use crate::LearnerError;

/// How the trainer's policy versions map to the versions on the bus.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Versions {
    /// Added to the trainer's version when publishing and issuing.
    pub(super) offset: u64,
    /// The newest version on the bus when this learner started and the offset of the learner
    /// that published it: rollouts at or below it are that learner's.
    pub(super) before: Option<(u64, u64)>,
}

impl Versions {
    /// The bus version of trainer version `v`.
    pub(super) fn published(&self, v: u64) -> u64 {
        v + self.offset
    }

    /// The trainer version of a rollout made with bus version `p`.
    pub(super) fn trainer(&self, p: u64) -> u64 {
        match self.before {
            Some((newest, offset)) if p <= newest => p.saturating_sub(offset),
            _ => p.saturating_sub(self.offset),
        }
    }
}

impl Driver {
    /// Chooses how trainer versions map to bus versions for this learner, which resumes at
    /// trainer version `version` with the offset its checkpoint recorded (0 for a new run), and
    /// returns the offset to record in its checkpoints. When the bus already holds a snapshot
    /// at or past `version + offset` (the learner this one replaces went further than its last
    /// checkpoint, or an earlier run of the same run id published it), this learner publishes
    /// past it; rollouts made at or below it are read with the recorded offset.
    pub fn continue_versions(&mut self, version: u64, offset: u64) -> Result<u64, LearnerError> {
        let bus = Arc::clone(&self.bus);
        let newest = self.retry("reading the newest snapshot", || {
            let bus = Arc::clone(&bus);
            async move { bus.latest().await }
        })?;
        self.versions = match newest {
            Some(meta) if meta.version >= version + offset => Versions {
                offset: meta.version + 1 - version,
                before: Some((meta.version, offset)),
            },
            _ => Versions {
                offset,
                before: None,
            },
        };
        if let Some((newest, _)) = self.versions.before {
            tracing::info!(
                "learner: the bus holds policy v{newest}; publishing trainer version {version} \
                 as v{} so that versions never go back",
                self.versions.published(version)
            );
        }
        Ok(self.versions.offset)
    }

    /// Publishes `model` as policy `version` when a snapshot is due (the first, then every
    /// `snapshot_every` versions, or sooner when a task of the next round waits for this
    /// version); returns the snapshot that is `latest` afterwards. Call it
    /// before each [`Driver::collect`], also of a round in the same version (a refill): a
    /// task of that round may wait for this version.
    pub fn publish(
        &mut self,
        model: &Captioner,
        version: u64,
    ) -> Result<SnapshotMeta, LearnerError> {
        self.publish_with(model, None, version)
    }

    /// The run's data set: every snapshot from now on is stamped with its vocabulary hash
    /// `vocab_hash` (actors of another vocabulary refuse it instead of decoding with ids that
    /// mean other words), every task with its fingerprint `data` (an actor or reward worker of
    /// another data set refuses the work), and a scored rollout of another data set is refused.
    pub fn set_data(&mut self, vocab_hash: &str, data: DataFingerprint) {
        self.vocab_hash = Some(vocab_hash.to_string());
        self.data = Some(data);
    }

    /// The run's rewards, the terms of its `reward.spec`: a scored rollout that carries other
    /// reward components (a reward worker started with another spec) stops the run with
    /// [`LearnerError::Stalled`] naming both.
    pub fn set_rewards(&mut self, names: impl IntoIterator<Item = String>) {
        self.rewards = Some(names.into_iter().collect());
    }

    /// [`Driver::publish`] with the discriminator's weights riding along (paper 004: reward
    /// workers score `disc` with the learner's current `D`).
    pub fn publish_with(
        &mut self,
        model: &Captioner,
        disc: Option<&Discriminator>,
        version: u64,
    ) -> Result<SnapshotMeta, LearnerError> {
        let version = self.versions.published(version);
        if let Some(p) = self
            .published
            .as_ref()
            .filter(|_| !self.snapshot_due(version))
        {
            return Ok(p.clone());
        }
        let started = Instant::now();
        let bytes = stages::time(Stage::SnapshotSerialise, || {
            let vocab = self.vocab_hash.as_deref();
            let riders = match disc {
                Some(disc) => disc.tensors()?,
                None => Vec::new(),
            };
            Ok::<_, LearnerError>(snapshot::encode(
                model,
                riders,
                self.opts.snapshot_dtype,
                vocab,
            )?)
        })
        .doing(|| "serialising the policy snapshot".into())?;
        let bytes = Bytes::from(bytes);
        let bus = Arc::clone(&self.bus);
        let put = stages::Timer::start(Stage::SnapshotPut);
        let meta = self.retry("publishing a snapshot", || {
            let (bus, bytes) = (Arc::clone(&bus), bytes.clone());
            async move { bus.put_snapshot(version, bytes).await }
        })?;
        drop(put);
        tm::record_snapshot(meta.bytes, started.elapsed());
        tm::set_policy_version(version);
        self.delete_old_snapshots(version);
        self.published = Some(meta.clone());
        if let Some(r) = &self.readiness {
            r.set_ready(true);
        }
        Ok(meta)
    }

    /// After publishing `version`: deletes the snapshots older than the `keep_snapshots + 1`
    /// this learner published last (with `snapshot_every > 1` the versions between them were
    /// never published; deleting one is a no-op) and, one version per publication as they age,
    /// the last ones of the learner it resumed from.
    fn delete_old_snapshots(&mut self, version: u64) {
        let keep = self.opts.keep_snapshots + 1;
        self.stored.push_back(version);
        if self.stored.len() as u64 > keep {
            self.stored.pop_front();
        }
        let from = *self.delete_from.get_or_insert(version.saturating_sub(keep));
        let oldest_kept = self.stored.front().copied().unwrap_or(version);
        let until = oldest_kept
            .min((version + 1).saturating_sub(keep))
            .max(from);
        for old in from..until {
            let _ = self.rt.block_on(self.bus.delete_snapshot(old));
        }
        self.delete_from = Some(until);
    }

    /// Whether policy `version` (a bus version) is to be published: always when nothing is yet,
    /// never twice, else once `snapshot_every` versions have passed since the last one, or
    /// sooner when a task of the next round waits for a newer policy than `latest` (a task
    /// issued ahead whose round came early, after a dynamic-sampling refill or a skipped step:
    /// without it, actors would wait for a snapshot the learner waits for their results to
    /// publish).
    fn snapshot_due(&self, version: u64) -> bool {
        let Some(p) = &self.published else {
            return true;
        };
        let k = self.tasks_per_step();
        let first = TaskId(self.next_round * k);
        let needed = self
            .planned
            .range(first..TaskId(first.0 + k))
            .map(|(_, t)| t.min_version)
            .max()
            .unwrap_or(0);
        version > p.version
            && (version >= p.version + self.opts.snapshot_every.max(1) || needed > p.version)
    }
}
