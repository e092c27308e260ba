//! Where `caprl local`'s policy snapshots go (`--snapshots`): files on this host, by default in
//! shared memory, or NATS's object store.
//!
//! Through NATS (`--snapshots nats`), the host's readers share one fetch of each version in
//! `<run_dir>/snapshot-cache` (`runtime.snapshot_cache_dir`).
//!
//! Every role of a local run shares the host, so the learner writes each version once as a file
//! that every reader maps (`runtime.snapshot_dir`), instead of one copy per reader through the
//! object store. A snapshot is written every step, read at once and never needed after the run:
//! in shared memory (`/dev/shm`) a 226 MB policy is written in 0.09 s, where a virtual disk's
//! writeback made the same write take 0.06–0.9 s. So, unless `runtime.snapshot_dir` names a
//! directory, the files go to shared memory when it has room for them ([`SHARED_MEMORY_MIN_FREE`]),
//! in a directory of the run's own that is removed when `caprl local` ends, and to
//! `<run_dir>/snapshots` otherwise (a container's small `/dev/shm`, or a host without one).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use caprl_common::bus::Checksum;
use caprl_common::config::RunConfig;

/// How a local run's policy snapshots travel (`--snapshots`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SnapshotTransport {
    Files,
    Nats,
}

impl SnapshotTransport {
    /// The flag's value.
    pub fn name(self) -> &'static str {
        match self {
            SnapshotTransport::Files => "files",
            SnapshotTransport::Nats => "nats",
        }
    }
}

/// The shared memory of this host.
const SHARED_MEMORY: &str = "/dev/shm";

/// The room shared memory must have for the snapshots to go there: a few versions of the
/// largest policies users train (the reference Transformer's is 226 MB in f32), with margin.
const SHARED_MEMORY_MIN_FREE: u64 = 4 << 30;

/// A local run's snapshot directory, chosen once before the roles start. One in shared memory
/// is removed when this is dropped (the end of `caprl local`, an error or Ctrl-C included).
pub struct LocalSnapshots {
    /// The `--set`s that send every role's snapshots there.
    pub sets: Vec<String>,
    in_memory: Option<PathBuf>,
}

impl LocalSnapshots {
    /// Where `cfg`'s run sends its snapshots with `transport`.
    pub fn choose(cfg: &RunConfig, transport: SnapshotTransport) -> Result<LocalSnapshots> {
        let set = |dir: &str| -> Result<Vec<String>> {
            Ok(vec![format!(
                "runtime.snapshot_dir={}",
                serde_json::to_string(dir)?
            )])
        };
        let run_dir = std::path::absolute(&cfg.run_dir)
            .with_context(|| format!("resolving run_dir {:?}", cfg.run_dir))?;
        let (dir, in_memory) = match transport {
            // Every actor of the run is on this host: the first to need a version fetches it
            // into the host's cache, the others read it there (unless the user named a cache).
            SnapshotTransport::Nats if cfg.runtime.snapshot_cache_dir.is_empty() => {
                let cache = run_dir.join("snapshot-cache").display().to_string();
                tracing::info!("policy snapshots through NATS, one fetch per version into {cache}");
                let mut sets = set("")?;
                sets.push(format!(
                    "runtime.snapshot_cache_dir={}",
                    serde_json::to_string(&cache)?
                ));
                return Ok(LocalSnapshots {
                    sets,
                    in_memory: None,
                });
            }
            SnapshotTransport::Nats => (String::new(), None),
            // The user's directory, as given.
            SnapshotTransport::Files if !cfg.runtime.snapshot_dir.is_empty() => {
                return Ok(LocalSnapshots {
                    sets: Vec::new(),
                    in_memory: None,
                })
            }
            SnapshotTransport::Files => match shared_memory_dir(&run_dir)? {
                Some(dir) => (dir.display().to_string(), Some(dir)),
                // Absolute: the roles may not share a working directory.
                None => (run_dir.join("snapshots").display().to_string(), None),
            },
        };
        if !dir.is_empty() {
            tracing::info!("policy snapshots as files in {dir}");
        }
        Ok(LocalSnapshots {
            sets: set(&dir)?,
            in_memory,
        })
    }
}

impl Drop for LocalSnapshots {
    fn drop(&mut self) {
        if let Some(dir) = &self.in_memory {
            if let Err(e) = std::fs::remove_dir_all(dir) {
                tracing::warn!(
                    "could not remove the snapshot files in {}: {e}",
                    dir.display()
                );
            }
        }
    }
}

/// The shared-memory directory of the run in `run_dir` (one name per run directory, so that a
/// restarted `caprl local` finds it again), emptied of an earlier run's files; `None` when this
/// host has no shared memory with room.
fn shared_memory_dir(run_dir: &Path) -> Result<Option<PathBuf>> {
    let root = Path::new(SHARED_MEMORY);
    if free_bytes(root).is_none_or(|free| free < SHARED_MEMORY_MIN_FREE) {
        return Ok(None);
    }
    let key = Checksum::xxh3(run_dir.as_os_str().as_encoded_bytes());
    let dir = root.join(format!("caprl-snapshots-{}", &key.hex()[..16]));
    // A `caprl local` that was killed left its files: they are stale, and hold memory.
    match std::fs::remove_dir_all(&dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(e).with_context(|| format!("removing stale snapshots in {}", dir.display()))
        }
        _ => {}
    }
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("creating the snapshot directory {}", dir.display()))?;
    Ok(Some(dir))
}

/// The bytes free for an unprivileged writer on the file system of `dir`, if it exists.
fn free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `path` is a NUL-terminated string; `stat` is written by a successful call.
    if unsafe { libc::statvfs(path.as_ptr(), stat.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: the call succeeded.
    let stat = unsafe { stat.assume_init() };
    // The fields' types differ between platforms (u64 on 64-bit Linux).
    #[allow(clippy::useless_conversion)]
    let (blocks, block_size) = (u64::from(stat.f_bavail), u64::from(stat.f_frsize));
    Some(blocks.saturating_mul(block_size))
}
