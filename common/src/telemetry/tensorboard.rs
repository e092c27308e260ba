//! TensorBoard event files (`RUN_DIR/tb/events.out.tfevents.*`), so a run can
//! be watched in TensorBoard as self-critical.pytorch's runs are.
//!
//! Hand-written rather than taken from a crate: the format is small and
//! stable, while the crates.io writers (`tensorboard-rs`, `tboard`) pull in a
//! protobuf code generator and an old `image`, and are unmaintained. A file is
//! a sequence of TFRecords (u64 length, masked CRC-32C of the length, the
//! bytes, masked CRC-32C of the bytes), each a `tensorflow.Event` protobuf:
//! first `file_version: "brain.Event:2"`, then one event per step holding
//! `summary { value { tag, simple_value } }` scalars, or a string tensor with
//! plugin `text` for text (the run config, sample captions).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::error::{Result, TelemetryError};
use super::runlog::{SamplesRecord, StepRecord};

/// Name of the event-file directory inside a run directory.
pub const TB_DIR: &str = "tb";

/// Appends events to one new event file; every event is written and flushed
/// at once, so TensorBoard shows a running job live and a crash loses nothing
/// written before it.
#[derive(Debug)]
pub struct EventWriter {
    path: PathBuf,
    file: File,
}

impl EventWriter {
    /// Starts a new event file in `dir` (created if missing). A resumed run
    /// gets a second file in the same directory; TensorBoard reads them all.
    pub fn create(dir: &Path) -> Result<EventWriter> {
        std::fs::create_dir_all(dir)
            .map_err(|e| TelemetryError::io("create the TensorBoard directory", dir, e))?;
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "caprl".into());
        let secs = wall_time() as u64;
        let pid = std::process::id();
        // TensorBoard orders files by name: the timestamp first keeps resumed files after.
        let path = (0u32..)
            .map(|n| {
                dir.join(format!(
                    "events.out.tfevents.{secs:010}.{host}.{pid}.{n}.caprl"
                ))
            })
            .find(|p| !p.exists())
            .unwrap_or_else(|| dir.join("events.out.tfevents.caprl"));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| TelemetryError::io("create", &path, e))?;
        let mut writer = EventWriter { path, file };
        let mut event = Vec::new();
        put_double(&mut event, 1, wall_time());
        put_bytes(&mut event, 3, b"brain.Event:2");
        writer.write_record(&event)?;
        Ok(writer)
    }

    /// Path of the event file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes the finite `scalars` (tag, value) as one event at `step`;
    /// non-finite values are left out (TensorBoard would draw them as spikes).
    pub fn scalars<'a>(
        &mut self,
        step: u64,
        scalars: impl IntoIterator<Item = (&'a str, f64)>,
    ) -> Result<()> {
        let mut summary = Vec::new();
        for (tag, value) in scalars {
            if !value.is_finite() {
                continue;
            }
            let mut v = Vec::new();
            put_bytes(&mut v, 1, tag.as_bytes());
            put_float(&mut v, 2, value as f32);
            put_bytes(&mut summary, 1, &v);
        }
        if summary.is_empty() {
            return Ok(());
        }
        self.write_summary(step, &summary)
    }

    /// Writes `text` (Markdown, as TensorBoard's text tab renders it) under `tag` at `step`.
    pub fn text(&mut self, step: u64, tag: &str, text: &str) -> Result<()> {
        let mut plugin = Vec::new();
        put_bytes(&mut plugin, 1, b"text");
        let mut metadata = Vec::new();
        put_bytes(&mut metadata, 1, &plugin);
        let mut tensor = Vec::new();
        put_varint_field(&mut tensor, 1, DT_STRING);
        put_bytes(&mut tensor, 2, &[]);
        put_bytes(&mut tensor, 8, text.as_bytes());
        let mut v = Vec::new();
        put_bytes(&mut v, 1, tag.as_bytes());
        put_bytes(&mut v, 8, &tensor);
        put_bytes(&mut v, 9, &metadata);
        let mut summary = Vec::new();
        put_bytes(&mut summary, 1, &v);
        self.write_summary(step, &summary)
    }

    fn write_summary(&mut self, step: u64, summary: &[u8]) -> Result<()> {
        let mut event = Vec::new();
        put_double(&mut event, 1, wall_time());
        put_varint_field(&mut event, 2, step);
        put_bytes(&mut event, 5, summary);
        self.write_record(&event)
    }

    fn write_record(&mut self, data: &[u8]) -> Result<()> {
        let len = (data.len() as u64).to_le_bytes();
        let mut record = Vec::with_capacity(data.len() + 16);
        record.extend_from_slice(&len);
        record.extend_from_slice(&masked_crc32c(&len).to_le_bytes());
        record.extend_from_slice(data);
        record.extend_from_slice(&masked_crc32c(data).to_le_bytes());
        self.file
            .write_all(&record)
            .and_then(|()| self.file.flush())
            .map_err(|e| TelemetryError::io("append to", &self.path, e))
    }
}

/// Every scalar of a step record under its TensorBoard tag (`loss/total`,
/// `reward/cider`, `train/grad_norm`, ...); the tag's first part groups the
/// charts in TensorBoard as the report's sections do.
pub(crate) fn step_scalars(record: &StepRecord) -> Vec<(String, f64)> {
    let mut out: Vec<(String, f64)> = Vec::new();
    out.extend(record.losses.iter().map(|(k, v)| (format!("loss/{k}"), *v)));
    out.extend(
        record
            .rewards
            .iter()
            .map(|(k, v)| (format!("reward/{k}"), *v)),
    );
    for (tag, v) in [
        ("train/grad_norm", record.grad_norm),
        ("train/lr", record.lr),
        ("train/policy_lag", record.lag),
        ("train/max_policy_lag", record.max_lag as f64),
        ("train/importance_weight", record.importance_weight),
        ("train/dropped_stale", record.dropped_stale as f64),
        ("train/stale_reweighted", record.stale_reweighted as f64),
        ("train/tasks_issued", record.tasks_issued as f64),
        ("train/groups_dropped", record.groups_dropped as f64),
        ("train/results_found", record.results_found as f64),
        ("train/epoch", record.epoch as f64),
        ("train/policy_version", record.policy_version as f64),
        ("throughput/tokens_per_s", record.tokens_per_s),
        ("throughput/rollouts_per_s", record.rollouts_per_s),
        ("throughput/step_seconds", record.seconds),
    ] {
        out.push((tag.to_string(), v));
    }
    out.extend(
        record
            .rejected
            .iter()
            .map(|(reason, n)| (format!("rejected/{reason}"), *n as f64)),
    );
    out.extend(record.ppo.iter().map(|(k, v)| (format!("ppo/{k}"), *v)));
    out.extend(
        record
            .off_policy
            .iter()
            .map(|(k, v)| (format!("off_policy/{k}"), *v)),
    );
    out
}

/// The run config as a Markdown code block (the text tab renders Markdown).
pub(crate) fn config_markdown(config_toml: &str) -> String {
    let body: String = config_toml.lines().map(|l| format!("    {l}\n")).collect();
    format!("Run config:\n\n{body}")
}

/// One Markdown table of the sample captions of an evaluation.
pub(crate) fn samples_markdown(record: &SamplesRecord) -> String {
    let cell = |s: &str| s.replace('|', "\\|").replace('\n', " ");
    let mut md = format!(
        "Step {} ({}):\n\n| image | greedy | beam | references |\n|---|---|---|---|\n",
        record.step, record.phase
    );
    for img in &record.images {
        md.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            cell(&img.image),
            cell(&img.greedy),
            cell(&img.beam),
            cell(&img.refs.join(" / "))
        ));
    }
    md
}

/// `tensorflow.DataType.DT_STRING`.
const DT_STRING: u64 = 7;

fn wall_time() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_varint_field(out: &mut Vec<u8>, field: u64, v: u64) {
    put_varint(out, field << 3);
    put_varint(out, v);
}

fn put_double(out: &mut Vec<u8>, field: u64, v: f64) {
    put_varint(out, (field << 3) | 1);
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_float(out: &mut Vec<u8>, field: u64, v: f32) {
    put_varint(out, (field << 3) | 5);
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, field: u64, bytes: &[u8]) {
    put_varint(out, (field << 3) | 2);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// CRC-32C (Castagnoli), bitwise: event records are small and few.
fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// TFRecord's masking of a CRC (so a CRC of data holding CRCs stays strong).
fn masked_crc32c(data: &[u8]) -> u32 {
    let crc = crc32c(data);
    (crc.rotate_right(15)).wrapping_add(0xa282_ead8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_matches_the_rfc_3720_check_value() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
    }
}
