//! `py:<function>`: a reward written in Python, served to this worker by a child process.
//!
//! The worker starts `python3 -c <reward_server.py> <reward.python>` (the interpreter is
//! `$CAPRL_PYTHON` when set) and asks it for the spec's functions before it takes any work: a
//! missing module or function stops the worker at start with Python's message. Each rollout is
//! then one call per function — the captions as words and ids, their images' ids, rows and
//! references — answered with one number per caption. Everything around the call is the
//! worker's own, as for every other reward: the queue, in-progress acks, redelivery, the run log
//! and the metrics.
//!
//! When the function raises, returns the wrong number of values, or a value that is not a finite
//! number, the reward is wrong for every rollout alike: the worker stops with the message
//! ([`RewardError::Python`]) and hands nothing back as scored, so the run stops with it instead
//! of training on a zero. When the child process dies (killed, out of memory), the rollout is
//! handed back and the next one starts a fresh child ([`RewardError::PythonGone`]).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex};

use serde::Deserialize;
use serde_json::json;

use super::{Batch, Reward};
use crate::RewardError;

/// The prefix of a Python reward's name in `reward.spec`.
pub const PREFIX: &str = "py:";

/// The serving loop on the Python side (also `caprl.reward_server` in the Python package).
const SERVER: &str = include_str!("../../../python/caprl/reward_server.py");

/// The child process that runs the Python functions, started again after it died.
pub struct PythonServer {
    /// `reward.python`: a module name or a `.py` file.
    module: String,
    /// The data set's directory (`Batch.features()` reads the `fc` rows there).
    data_dir: String,
    functions: Vec<String>,
    /// The vocabulary's words, by id (captions are sent as words).
    words: Vec<String>,
    /// Image id and references (words joined by spaces) by feature row.
    images: Vec<Option<(String, Vec<String>)>>,
    process: Mutex<Option<Process>>,
}

struct Process {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

#[derive(Deserialize)]
struct Reply {
    #[serde(default)]
    values: Option<Vec<f64>>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    kind: Option<String>,
}

impl PythonServer {
    /// Starts the child for `functions` of `module` and checks it has them all.
    pub fn start(
        module: &str,
        functions: Vec<String>,
        data: &caprl_data::Dataset,
        items: &[caprl_data::Item],
    ) -> Result<Arc<Self>, RewardError> {
        let max_row = items.iter().map(|it| it.row).max().unwrap_or(0);
        let mut images = vec![None; max_row + 1];
        for it in items {
            let refs = it.refs.iter().map(|r| r.join(" ")).collect();
            images[it.row] = Some((it.id.clone(), refs));
        }
        let server = PythonServer {
            module: module.to_string(),
            data_dir: data.dir().display().to_string(),
            functions,
            words: data.vocab.words().to_vec(),
            images,
            process: Mutex::new(None),
        };
        *server.process.lock().expect("python process lock") = Some(server.spawn()?);
        Ok(Arc::new(server))
    }

    fn spawn(&self) -> Result<Process, RewardError> {
        let python = std::env::var("CAPRL_PYTHON").unwrap_or_else(|_| "python3".to_string());
        let gone = |e: std::io::Error| RewardError::PythonStart {
            module: self.module.clone(),
            message: format!("cannot run {python} ({e}); install Python 3 or set CAPRL_PYTHON"),
        };
        let mut child = Command::new(&python)
            .args(["-c", SERVER, &self.module])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(gone)?;
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut process = Process {
            child,
            stdin,
            stdout,
        };
        let hello = json!({ "functions": self.functions, "data": self.data_dir });
        match exchange(&mut process, &hello) {
            Ok(Reply { error: None, .. }) => Ok(process),
            Ok(Reply {
                error: Some(message),
                ..
            }) => Err(RewardError::PythonStart {
                module: self.module.clone(),
                message,
            }),
            Err(e) => Err(RewardError::PythonStart {
                module: self.module.clone(),
                message: format!("the Python process ended before it answered ({e})"),
            }),
        }
    }

    /// `function`'s values for `batch`.
    fn call(&self, function: &str, batch: &Batch<'_>) -> Result<Vec<f64>, RewardError> {
        let request = json!({ "function": function, "batch": self.fields(batch)? });
        let mut held = self.process.lock().expect("python process lock");
        let process = match held.as_mut() {
            Some(p) => p,
            None => held.insert(self.spawn()?),
        };
        let reply = match exchange(process, &request) {
            Ok(reply) => reply,
            Err(e) => {
                if let Some(mut dead) = held.take() {
                    let _ = dead.child.kill();
                    let _ = dead.child.wait();
                }
                return Err(RewardError::PythonGone {
                    function: format!("{PREFIX}{function}"),
                    module: self.module.clone(),
                    task: batch.task.to_string(),
                    message: e,
                });
            }
        };
        let python = |message: String| RewardError::Python {
            function: format!("{PREFIX}{function}"),
            module: self.module.clone(),
            task: batch.task.to_string(),
            message,
        };
        match reply {
            Reply {
                values: Some(v), ..
            } if v.len() == batch.captions.len() => Ok(v),
            Reply {
                error: Some(message),
                ..
            } => Err(python(message)),
            Reply { kind, .. } => Err(python(format!(
                "the reward server gave no values ({kind:?}); is reward_server.py the one of this \
                 caprl?"
            ))),
        }
    }

    /// The batch as the Python side's `Batch` reads it.
    fn fields(&self, batch: &Batch<'_>) -> Result<serde_json::Value, RewardError> {
        let n = batch.captions.len();
        let (mut ids, mut rows, mut captions, mut tokens, mut finished, mut refs) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        for c in &batch.captions {
            let (id, image_refs) = self
                .images
                .get(c.row as usize)
                .and_then(Option::as_ref)
                .ok_or(RewardError::UnknownRow(c.row))?;
            let words: Vec<&str> = c
                .words()
                .iter()
                .map(|&t| self.words.get(t as usize).map_or("<unk>", String::as_str))
                .collect();
            ids.push(id.as_str());
            rows.push(c.row);
            captions.push(words.join(" "));
            tokens.push(c.words());
            finished.push(c.finished());
            refs.push(image_refs);
        }
        Ok(json!({
            "task": batch.task,
            "image_ids": ids,
            "rows": rows,
            "captions": captions,
            "tokens": tokens,
            "finished": finished,
            "references": refs,
        }))
    }
}

impl Drop for PythonServer {
    fn drop(&mut self) {
        if let Ok(mut held) = self.process.lock() {
            if let Some(mut p) = held.take() {
                let _ = p.child.kill();
                let _ = p.child.wait();
            }
        }
    }
}

/// Sends one request line and reads one reply line.
fn exchange(process: &mut Process, request: &serde_json::Value) -> Result<Reply, String> {
    let mut line = request.to_string();
    line.push('\n');
    process
        .stdin
        .write_all(line.as_bytes())
        .and_then(|()| process.stdin.flush())
        .map_err(|e| format!("writing to the Python process: {e}"))?;
    let mut reply = String::new();
    match process.stdout.read_line(&mut reply) {
        Ok(0) => Err("the Python process exited".to_string()),
        Ok(_) => serde_json::from_str(&reply)
            .map_err(|e| format!("the Python process answered {reply:?} ({e})")),
        Err(e) => Err(format!("reading from the Python process: {e}")),
    }
}

/// One `py:` term of the spec.
pub struct PythonReward {
    pub server: Arc<PythonServer>,
    /// The function's name, without [`PREFIX`].
    pub function: String,
}

impl Reward for PythonReward {
    fn score(&self, batch: &Batch<'_>) -> Result<Vec<f64>, RewardError> {
        self.server.call(&self.function, batch)
    }
}
