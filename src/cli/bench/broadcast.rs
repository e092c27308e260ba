//! `caprl bench broadcast`: how a policy version reaches its readers through a real nats-server
//! at a real model's size. The reference Transformer at COCO's shape (`--shape coco-ref`) takes
//! `--versions` AdamW updates at `--lr` (default 5e-6, the reference SCST stage's), and each
//! version's snapshot (`--dtype`) is stored by a learner's bus (whole every `--full-every`, as a
//! delta against the one before in between, as `runtime.snapshot_full_every` says) and fetched
//! by `--readers` buses of their own connections, as actors fetch it: the deltas after the
//! version each holds, checked. With `--readers-per-host`, each host's readers share one cache
//! (`runtime.snapshot_cache_dir`). Per version: the bytes the server took in and sent out, and
//! the time from the start of the publish to the last reader holding the checked bytes (the
//! actor's load into its model comes after and is not counted).

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use bytes::Bytes;
use caprl_common::bus::{Bus, BusOptions, NatsBus, NatsConfig};
use caprl_common::config::{Dtype, RuntimeConfig};
use caprl_common::snapshot;
use serde::Serialize;

use super::scale::{monitored_server, varz};
use super::transformer::BenchShape;
use super::updating::Updating;
use crate::cli::write_stdout;

#[derive(Debug, Clone, clap::Args)]
pub struct BroadcastBenchArgs {
    /// The model's shape (as `caprl bench transformer`'s).
    #[arg(long, value_enum, default_value = "coco-ref")]
    pub shape: BenchShape,
    /// Policy versions published, each after an update.
    #[arg(long, default_value_t = 6, value_parser = super::super::ranges::at_least_one)]
    pub versions: usize,
    /// AdamW's learning rate (default: the reference SCST stage's).
    #[arg(long, default_value_t = 5e-6)]
    pub lr: f64,
    /// The snapshots' dtype (`runtime.snapshot_dtype`): bf16, f16 or f32.
    #[arg(long, default_value = "bf16")]
    pub dtype: Dtype,
    /// A version is stored whole every this many, else as a delta (`runtime.snapshot_full_every`).
    #[arg(long, default_value_t = 10, value_parser = super::super::ranges::at_least_one)]
    pub full_every: usize,
    /// Reader counts to measure, one fresh server each.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
    pub readers: Vec<usize>,
    /// Readers per host sharing a cache of fetched versions; 0: each reader fetches its own.
    #[arg(long, default_value_t = 0)]
    pub readers_per_host: usize,
    /// The nats-server binary (2.10 or later).
    #[arg(long, default_value = "nats-server")]
    pub nats_server: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One version as `readers` readers got it.
#[derive(Debug, Serialize)]
struct Row {
    readers: usize,
    version: u64,
    /// Stored as a delta (else whole).
    delta: bool,
    /// Bytes the server took in (the learner's put) and sent out (the readers' fetches).
    in_bytes: u64,
    out_bytes: u64,
    publish_ms: f64,
    /// From the start of the publish to the last reader holding the checked version.
    last_reader_ms: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    shape: BenchShape,
    lr: f64,
    dtype: Dtype,
    snapshot_bytes: usize,
    full_every: usize,
    readers_per_host: usize,
    threads: usize,
    simd: &'static str,
    rows: Vec<Row>,
}

pub fn run(args: BroadcastBenchArgs) -> Result<()> {
    anyhow::ensure!(
        !args.readers.is_empty() && !args.readers.contains(&0),
        "--readers takes counts >= 1, e.g. --readers 1,4,16"
    );
    let snapshots = trained_snapshots(&args).context("bench broadcast: the policy versions")?;
    let rt = crate::roles::runtime()?;
    let mut rows = Vec::new();
    for &n in &args.readers {
        eprintln!("{n} readers ...");
        rows.extend(rt.block_on(broadcast(&args, &snapshots, n))?);
    }
    let report = Report {
        shape: args.shape,
        lr: args.lr,
        dtype: args.dtype,
        snapshot_bytes: snapshots[0].len(),
        full_every: args.full_every,
        readers_per_host: args.readers_per_host,
        threads: candle_core::utils::get_num_threads(),
        simd: caprl_kernels::fastmath::simd().name(),
        rows,
    };
    let out = if args.json {
        serde_json::to_string_pretty(&report)? + "\n"
    } else {
        table(&report)
    };
    write_stdout(&out)
}

/// The snapshots of `args.versions` versions of the model, each after an AdamW update at
/// `args.lr` ([`Updating`]).
fn trained_snapshots(args: &BroadcastBenchArgs) -> Result<Vec<Bytes>> {
    let mut updating = Updating::new(args.shape)?;
    let mut snapshots = Vec::new();
    for _ in 0..args.versions {
        updating.step(args.lr)?;
        let model = updating.model();
        let bytes = snapshot::encode(model, Vec::new(), args.dtype.into(), Some("bench"))?;
        snapshots.push(Bytes::from(bytes));
    }
    Ok(snapshots)
}

/// Publishes every snapshot to `n` readers on a fresh server; a row per version.
async fn broadcast(args: &BroadcastBenchArgs, snapshots: &[Bytes], n: usize) -> Result<Vec<Row>> {
    let (server, monitor) = monitored_server(&args.nats_server)?;
    let hosts = tempfile::tempdir()?;
    // The bus options a run with these snapshot settings has (`BusOptions::of`).
    let options = |cache: Option<PathBuf>| {
        let runtime = RuntimeConfig {
            run_id: "bench-broadcast".into(),
            snapshot_dtype: args.dtype,
            snapshot_full_every: args.full_every as u64,
            snapshot_cache_dir: cache.map(|c| c.display().to_string()).unwrap_or_default(),
            ..RuntimeConfig::default()
        };
        BusOptions {
            request_timeout_secs: 60,
            ..BusOptions::of(&runtime, &NatsConfig::default())
        }
    };
    let nats = NatsConfig::to_url(&server.url());
    let learner = NatsBus::connect(&nats, &options(None)).await?;
    let mut readers = Vec::new();
    for i in 0..n {
        let cache = i
            .checked_div(args.readers_per_host)
            .map(|host| hosts.path().join(format!("host-{host}")));
        readers.push(NatsBus::connect(&nats, &options(cache)).await?);
    }
    let mut rows = Vec::new();
    for (version, data) in (1u64..).zip(snapshots) {
        let before = varz(monitor)?;
        let started = Instant::now();
        let meta = learner.put_snapshot(version, data.clone()).await?;
        let publish_ms = started.elapsed().as_secs_f64() * 1e3;
        let fetched = futures::future::join_all(readers.iter().map(|r| r.get_snapshot(&meta)));
        for bytes in fetched.await {
            anyhow::ensure!(
                bytes? == *data,
                "a reader got other bytes than v{version}'s"
            );
        }
        let last_reader_ms = started.elapsed().as_secs_f64() * 1e3;
        let after = varz(monitor)?;
        rows.push(Row {
            readers: n,
            version,
            delta: !meta.chain.is_empty(),
            in_bytes: after.in_bytes - before.in_bytes,
            out_bytes: after.out_bytes - before.out_bytes,
            publish_ms,
            last_reader_ms,
        });
    }
    drop(server);
    Ok(rows)
}

fn table(r: &Report) -> String {
    let mb = |b: u64| b as f64 / 1e6;
    let mut out = format!(
        "caprl bench broadcast: {:?} shape, {:?} snapshots of {:.1} MB, a version after an AdamW \
         update at lr {:e}, stored whole every {} and as deltas in between; {} ({} threads, SIMD \
         {})\n\
         | readers | version | stored as | MB in | MB out | out per reader, of a snapshot | publish ms | publish to last reader ms |\n\
         |---:|---:|---|---:|---:|---:|---:|---:|\n",
        r.shape,
        r.dtype,
        mb(r.snapshot_bytes as u64),
        r.lr,
        r.full_every,
        match r.readers_per_host {
            0 => "every reader fetches its own copy".to_string(),
            k => format!("{k} readers per host share a cache (runtime.snapshot_cache_dir)"),
        },
        r.threads,
        r.simd,
    );
    for row in &r.rows {
        out.push_str(&format!(
            "| {} | {} | {} | {:.1} | {:.1} | {:.1}% | {:.0} | {:.0} |\n",
            row.readers,
            row.version,
            if row.delta { "delta" } else { "whole" },
            mb(row.in_bytes),
            mb(row.out_bytes),
            100.0 * row.out_bytes as f64 / row.readers as f64 / r.snapshot_bytes.max(1) as f64,
            row.publish_ms,
            row.last_reader_ms,
        ));
    }
    out
}
