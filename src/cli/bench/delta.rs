//! `caprl bench delta`: what a policy version's delta weighs against its full snapshot at a real
//! learning rate. The reference Transformer at COCO's shape (`--shape coco-ref`, 226 MB in f32)
//! takes `--steps` AdamW updates at `--lr` (default 5e-6, the reference SCST stage's,
//! configs/transformer-nsc.toml), each on the XE loss of 50 captions of 10 images: Adam's steps
//! are about `lr` in size whatever the loss, so the values an update changes are those an SCST
//! update at that rate would. After each update the snapshot is written in f32 and in bf16 and
//! compared with the one before: the share of values that changed, the delta's size
//! (`caprl_common::snapshot_delta`) and the time to make it and to rebuild and check the new
//! snapshot from it.

use std::time::Instant;

use anyhow::{Context, Result};
use caprl_common::{snapshot, snapshot_delta};
use caprl_model::model::{Captioner, DType};
use serde::Serialize;

use super::transformer::BenchShape;
use super::updating::Updating;
use crate::cli::write_stdout;

#[derive(Debug, Clone, clap::Args)]
pub struct DeltaBenchArgs {
    /// The model's shape (as `caprl bench transformer`'s).
    #[arg(long, value_enum, default_value = "coco-ref")]
    pub shape: BenchShape,
    /// Updates, each followed by a snapshot and its delta.
    #[arg(long, default_value_t = 6, value_parser = super::super::ranges::at_least_one)]
    pub steps: usize,
    /// AdamW's learning rate (default: the reference SCST stage's).
    #[arg(long, default_value_t = 5e-6)]
    pub lr: f64,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One snapshot dtype's figures, means over the updates after the first (Adam's first step
/// moves every value by `lr`; the later ones are the steady state).
#[derive(Debug, Default, Serialize)]
struct Row {
    dtype: &'static str,
    snapshot_bytes: usize,
    /// Share of the values that differ from the version before.
    changed_values: f64,
    delta_bytes: f64,
    encode_ms: f64,
    /// Rebuilding the new snapshot from the old one and the delta, checksums included.
    apply_ms: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    shape: BenchShape,
    lr: f64,
    steps: usize,
    threads: usize,
    simd: &'static str,
    /// Mean seconds of an update (forward, backward, AdamW).
    update_seconds: f64,
    rows: Vec<Row>,
}

pub fn run(args: DeltaBenchArgs) -> Result<()> {
    let report = measure(&args).context("bench delta")?;
    let out = if args.json {
        serde_json::to_string_pretty(&report)? + "\n"
    } else {
        table(&report)
    };
    write_stdout(&out)
}

fn measure(args: &DeltaBenchArgs) -> Result<Report> {
    let mut updating = Updating::new(args.shape)?;
    let dtypes = [(DType::F32, "f32", 4), (DType::BF16, "bf16", 2)];
    let encode =
        |model: &Captioner, dtype| snapshot::encode(model, Vec::new(), dtype, Some("bench"));
    let mut held: Vec<Vec<u8>> = dtypes
        .iter()
        .map(|&(d, ..)| encode(updating.model(), d))
        .collect::<Result<_, _>>()?;
    // The held snapshots' checksums, once a delta has made them (a reader knows them then).
    let mut sums: Vec<Option<u128>> = vec![None; dtypes.len()];
    let mut rows: Vec<Row> = dtypes
        .iter()
        .map(|&(_, name, _)| Row {
            dtype: name,
            ..Row::default()
        })
        .collect();
    let (mut update_seconds, mut counted) = (0.0, 0.0);
    for step in 1..=args.steps {
        let started = Instant::now();
        updating.step(args.lr)?;
        let steady = step > 1 || args.steps == 1;
        if steady {
            update_seconds += started.elapsed().as_secs_f64();
            counted += 1.0;
        }
        for ((&(dtype, _, width), (old, sum)), row) in dtypes
            .iter()
            .zip(held.iter_mut().zip(sums.iter_mut()))
            .zip(rows.iter_mut())
        {
            let next = encode(updating.model(), dtype)?;
            let started = Instant::now();
            let delta = snapshot_delta::encode(old, &next, width)?;
            let encode_s = started.elapsed().as_secs_f64();
            let changed = changed_share(old, &next, width);
            // As a reader does: the held snapshot becomes the new version in place.
            let started = Instant::now();
            *sum = Some(snapshot_delta::apply_in_place(old, *sum, &delta)?);
            let apply_s = started.elapsed().as_secs_f64();
            anyhow::ensure!(
                *old == next,
                "the rebuilt {dtype:?} snapshot differs from the full one"
            );
            if steady {
                row.snapshot_bytes = next.len();
                row.changed_values += changed;
                row.delta_bytes += delta.len() as f64;
                row.encode_ms += encode_s * 1e3;
                row.apply_ms += apply_s * 1e3;
            }
        }
    }
    for row in &mut rows {
        row.changed_values /= counted;
        row.delta_bytes /= counted;
        row.encode_ms /= counted;
        row.apply_ms /= counted;
    }
    Ok(Report {
        shape: args.shape,
        lr: args.lr,
        steps: args.steps,
        threads: candle_core::utils::get_num_threads(),
        simd: caprl_kernels::fastmath::simd().name(),
        update_seconds: update_seconds / counted,
        rows,
    })
}

/// The share of `width`-byte values that differ between `a` and `b`.
fn changed_share(a: &[u8], b: &[u8], width: usize) -> f64 {
    let changed = a
        .chunks(width)
        .zip(b.chunks(width))
        .filter(|(x, y)| x != y)
        .count();
    changed as f64 / a.len().div_ceil(width).max(1) as f64
}

fn table(r: &Report) -> String {
    let mut out = format!(
        "caprl bench delta: {:?} shape, {} AdamW updates at lr {:e} ({} threads, SIMD {}), \
         means over the updates after the first; an update takes {:.0} ms\n\
         | snapshot | MB | values changed | delta MB | delta / snapshot | make ms | rebuild + check ms | rebuild / update |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|\n",
        r.shape,
        r.steps,
        r.lr,
        r.threads,
        r.simd,
        r.update_seconds * 1e3
    );
    for row in &r.rows {
        out.push_str(&format!(
            "| {} | {:.1} | {:.1}% | {:.1} | {:.1}% | {:.0} | {:.0} | {:.1}% |\n",
            row.dtype,
            row.snapshot_bytes as f64 / 1e6,
            100.0 * row.changed_values,
            row.delta_bytes / 1e6,
            100.0 * row.delta_bytes / row.snapshot_bytes.max(1) as f64,
            row.encode_ms,
            row.apply_ms,
            100.0 * row.apply_ms / 1e3 / r.update_seconds.max(1e-9),
        ));
    }
    out
}
