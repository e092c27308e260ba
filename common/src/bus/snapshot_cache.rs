//! A host's shared copy of the policy versions its readers fetch from the object store
//! (`runtime.snapshot_cache_dir`): the first reader on the host to need a version fetches it
//! (from the deltas after its own, or whole) and leaves it in the cache; the others on the host
//! read it there instead of pulling their own copy through NATS. With 16 actors on a host, the
//! broker sends each version once to that host instead of 16 times.
//!
//! A version's file is named by its version and checksum (a resumed learner's version 7 is not
//! the killed one's) and starts with its length and XXH3-128, checked on every read: a file cut
//! short, damaged or left by a crash is fetched again and replaced, never handed out. It is
//! written under a temporary name and renamed into place, so no reader sees it half written.
//! A lock file per version (`flock`, which the kernel lets go of when its holder dies) makes the
//! host's readers wait for the one fetching instead of fetching beside it; if that one fails or
//! dies, the next in line fetches. The writer of a version removes the host's versions older
//! than the one before it; a reader that opened one keeps reading it.
//!
//! Written by hand: the cache is a directory of checked files and a lock per version, which no
//! crate offers over the object store's chains.

use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use xxhash_rust::xxh3::xxh3_128;

use super::blocking::blocking;
use super::{BusResult, SnapshotMeta};

/// Magic and layout of a cached version's header: `MAGIC`, its length (u64 LE), its XXH3-128
/// (u128 LE), then the snapshot's bytes.
const MAGIC: &[u8; 8] = b"caprlsc1";
const HEADER: usize = 8 + 8 + 16;

/// The cache directory of one run on this host.
#[derive(Debug, Clone)]
pub(super) struct HostCache {
    dir: PathBuf,
}

/// A version as the cache hands it out: its bytes and their XXH3-128, and whether this reader
/// fetched it (`false`: another reader on the host had).
pub(super) struct Cached {
    pub(super) bytes: Bytes,
    pub(super) xxh3: u128,
    pub(super) fetched: bool,
}

impl HostCache {
    /// The cache of run `run_id` under `root`.
    pub(super) fn new(root: &Path, run_id: &str) -> HostCache {
        HostCache {
            dir: root.join(run_id),
        }
    }

    fn file(&self, meta: &SnapshotMeta) -> PathBuf {
        self.dir.join(format!(
            "policy-v{}-{}.snapshot",
            meta.version,
            meta.checksum.hex()
        ))
    }

    fn lock_file(&self, version: u64) -> PathBuf {
        self.dir.join(format!("policy-v{version}.lock"))
    }

    /// The version `meta` describes: from this host's cache when a whole copy is there, else
    /// from `fetch` (which checks what it fetched against `meta`, and returns it with its
    /// XXH3-128 when it knows it), then left in the cache for the host's other readers. A
    /// cache that cannot be written (a full disk, no permission) costs only the sharing: the
    /// fetched version is returned, with a warning.
    pub(super) async fn get<Fut>(
        &self,
        meta: &SnapshotMeta,
        fetch: impl FnOnce() -> Fut,
    ) -> BusResult<Cached>
    where
        Fut: std::future::Future<Output = BusResult<(Bytes, Option<u128>)>>,
    {
        let (file, len, version) = (self.file(meta), meta.bytes, meta.version);
        let read = |file: PathBuf| blocking(move || read_whole(&file, len));
        if let Some(hit) = read(file.clone()).await {
            return Ok(hit);
        }
        // Wait for a reader of this host that fetches the version now, then look again.
        let (dir, lock) = (self.dir.clone(), self.lock_file(version));
        let held = blocking(move || lock_exclusive(&dir, &lock)).await;
        match &held {
            Ok(_) => {
                if let Some(hit) = read(file.clone()).await {
                    return Ok(hit);
                }
            }
            Err(e) => tracing::warn!(
                "snapshot cache {}: cannot lock it ({e}); fetching v{version} without it",
                self.dir.display(),
            ),
        }
        let (bytes, xxh3) = fetch().await?;
        let (dir, data) = (self.dir.clone(), bytes.clone());
        let xxh3 = blocking(move || {
            let xxh3 = xxh3.unwrap_or_else(|| xxh3_128(&data));
            if let Err(e) = write_whole(&dir, &file, &data, xxh3) {
                tracing::warn!(
                    "snapshot cache {}: cannot write v{version} ({e}); this host's other readers \
                     fetch their own copy",
                    dir.display()
                );
            }
            remove_before(&dir, version.saturating_sub(1));
            xxh3
        })
        .await;
        drop(held);
        Ok(Cached {
            bytes,
            xxh3,
            fetched: true,
        })
    }
}

/// The version in `file` when it is whole: its header's length is `bytes` and its content's
/// XXH3-128 the header's. A damaged file is removed (the next reader fetches it again).
fn read_whole(file: &Path, bytes: u64) -> Option<Cached> {
    let mut f = fs::File::open(file).ok()?;
    let mut header = [0u8; HEADER];
    let mut read = || -> io::Result<Option<(Vec<u8>, u128)>> {
        f.read_exact(&mut header)?;
        let len = u64::from_le_bytes(header[8..16].try_into().unwrap_or_default());
        let sum = u128::from_le_bytes(header[16..32].try_into().unwrap_or_default());
        if &header[..8] != MAGIC || len != bytes {
            return Ok(None);
        }
        let mut data = vec![0u8; usize::try_from(len).unwrap_or(usize::MAX)];
        f.read_exact(&mut data)?;
        // Nothing after the snapshot: a longer file is not what was written.
        let trailing = f.read(&mut [0u8; 1])?;
        Ok((trailing == 0 && xxh3_128(&data) == sum).then_some((data, sum)))
    };
    match read() {
        Ok(Some((data, xxh3))) => Some(Cached {
            bytes: Bytes::from(data),
            xxh3,
            fetched: false,
        }),
        Ok(None) | Err(_) => {
            tracing::warn!(
                "snapshot cache: {} is damaged or cut short; fetching the version again",
                file.display()
            );
            let _ = fs::remove_file(file);
            None
        }
    }
}

/// Writes `data` (whose XXH3-128 is `xxh3`) into `file` under `dir`: to a name of this
/// process first, renamed into place when whole.
fn write_whole(dir: &Path, file: &Path, data: &[u8], xxh3: u128) -> io::Result<()> {
    let partial = dir.join(format!(".partial-{}", std::process::id()));
    let write = || -> io::Result<()> {
        let mut f = fs::File::create(&partial)?;
        let mut header = Vec::with_capacity(HEADER);
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&(data.len() as u64).to_le_bytes());
        header.extend_from_slice(&xxh3.to_le_bytes());
        f.write_all(&header)?;
        f.write_all(data)?;
        fs::rename(&partial, file)
    };
    write().inspect_err(|_| {
        let _ = fs::remove_file(&partial);
    })
}

/// Opens (creating `dir` and it if need be) and locks `lock` for this process alone, waiting
/// while another holds it.
fn lock_exclusive(dir: &Path, lock: &Path) -> io::Result<fs::File> {
    fs::create_dir_all(dir)?;
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(lock)?;
    f.lock()?;
    Ok(f)
}

/// Removes the cached versions (and their lock files) older than `keep_from`, and what a
/// writer that died mid-write left ([`write_whole`]'s partial files, once they are an hour old).
fn remove_before(dir: &Path, keep_from: u64) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        let stale = match version_of(name) {
            Some(version) => version < keep_from,
            None => name.starts_with(".partial-") && older_than_an_hour(&entry),
        };
        if stale {
            let _ = fs::remove_file(entry.path());
        }
    }
}

fn older_than_an_hour(entry: &fs::DirEntry) -> bool {
    let age = entry
        .metadata()
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok());
    age.is_some_and(|age| age.as_secs() > 3600)
}

/// The version a cache file (`policy-v<N>-<checksum>.snapshot` or `policy-v<N>.lock`) holds.
fn version_of(name: &str) -> Option<u64> {
    let rest = name.strip_prefix("policy-v")?;
    let digits = rest.split(['-', '.']).next()?;
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::version_of;

    #[test]
    fn cache_file_names_give_their_version() {
        assert_eq!(version_of("policy-v12-00ff.snapshot"), Some(12));
        assert_eq!(version_of("policy-v3.lock"), Some(3));
        assert_eq!(version_of(".partial-99"), None);
        assert_eq!(version_of("policy-vx.lock"), None);
    }
}
