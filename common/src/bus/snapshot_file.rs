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

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use bytes::Bytes;

use super::{BusError, BusResult, Checksum, SnapshotMeta};

/// The directory of run `run_id`'s snapshots under `root`.
pub(crate) fn run_dir(root: &Path, run_id: &str) -> PathBuf {
    root.join(run_id)
}

/// The file of snapshot `version` under `dir` (a [`run_dir`]).
fn version_path(dir: &Path, version: u64) -> PathBuf {
    dir.join(format!("policy-v{version}.safetensors"))
}

/// Writes snapshot `version` under `dir` and describes it, its absolute path included.
pub(crate) fn write(dir: &Path, version: u64, data: &[u8]) -> BusResult<SnapshotMeta> {
    let fail = |path: &Path, source: io::Error| BusError::SnapshotFile {
        path: path.to_path_buf(),
        action: "write",
        source,
    };
    fs::create_dir_all(dir).map_err(|e| fail(dir, e))?;
    let dir = fs::canonicalize(dir).map_err(|e| fail(dir, e))?;
    let path = version_path(&dir, version);
    let partial = dir.join(format!(".policy-v{version}.{}.partial", std::process::id()));
    let written = fs::File::create(&partial)
        .and_then(|mut file| file.write_all(data))
        .and_then(|()| fs::rename(&partial, &path));
    if let Err(e) = written {
        // A full disk leaves no half file behind, and the versions already written stay.
        let _ = fs::remove_file(&partial);
        return Err(fail(&path, e));
    }
    Ok(SnapshotMeta {
        version,
        checksum: Checksum::xxh3(data),
        bytes: data.len() as u64,
        file: Some(path),
    })
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

/// Removes the file of snapshot `version` under `dir`; an absent one is no error.
pub(crate) fn delete(dir: &Path, version: u64) -> BusResult<()> {
    let path = version_path(dir, version);
    match fs::remove_file(&path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(BusError::SnapshotFile {
            path,
            action: "delete",
            source: e,
        }),
        _ => Ok(()),
    }
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
