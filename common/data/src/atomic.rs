//! Atomic file writes: write a temporary file in the target's directory, fsync, rename.
//! A reader never sees a half-written `vocab.json` or feature file, even after a crash.

use std::io::Write;
use std::path::Path;

use super::error::DataError;

/// Write `bytes` to `path` atomically (temp file in the same directory, then rename).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), DataError> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".to_string());
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{name}.tmp-"))
        .tempfile_in(dir)
        .map_err(|e| DataError::io(path, e))?;
    tmp.write_all(bytes).map_err(|e| DataError::io(path, e))?;
    tmp.as_file()
        .sync_all()
        .map_err(|e| DataError::io(path, e))?;
    tmp.persist(path)
        .map_err(|e| DataError::io(path, e.error))?;
    Ok(())
}

/// Serialize `value` as pretty JSON (trailing newline) and write it atomically.
pub fn write_json_atomic<T: serde::Serialize>(path: &Path, value: &T) -> Result<(), DataError> {
    let mut bytes = serde_json::to_vec_pretty(value)
        .map_err(|e| DataError::invalid(path, format!("cannot serialize JSON: {e}")))?;
    bytes.push(b'\n');
    write_atomic(path, &bytes)
}
