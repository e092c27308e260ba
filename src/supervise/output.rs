//! Where the supervised roles' output goes: this process's terminal (each line prefixed with
//! the role's name) or one log file per role, and the last lines of each kept for the message
//! of a role that keeps failing.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};

/// Where the roles' output goes.
#[derive(Debug, Clone)]
pub enum Output {
    /// This process's stdout and stderr, each line prefixed with `[name]`.
    Terminal,
    /// `DIR/<name>.log`, appended to across restarts.
    Dir(PathBuf),
}

/// Lines of a role's output kept for the message of a role that keeps failing.
const TAIL_LINES: usize = 20;

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub(super) fn open_log(dir: &Path, name: &str) -> Result<File> {
    let path = dir.join(format!("{name}.log"));
    File::options()
        .create(true)
        .append(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))
}

/// Where one output stream of a role goes.
pub(super) struct Sink {
    name: String,
    to_stderr: bool,
    file: Option<Arc<Mutex<File>>>,
    tail: Arc<Mutex<VecDeque<String>>>,
}

impl Sink {
    pub(super) fn new(
        name: &str,
        to_stderr: bool,
        file: Option<Arc<Mutex<File>>>,
        tail: &Arc<Mutex<VecDeque<String>>>,
    ) -> Sink {
        Sink {
            name: name.to_string(),
            to_stderr,
            file,
            tail: Arc::clone(tail),
        }
    }

    fn line(&self, text: &str) {
        {
            let mut tail = lock(&self.tail);
            if tail.len() == TAIL_LINES {
                tail.pop_front();
            }
            tail.push_back(text.to_string());
        }
        let name = &self.name;
        let _ = match (&self.file, self.to_stderr) {
            (Some(f), _) => writeln!(lock(f), "{text}"),
            (None, true) => writeln!(std::io::stderr().lock(), "[{name}] {text}"),
            (None, false) => writeln!(std::io::stdout().lock(), "[{name}] {text}"),
        };
    }
}

/// Copies a child's output line by line into `sink`.
pub(super) fn pump<R: Read + Send + 'static>(from: R, sink: Sink) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(from).split(b'\n') {
            let Ok(line) = line else { break };
            let text = String::from_utf8_lossy(&line);
            sink.line(text.trim_end_matches('\r'));
        }
    })
}
