//! The one rule for every `--out`: a command never writes over a file it reads, nor into the
//! data set, checkpoint or run directory it was given (save the one file it owns there, such as
//! `data df`'s `train-df.bin`).

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

/// An input of a command: what it is (for the message) and where.
pub struct Input<'a> {
    pub what: &'a str,
    pub path: &'a Path,
}

/// `path` made absolute with its symbolic links resolved as far as it exists (the output file
/// itself usually does not exist yet).
fn resolved(path: &Path) -> PathBuf {
    if let Ok(p) = path.canonicalize() {
        return p;
    }
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => {
            let parent = if parent.as_os_str().is_empty() {
                Path::new(".")
            } else {
                parent
            };
            resolved(parent).join(name)
        }
        _ => path.to_path_buf(),
    }
}

/// Refuses `out` when it is one of `inputs` (a file the command reads) or lies inside one of
/// them (a directory), unless its file name is one of `owned` (the files the command itself
/// keeps in that directory).
pub fn check_output(flag: &str, out: &Path, inputs: &[Input], owned: &[&str]) -> Result<()> {
    let target = resolved(out);
    for input in inputs {
        let source = resolved(input.path);
        if target == source {
            bail!(
                "{flag} {}: that is the {} this command reads; write the output elsewhere",
                out.display(),
                input.what
            );
        }
        let name = target
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if source.is_dir() && target.starts_with(&source) && !owned.contains(&name) {
            bail!(
                "{flag} {}: that is inside the {} {} this command reads, and nothing it writes \
                 belongs there; write the output elsewhere",
                out.display(),
                input.what,
                input.path.display()
            );
        }
    }
    Ok(())
}
