//! Policy snapshots as files in a directory every role of the run can read (`runtime.snapshot_dir`:
//! one host, as under `caprl local`, or a volume shared by the cluster's pods). The learner writes
//! each version once; readers map it and check its checksum (XXH3-128), so the bytes never pass
//! through NATS, whose object store copies a snapshot once per reader and lets none read it
//! before it is whole.
//! The description in the control bucket still says which version is newest; its `file` names
//! the path, so a reader needs no setting of its own.
//!
//! A version is written to a temporary name and renamed into place: a reader sees either no file
//! or the whole snapshot. Deleting a version unlinks its file; a reader that mapped it keeps its
//! pages.
//!
//! With `runtime.snapshot_file_deltas` (for a volume shared across hosts, where every reader's
//! read of a whole file crosses the network), versions are kept as the object store keeps them,
//! in chains of deltas (`snapshot_chain`, [`Files`]): `policy-v<N>.delta` beside the chain's
//! whole first version, the meta's `file` naming the delta.
//!
//! Once a version is in place, the file of the next one is allocated beside it, off the learner's
//! path ([`allocate_next`]): a new file's pages cost the kernel more to hand out than the copy
//! into them (a 226 MB policy in shared memory: 0.16 s into a new file, 0.07 s into an allocated
//! one), and the learner would otherwise pay that at every publish.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use futures::future::BoxFuture;

use super::blocking::blocking;
use super::snapshot_chain::Versions;
use super::{BusError, BusResult, Checksum, SnapshotMeta};

/// The directory of run `run_id`'s snapshots under `root`.
pub(crate) fn run_dir(root: &Path, run_id: &str) -> PathBuf {
    root.join(run_id)
}

/// The file of snapshot `version` under `dir` (a [`run_dir`]).
fn version_path(dir: &Path, version: u64) -> PathBuf {
    dir.join(format!("policy-v{version}.safetensors"))
}

/// The file of snapshot `version`'s delta against the version before it, under `dir`.
fn delta_path(dir: &Path, version: u64) -> PathBuf {
    dir.join(format!("policy-v{version}.delta"))
}

/// A run's snapshot directory as a keeper of version chains (`runtime.snapshot_file_deltas`).
pub(super) struct Files {
    dir: PathBuf,
}

impl Files {
    /// The learner's: the run's directory under `runtime.snapshot_dir` (a [`run_dir`]).
    pub(super) fn writing(dir: PathBuf) -> Files {
        Files { dir }
    }

    /// A reader's: the directory of the file `meta` names.
    pub(super) fn reading(meta: &SnapshotMeta) -> Files {
        let file = meta.file.as_deref().unwrap_or(Path::new("."));
        Files {
            dir: file.parent().unwrap_or(Path::new(".")).to_path_buf(),
        }
    }
}

impl Versions for Files {
    fn put_whole<'a>(
        &'a self,
        version: u64,
        data: &'a Bytes,
    ) -> BoxFuture<'a, BusResult<SnapshotMeta>> {
        let (dir, data) = (self.dir.clone(), data.clone());
        Box::pin(blocking(move || write(&dir, version, &data)))
    }

    fn put_delta(&self, version: u64, delta: Vec<u8>) -> BoxFuture<'_, BusResult<Option<PathBuf>>> {
        let dir = self.dir.clone();
        Box::pin(blocking(move || {
            write_delta(&dir, version, &delta).map(Some)
        }))
    }

    fn get_whole<'a>(&'a self, meta: &'a SnapshotMeta) -> BoxFuture<'a, BusResult<Bytes>> {
        let (path, meta) = (version_path(&self.dir, meta.version), meta.clone());
        Box::pin(blocking(move || read(&path, &meta)))
    }

    fn get_unchecked(&self, version: u64, delta: bool) -> BoxFuture<'_, BusResult<Vec<u8>>> {
        let path = if delta {
            delta_path(&self.dir, version)
        } else {
            version_path(&self.dir, version)
        };
        Box::pin(blocking(move || match fs::read(&path) {
            Ok(data) => Ok(data),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                Err(BusError::SnapshotMissing { version })
            }
            Err(source) => Err(BusError::SnapshotFile {
                path,
                action: "read",
                source,
            }),
        }))
    }

    fn delete(&self, version: u64) -> BoxFuture<'_, BusResult<()>> {
        let dir = self.dir.clone();
        Box::pin(blocking(move || delete(&dir, version)))
    }
}

/// The error of writing `path`.
fn write_failed(path: &Path, source: io::Error) -> BusError {
    BusError::SnapshotFile {
        path: path.to_path_buf(),
        action: "write",
        source,
    }
}

/// `dir`, created if need be, as an absolute path (what a meta names, for every reader).
fn writable_dir(dir: &Path) -> BusResult<PathBuf> {
    fs::create_dir_all(dir).map_err(|e| write_failed(dir, e))?;
    fs::canonicalize(dir).map_err(|e| write_failed(dir, e))
}

/// Writes `delta`, snapshot `version`'s delta, under `dir` (to a temporary name first, renamed
/// into place when whole); its absolute path.
fn write_delta(dir: &Path, version: u64, delta: &[u8]) -> BusResult<PathBuf> {
    let dir = writable_dir(dir)?;
    let path = delta_path(&dir, version);
    let partial = dir.join(".policy-delta.partial");
    let written = fs::write(&partial, delta).and_then(|()| fs::rename(&partial, &path));
    if let Err(e) = written {
        let _ = fs::remove_file(&partial);
        return Err(write_failed(&path, e));
    }
    Ok(path)
}

/// Writes snapshot `version` under `dir` and describes it, its absolute path included.
pub(crate) fn write(dir: &Path, version: u64, data: &[u8]) -> BusResult<SnapshotMeta> {
    let dir = writable_dir(dir)?;
    let path = version_path(&dir, version);
    let partial = next_path(&dir);
    // The file allocated after the last version, when there is one: written from its start and
    // cut to this version's length, while another core computes the checksum.
    let write = || {
        fs::OpenOptions::new()
            .write(true)
            .open(&partial)
            .or_else(|_| fs::File::create(&partial))
            .and_then(|mut file| {
                file.write_all(data)?;
                file.set_len(data.len() as u64)
            })
            .and_then(|()| fs::rename(&partial, &path))
    };
    let (written, checksum) = rayon::join(write, || Checksum::xxh3(data));
    if let Err(e) = written {
        // A full disk leaves no half file behind, and the versions already written stay.
        let _ = fs::remove_file(&partial);
        return Err(write_failed(&path, e));
    }
    allocate_next(partial, data.len() as u64);
    Ok(SnapshotMeta {
        version,
        checksum,
        bytes: data.len() as u64,
        file: Some(path),
        chain: Vec::new(),
    })
}

/// The file under `dir` the next version is written into before it is renamed into place. One
/// learner writes a run's snapshots (its run directory's lock says so), so the name needs no
/// process id, and a restarted learner writes over what a killed one left.
fn next_path(dir: &Path) -> PathBuf {
    dir.join(".policy-next.partial")
}

/// Creates `partial` (the next version's file) and allocates `len` bytes of it on a thread of its
/// own, beyond its end so that its length stays 0 until [`write`] writes it. The file exists when
/// this returns (deleting the run's directory removes it); where the allocation fails (a full
/// disk, a file system without `fallocate`) it stays empty and the next [`write`] allocates as it
/// writes.
fn allocate_next(partial: PathBuf, len: u64) {
    let Ok(file) = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&partial)
    else {
        return;
    };
    #[cfg(target_os = "linux")]
    let allocate = move || {
        use std::os::fd::AsRawFd;
        // SAFETY: fallocate on a file this closure owns, with integer arguments.
        let failed =
            unsafe { libc::fallocate(file.as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, 0, len as i64) }
                != 0;
        if failed {
            let e = io::Error::last_os_error();
            tracing::debug!("cannot allocate {} ahead: {e}", partial.display());
        }
    };
    #[cfg(not(target_os = "linux"))]
    let allocate = move || drop((file, partial, len));
    let spawned = std::thread::Builder::new()
        .name("snapshot-file".into())
        .spawn(allocate);
    if let Err(e) = spawned {
        tracing::debug!("cannot start the thread that allocates the next snapshot file: {e}");
    }
}

/// Reads the snapshot `meta` describes from `path` (its `file`) and checks its length and checksum.
/// A missing file in a directory that exists is a deleted version ([`BusError::SnapshotMissing`]);
/// a directory this host does not have is a setup fault that names the fix.
pub(crate) fn read(path: &Path, meta: &SnapshotMeta) -> BusResult<Bytes> {
    let fail = |source: io::Error| BusError::SnapshotFile {
        path: path.to_path_buf(),
        action: "read",
        source,
    };
    let file = match fs::File::open(path) {
        Ok(file) => file,
        Err(e)
            if e.kind() == io::ErrorKind::NotFound && path.parent().is_some_and(Path::is_dir) =>
        {
            return Err(BusError::SnapshotMissing {
                version: meta.version,
            })
        }
        Err(e) => return Err(fail(e)),
    };
    let len = file.metadata().map_err(fail)?.len();
    if len != meta.bytes || len == 0 {
        // Not the snapshot described (nor one a map can hold): read what is there for the error.
        let data = fs::read(path).map_err(fail)?;
        meta.verify(&data)?;
        return Ok(Bytes::from(data));
    }
    // SAFETY: snapshot files are written under a temporary name and renamed into place, never
    // written again; deleting one unlinks it and leaves this mapping's pages. Every byte is read
    // (the checksum, then the model's load): the pages are mapped in one call, not one fault each.
    let map = unsafe { memmap2::MmapOptions::new().populate().map(&file) }.map_err(fail)?;
    meta.verify(&map)?;
    Ok(Bytes::from_owner(map))
}

/// Removes the files of snapshot `version` under `dir`, whole and as a delta; absent ones are
/// no error.
pub(crate) fn delete(dir: &Path, version: u64) -> BusResult<()> {
    for path in [version_path(dir, version), delta_path(dir, version)] {
        match fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                return Err(BusError::SnapshotFile {
                    path,
                    action: "delete",
                    source: e,
                })
            }
            _ => {}
        }
    }
    Ok(())
}

/// Removes every snapshot file of the run (`dir`, a [`run_dir`]); an absent directory is no error.
pub(crate) fn delete_all(dir: &Path) -> BusResult<()> {
    match fs::remove_dir_all(dir) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(BusError::SnapshotFile {
            path: dir.to_path_buf(),
            action: "delete",
            source: e,
        }),
        _ => Ok(()),
    }
}
