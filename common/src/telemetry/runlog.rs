//! The learner's run log: `RUN_DIR/config.toml` plus `RUN_DIR/run.jsonl`.
//!
//! `run.jsonl` holds one JSON object per line. The first line is the header
//! (`{"type":"header","config":{..},"versions":{"caprl":..},..}`), then one
//! `{"type":"step",..}` line per optimizer step and one `{"type":"eval",..}`
//! line per evaluation. Each line is written with a single `write` call and no
//! buffering, so a crash loses at most the line being written; the reader
//! tolerates that torn last line and rejects damage anywhere else.
//!
//! Sample captions of the fixed validation images are `{"type":"samples",..}`
//! lines, one per evaluation. With [`RunLog::mirror_to_tensorboard`] every
//! record is also written to TensorBoard event files.
//!
//! Non-finite floats (a NaN loss on a skipped batch) are written as `null`
//! (JSON has no NaN) and read back as NaN.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::Value;

use super::error::{Result, TelemetryError};
pub use super::records::{EvalRecord, ResumeRecord, SampleCaption, SamplesRecord, StepRecord};
use super::tensorboard::{self, EventWriter};

/// File name of the run log inside a run directory.
pub const RUN_LOG_FILE: &str = "run.jsonl";
/// File name of the config copy inside a run directory.
pub const CONFIG_FILE: &str = "config.toml";
/// Version of the line format, written to the header's `versions.run_log`.
pub const RUN_LOG_SCHEMA: u32 = 1;

/// Everything read back from a `run.jsonl`.
#[derive(Debug, Clone)]
pub struct RunLogContents {
    /// The file that was read.
    pub path: PathBuf,
    /// The header line as written (`type`, `config`, `versions`, caller fields).
    pub header: Value,
    /// Step records in step order. Where a resumed run repeated steps (it
    /// restarted from a checkpoint older than the last logged step), the
    /// records of the later attempt replace those of the earlier one.
    pub steps: Vec<StepRecord>,
    /// Eval records, in step order, with the same resume rule as `steps`.
    pub evals: Vec<EvalRecord>,
    /// One record per `--resume` start, in file order.
    pub resumes: Vec<ResumeRecord>,
    /// Sample captions per evaluation, in step order, with the same resume rule.
    pub samples: Vec<SamplesRecord>,
    /// What was tolerated while reading (a torn last line, unknown line types).
    pub warnings: Vec<String>,
}

impl RunLogContents {
    /// The run config recorded in the header (as JSON), if any.
    pub fn config(&self) -> Option<&Value> {
        self.header.get("config")
    }
}

/// Append-only writer of one run's `run.jsonl`.
#[derive(Debug)]
pub struct RunLog {
    path: PathBuf,
    file: File,
    tensorboard: Option<EventWriter>,
}

impl RunLog {
    /// Starts a run log in `run_dir` (created if missing): writes
    /// `config.toml` verbatim and the header line of `run.jsonl`.
    ///
    /// `header` holds extra header fields (run id, seed, device, git
    /// commit, ...) as a JSON object; its `versions` object, if any, is merged
    /// into the versions caprl records itself. Fails if `run.jsonl` exists.
    pub fn create(run_dir: &Path, config_toml: &str, header: Value) -> Result<RunLog> {
        let config: toml::Value = toml::from_str(config_toml)?;
        let config = serde_json::to_value(config)?;
        let mut line = match header {
            Value::Object(map) => map,
            Value::Null => serde_json::Map::new(),
            other => {
                return Err(TelemetryError::HeaderNotObject {
                    got: truncate(&other.to_string(), 80),
                })
            }
        };
        let mut versions = serde_json::Map::new();
        versions.insert("caprl".into(), env!("CARGO_PKG_VERSION").into());
        versions.insert("run_log".into(), RUN_LOG_SCHEMA.into());
        if let Some(Value::Object(extra)) = line.remove("versions") {
            versions.extend(extra);
        }
        line.remove("type");
        line.entry("unix_ms")
            .or_insert_with(|| unix_ms_now().into());
        let head = format!(
            "{{\"type\":\"header\",\"versions\":{},\"config\":{}",
            Value::Object(versions),
            config
        );
        line.remove("config");
        let rest = serde_json::to_string(&Value::Object(line))?;
        let header_line = match rest.strip_prefix('{').filter(|r| *r != "}") {
            Some(rest) => format!("{head},{rest}"),
            None => format!("{head}}}"),
        };

        std::fs::create_dir_all(run_dir)
            .map_err(|e| TelemetryError::io("create the run directory", run_dir, e))?;
        let path = run_dir.join(RUN_LOG_FILE);
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => {
                    TelemetryError::RunLogExists { path: path.clone() }
                }
                _ => TelemetryError::io("create", &path, e),
            })?;
        let config_path = run_dir.join(CONFIG_FILE);
        std::fs::write(&config_path, config_toml)
            .map_err(|e| TelemetryError::io("write", &config_path, e))?;
        let mut log = RunLog {
            path,
            file,
            tensorboard: None,
        };
        log.write_line(header_line)?;
        Ok(log)
    }

    /// Reopens the run log of `run_dir` to continue a resumed run.
    ///
    /// A torn last line left by a crash is cut off (with a warning) so the
    /// next record starts on a line of its own.
    pub fn open_append(run_dir: &Path) -> Result<RunLog> {
        let path = run_dir.join(RUN_LOG_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => {
                    TelemetryError::RunLogMissing { path: path.clone() }
                }
                _ => TelemetryError::io("open", &path, e),
            })?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .map_err(|e| TelemetryError::io("read", &path, e))?;
        if !bytes.is_empty() && !bytes.ends_with(b"\n") {
            let keep = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            tracing::warn!(
                path = %path.display(),
                dropped_bytes = bytes.len() - keep,
                "run log ends in a torn line (crash while writing); cutting it off before appending"
            );
            file.set_len(keep as u64)
                .map_err(|e| TelemetryError::io("truncate the torn last line of", &path, e))?;
        }
        file.seek(SeekFrom::End(0))
            .map_err(|e| TelemetryError::io("seek to the end of", &path, e))?;
        Ok(RunLog {
            path,
            file,
            tensorboard: None,
        })
    }

    /// Also writes every following record to a new TensorBoard event file in
    /// `dir` (scalars by tag, sample captions as text), starting with the run
    /// config as text at `step`: 0 for a new run, the step a resumed run
    /// continues from (TensorBoard drops everything logged after a step that
    /// goes backwards, as it should for steps a resumed run repeats).
    pub fn mirror_to_tensorboard(
        &mut self,
        dir: &Path,
        config_toml: &str,
        step: u64,
    ) -> Result<()> {
        let mut writer = EventWriter::create(dir)?;
        writer.text(step, "config", &tensorboard::config_markdown(config_toml))?;
        self.tensorboard = Some(writer);
        Ok(())
    }

    /// Path of the `run.jsonl` being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one step line (a zero `unix_ms` is filled with the current time).
    pub fn log_step(&mut self, record: &StepRecord) -> Result<()> {
        let line = if record.unix_ms == 0 {
            tagged(
                "step",
                &StepRecord {
                    unix_ms: unix_ms_now(),
                    ..record.clone()
                },
            )?
        } else {
            tagged("step", record)?
        };
        self.write_line(line)?;
        if let Some(tb) = self.tensorboard.as_mut() {
            let scalars = tensorboard::step_scalars(record);
            tb.scalars(record.step, scalars.iter().map(|(k, v)| (k.as_str(), *v)))?;
        }
        Ok(())
    }

    /// Appends one eval line (a zero `unix_ms` is filled with the current time).
    pub fn log_eval(&mut self, record: &EvalRecord) -> Result<()> {
        let line = if record.unix_ms == 0 {
            tagged(
                "eval",
                &EvalRecord {
                    unix_ms: unix_ms_now(),
                    ..record.clone()
                },
            )?
        } else {
            tagged("eval", record)?
        };
        self.write_line(line)?;
        if let Some(tb) = self.tensorboard.as_mut() {
            let scalars: Vec<(String, f64)> = record
                .metrics
                .iter()
                .map(|(k, v)| (format!("eval_{}/{k}", record.split), *v))
                .collect();
            tb.scalars(record.step, scalars.iter().map(|(k, v)| (k.as_str(), *v)))?;
        }
        Ok(())
    }

    /// Appends one samples line (a zero `unix_ms` is filled with the current time).
    pub fn log_samples(&mut self, record: &SamplesRecord) -> Result<()> {
        let stamped = SamplesRecord {
            unix_ms: match record.unix_ms {
                0 => unix_ms_now(),
                ms => ms,
            },
            ..record.clone()
        };
        self.write_line(tagged("samples", &stamped)?)?;
        if let Some(tb) = self.tensorboard.as_mut() {
            tb.text(
                record.step,
                "samples/captions",
                &tensorboard::samples_markdown(record),
            )?;
        }
        Ok(())
    }

    /// Appends the record of a `--resume` start (a zero `unix_ms` is filled in).
    pub fn log_resume(&mut self, record: &ResumeRecord) -> Result<()> {
        let unix_ms = match record.unix_ms {
            0 => unix_ms_now(),
            t => t,
        };
        self.write_line(tagged(
            "resume",
            &ResumeRecord {
                unix_ms,
                ..record.clone()
            },
        )?)
    }

    fn write_line(&mut self, mut line: String) -> Result<()> {
        line.push('\n');
        self.file
            .write_all(line.as_bytes())
            .and_then(|()| self.file.flush())
            .map_err(|e| TelemetryError::io("append to", &self.path, e))
    }
}

/// `record` as one JSON object with `"type": kind` as its first key (so a
/// reader can tell line kinds apart at a glance with `head`/`grep`).
fn tagged<T: Serialize>(kind: &str, record: &T) -> Result<String> {
    let body = serde_json::to_string(record)?;
    Ok(match body.strip_prefix('{').filter(|rest| *rest != "}") {
        Some(rest) => format!("{{\"type\":\"{kind}\",{rest}"),
        None => format!("{{\"type\":\"{kind}\"}}"),
    })
}

/// Milliseconds since the Unix epoch (0 if the clock is before 1970).
pub fn unix_ms_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Reads a `run.jsonl` back.
///
/// A last line that does not parse (the run was killed mid-write) is skipped
/// with a warning; a bad line anywhere else is an error naming file and line.
pub fn read_run_log(path: &Path) -> Result<RunLogContents> {
    let bytes = std::fs::read(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => TelemetryError::RunLogMissing {
            path: path.to_path_buf(),
        },
        _ => TelemetryError::io("read", path, e),
    })?;
    let mut lines: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
    if lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    let last = lines.len();
    let mut warnings = Vec::new();
    let mut header = None;
    let mut records = Records::default();
    for (index, raw) in lines.iter().enumerate() {
        let line_no = index + 1;
        if raw.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let malformed = |reason: String| TelemetryError::MalformedLine {
            path: path.to_path_buf(),
            line: line_no,
            reason,
        };
        let value: Value = match serde_json::from_slice(raw) {
            Ok(v) => v,
            Err(e) if line_no == last && line_no > 1 => {
                let msg = format!(
                    "{}:{line_no}: ignoring a truncated last line ({e}); the run was probably stopped while writing it",
                    path.display()
                );
                tracing::warn!("{msg}");
                warnings.push(msg);
                continue;
            }
            Err(e) => return Err(malformed(format!("not a JSON object: {e}"))),
        };
        let kind = value
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if header.is_none() {
            if kind != "header" {
                return Err(TelemetryError::MissingHeader {
                    path: path.to_path_buf(),
                    found: truncate(&String::from_utf8_lossy(raw), 80),
                });
            }
            header = Some(value);
            continue;
        }
        match kind.as_str() {
            "header" => {
                return Err(malformed(
                    "a second header line; two runs were written into one run.jsonl".into(),
                ))
            }
            _ => {
                if !records.take(&kind, value).map_err(malformed)? {
                    let msg = format!(
                        "{}:{line_no}: skipping a line of unknown type {kind:?} (written by a newer caprl?)",
                        path.display()
                    );
                    tracing::warn!("{msg}");
                    warnings.push(msg);
                }
            }
        }
    }
    let header = header.ok_or_else(|| TelemetryError::MissingHeader {
        path: path.to_path_buf(),
        found: "an empty file".into(),
    })?;
    Ok(RunLogContents {
        path: path.to_path_buf(),
        header,
        steps: records.steps,
        evals: records.evals,
        resumes: records.resumes,
        samples: records.samples,
        warnings,
    })
}

/// The records of a run log read so far, by kind.
#[derive(Default)]
struct Records {
    steps: Vec<StepRecord>,
    evals: Vec<EvalRecord>,
    resumes: Vec<ResumeRecord>,
    samples: Vec<SamplesRecord>,
}

impl Records {
    /// Takes one record of `kind` (`Ok(false)` for a kind it does not know). A step, eval or
    /// samples record at or before the last one's step was written by a resumed run: it
    /// replaces the records from that step on.
    fn take(&mut self, kind: &str, value: Value) -> std::result::Result<bool, String> {
        let bad = |e: serde_json::Error| format!("bad {kind} record: {e}");
        match kind {
            "step" => {
                let record: StepRecord = serde_json::from_value(value).map_err(bad)?;
                if self.steps.last().is_some_and(|s| s.step >= record.step) {
                    self.steps.retain(|s| s.step < record.step);
                }
                self.steps.push(record);
            }
            "eval" => {
                let record: EvalRecord = serde_json::from_value(value).map_err(bad)?;
                if self.evals.last().is_some_and(|r| r.step >= record.step) {
                    self.evals.retain(|r| {
                        r.step < record.step || (r.step == record.step && r.split != record.split)
                    });
                }
                self.evals.push(record);
            }
            "resume" => self
                .resumes
                .push(serde_json::from_value(value).map_err(bad)?),
            "samples" => {
                let record: SamplesRecord = serde_json::from_value(value).map_err(bad)?;
                if self.samples.last().is_some_and(|r| r.step >= record.step) {
                    self.samples.retain(|r| r.step < record.step);
                }
                self.samples.push(record);
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

fn truncate(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_owned(),
    }
}
