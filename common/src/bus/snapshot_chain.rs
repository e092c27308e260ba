//! Policy versions as chains, in the object store or in files: a version stored whole, then each
//! published version after it as a delta against the one before ([`crate::snapshot_delta`]), until
//! `runtime.snapshot_full_every` versions make up the chain or a delta would not pay (half the
//! snapshot or more); the next version starts a new chain. [`SnapshotMeta::chain`] names the
//! chain up to a version, so a reader holding one of its versions fetches only the deltas after
//! it, and any other reader (one joining late, restarted, or left behind) the chain's whole
//! first version and every delta. Deltas check their base and what they rebuild; the rebuilt
//! snapshot is checked against the meta's checksum as a whole one is.
//!
//! The learner's side ([`Chain`]) remembers the last version stored and keeps the objects of its
//! chain until a new chain starts, whatever the driver lets go of; a reader ([`Held`]) keeps
//! the newest version it fetched, to apply the next deltas to. Where the versions are kept is a
//! [`Versions`]: the run's object store (`snapshot_object`) or a directory of files
//! (`snapshot_file`, with `runtime.snapshot_file_deltas`).

use std::collections::BTreeSet;
use std::path::PathBuf;

use bytes::Bytes;
use futures::future::BoxFuture;

use super::blocking::blocking;
use super::settings::SnapshotDeltas;
use super::{BusError, BusResult, Checksum, SnapshotMeta};
use crate::snapshot_delta;

/// Where a chain's versions are kept, whole and as deltas.
pub(super) trait Versions: Sync {
    /// Stores `version` (`data`) whole and describes it.
    fn put_whole<'a>(
        &'a self,
        version: u64,
        data: &'a Bytes,
    ) -> BoxFuture<'a, BusResult<SnapshotMeta>>;

    /// Stores `delta`, `version`'s delta against the version before it; where a reader finds
    /// it, when that goes in the meta (a file's path).
    fn put_delta(&self, version: u64, delta: Vec<u8>) -> BoxFuture<'_, BusResult<Option<PathBuf>>>;

    /// The version `meta` describes, stored whole, checked against it.
    fn get_whole<'a>(&'a self, meta: &'a SnapshotMeta) -> BoxFuture<'a, BusResult<Bytes>>;

    /// The bytes of `version` stored whole, or of its delta (`delta`), unchecked: a delta checks
    /// its base and what it rebuilds itself.
    fn get_unchecked(&self, version: u64, delta: bool) -> BoxFuture<'_, BusResult<Vec<u8>>>;

    /// Removes `version`, whole and as a delta; an absent one is no error.
    fn delete(&self, version: u64) -> BoxFuture<'_, BusResult<()>>;
}

/// What the learner's bus stored last.
#[derive(Default)]
pub(super) struct Chain {
    /// The newest version's bytes and its chain (whose first version is stored whole).
    last: Option<(Bytes, Vec<u64>)>,
    /// Publications still to be stored whole without trying a delta, after one that did not pay.
    whole_for: u64,
    /// Versions the driver let go of while the chain still needs them.
    deferred: BTreeSet<u64>,
}

/// The newest version a reader fetched, with its XXH3-128 once a delta has made it (the next
/// delta then need not hash it again).
pub(super) struct Held {
    version: u64,
    bytes: Bytes,
    xxh3: Option<u128>,
}

impl Held {
    /// Version `version`, whose bytes are `bytes` and their XXH3-128 `xxh3`.
    pub(super) fn new(version: u64, bytes: Bytes, xxh3: u128) -> Held {
        Held {
            version,
            bytes,
            xxh3: Some(xxh3),
        }
    }

    /// Version `meta.version`, whose bytes `bytes` were checked against `meta`: their XXH3-128
    /// is known when that is the meta's checksum.
    pub(super) fn checked(meta: &SnapshotMeta, bytes: Bytes) -> Held {
        Held {
            version: meta.version,
            bytes,
            xxh3: meta.checksum.as_xxh3(),
        }
    }

    /// The held bytes' XXH3-128, when a delta made them (else nobody hashed them yet).
    pub(super) fn xxh3(&self) -> Option<u128> {
        self.xxh3
    }
}

impl Chain {
    /// Stores `version` (`data`) as a delta when it pays, else whole, and describes it. A new
    /// chain lets go of the versions the driver deleted while the old one needed them.
    pub(super) async fn put(
        &mut self,
        store: &impl Versions,
        deltas: SnapshotDeltas,
        version: u64,
        data: Bytes,
    ) -> BusResult<SnapshotMeta> {
        if let Some((delta, chain)) = self.delta_for(deltas, version, &data).await? {
            // The delta names its result's XXH3-128: the new version is not hashed again.
            let made = snapshot_delta::result_xxh3(&delta)
                .map_err(|source| BusError::Delta { version, source })?;
            let file = store.put_delta(version, delta).await?;
            let meta = SnapshotMeta {
                version,
                checksum: Checksum::of_xxh3(made),
                bytes: data.len() as u64,
                file,
                chain: chain.clone(),
            };
            self.last = Some((data, chain));
            return Ok(meta);
        }
        let meta = store.put_whole(version, &data).await?;
        self.last = Some((data, vec![version]));
        for old in std::mem::take(&mut self.deferred) {
            if let Err(e) = store.delete(old).await {
                tracing::warn!("could not delete snapshot v{old} of an earlier chain: {e}");
            }
        }
        Ok(meta)
    }

    /// The delta of `version` against the last version stored and the chain it ends, when the
    /// chain has room, the layout is the same and the delta is under half the snapshot.
    async fn delta_for(
        &mut self,
        deltas: SnapshotDeltas,
        version: u64,
        data: &Bytes,
    ) -> BusResult<Option<(Vec<u8>, Vec<u64>)>> {
        let Some((base, chain)) = &self.last else {
            return Ok(None);
        };
        let room = (chain.len() as u64) < deltas.full_every;
        let follows = chain.last().is_some_and(|&last| last < version);
        if !room || !follows || base.len() != data.len() {
            return Ok(None);
        }
        if self.whole_for > 0 {
            self.whole_for -= 1;
            return Ok(None);
        }
        let (base, next, width) = (base.clone(), data.clone(), deltas.width);
        let delta = blocking(move || snapshot_delta::encode(&base, &next, width))
            .await
            .map_err(|source| BusError::Delta { version, source })?;
        if delta.len() * 2 >= data.len() {
            // Deltas of these snapshots do not pay (f32 at a high learning rate): store the
            // next `full_every - 1` versions whole without making them.
            self.whole_for = deltas.full_every.saturating_sub(1);
            return Ok(None);
        }
        let mut chain = chain.clone();
        chain.push(version);
        Ok(Some((delta, chain)))
    }

    /// Whether `version`'s objects are to stay for now (the current chain needs them); if so
    /// they are deleted when a new chain starts.
    pub(super) fn defers(&mut self, version: u64) -> bool {
        let needed = self
            .last
            .as_ref()
            .is_some_and(|(_, chain)| chain.contains(&version));
        if needed {
            self.deferred.insert(version);
        }
        needed
    }
}

/// Fetches the version `meta` describes, stored whole or as the last delta of `meta.chain`:
/// from the deltas after the version `held` holds when it is of the chain (a delta that fails
/// its checks sends the reader to the chain's start), else from the chain's start; `held`
/// becomes the version fetched. The bytes are checked against the meta's checksum either way.
pub(super) async fn get(
    store: &impl Versions,
    held: &mut Option<Held>,
    meta: &SnapshotMeta,
) -> BusResult<Bytes> {
    let (bytes, xxh3) = if meta.chain.is_empty() {
        (store.get_whole(meta).await?, None)
    } else {
        let from_held = held.as_ref().and_then(|h| {
            let at = meta.chain.iter().position(|&v| v == h.version)?;
            Some((h.bytes.clone(), h.xxh3, &meta.chain[at + 1..]))
        });
        let rebuilt = match from_held {
            Some((base, sum, after)) => rebuild(store, (base, sum), after).await.ok(),
            None => None,
        };
        match rebuilt {
            Some(rebuilt) => rebuilt,
            None => {
                let whole = store.get_unchecked(meta.chain[0], false).await?;
                rebuild(store, (Bytes::from(whole), None), &meta.chain[1..]).await?
            }
        }
    };
    // A delta's own check of what it rebuilt is the meta's XXH3-128; anything else is hashed.
    let known = xxh3.map(Checksum::of_xxh3);
    if known.as_ref() != Some(&meta.checksum) || bytes.len() as u64 != meta.bytes {
        let (checked, meta) = (bytes.clone(), meta.clone());
        blocking(move || meta.verify(&checked)).await?;
    }
    *held = Some(Held {
        version: meta.version,
        bytes: bytes.clone(),
        xxh3,
    });
    Ok(bytes)
}

/// `base` (with its XXH3-128 when known) after the deltas of `versions` in turn, with the
/// result's XXH3-128 when a delta made it.
async fn rebuild(
    store: &impl Versions,
    (mut base, mut sum): (Bytes, Option<u128>),
    versions: &[u64],
) -> BusResult<(Bytes, Option<u128>)> {
    for &version in versions {
        let delta = store.get_unchecked(version, true).await?;
        (base, sum) = blocking(move || {
            let mut next = base.to_vec();
            snapshot_delta::apply_in_place(&mut next, sum, &delta)
                .map(|made| (Bytes::from(next), Some(made)))
                .map_err(|source| BusError::Delta { version, source })
        })
        .await?;
    }
    Ok((base, sum))
}
